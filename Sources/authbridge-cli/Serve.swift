import ArgumentParser
import AuthBridgeLaunch

/// `authbridge serve`: the JSON-RPC bridge on stdin/stdout. The `authbridge` executable starts
/// it without this parser when it can (FastCommandLine); it is parsed here for help, for
/// errors, and for spellings the fast start leaves to ArgumentParser.
struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Serve the JSON-RPC 2.0 bridge on stdin/stdout (the default).")

    @OptionGroup(title: "Host options") var options: ServerHostOptions

    @Flag(help: "Open browser sign-in pages with xdg-open (for use by hand; frontends open the URL from the openUrl event).")
    var openBrowser = false

    @Flag(help: .hidden)
    var testClock = false

    var settings: ServeSettings {
        var settings = ServeSettings()
        settings.host = options.settings
        settings.openBrowser = openBrowser
        settings.testClock = testClock
        return settings
    }

    func run() async throws {
        await Serving.run(settings)
    }
}
