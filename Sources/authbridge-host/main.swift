import AuthBridgeLaunch
import AuthBridgeSystem

#if canImport(Glibc)
import Glibc
#endif

// `authbridge-host`: the host. `authbridge` (the C front door on PATH, Sources/authbridge) hands it
// `serve`, `agent` and `plugin-runner` — what frontends, the service manager and the host itself
// start, many times a day or for a whole session — which start here with only what serving needs,
// and `token` when no agent serves it (a script's token, from the vault). Every other command line
// (serve or agent spelled in ways only ArgumentParser reads, a token with something to explain)
// goes to authbridge-cli, which this process becomes with the same arguments and environment (and
// name: started as git-credential-authbridge it is git's credential helper).

// Started as `git-credential-authbridge` (git's name for the helper), it is the CLI's git helper.
let program = CommandLine.arguments.first ?? ""
switch FastCommandLine.command(program: program, Array(CommandLine.arguments.dropFirst()), standardInputIsTerminal: isatty(0) == 1) {
case .serve(let settings):
    ProcessHardening.apply()
    await Serving.run(settings)
case .agent(let settings):
    ProcessHardening.apply()
    await AgentRunning.run(settings)
case .pluginRunner(let runner):
    ProcessHardening.apply()
    PluginRunning.run(parent: runner.parent, plugin: runner.plugin, memoryLimitMB: runner.memoryLimitMB)
case .token(let command):
    if let code = await TokenPrinting.answer(command) { exit(code) }
    becomeCommandLineTool()
case nil:
    becomeCommandLineTool()
}

/// Runs authbridge-cli in this process's place, with the same arguments and environment.
func becomeCommandLineTool() -> Never {
    var failures: [String] = []
    for path in HelperLibraryLocation.candidates("authbridge-cli") {
        execv(path, CommandLine.unsafeArgv)
        failures.append("\(path): \(String(cString: strerror(errno)))")
    }
    StandardError.write("authbridge: cannot run the command-line tool authbridge-cli (\(failures.joined(separator: "; "))); reinstall AuthBridge.")
    exit(1)
}
