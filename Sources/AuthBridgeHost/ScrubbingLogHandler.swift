import AuthBridgePluginHost
import AuthBridgeRedaction
import Logging

/// A log handler that masks every secret the process knows (`KnownSecrets`)
/// and what looks like one (`Redaction`) in messages and metadata before
/// they reach the handler behind it: the last line of defence for stderr.
public struct ScrubbingLogHandler: LogHandler {
    private var inner: any LogHandler

    public init(wrapping inner: any LogHandler) { self.inner = inner }

    public var logLevel: Logger.Level {
        get { inner.logLevel }
        set { inner.logLevel = newValue }
    }

    public var metadata: Logger.Metadata {
        get { inner.metadata }
        set { inner.metadata = newValue }
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { inner[metadataKey: key] }
        set { inner[metadataKey: key] = newValue }
    }

    public func log(event: LogEvent) {
        var event = event
        event.message = "\(Self.scrub(event.message.description))"
        event.metadata = event.metadata?.mapValues(Self.scrub)
        // An error's description may carry provider text: only its type reaches the log.
        if let error = event.error {
            event.error = nil
            event.metadata?["errorType"] = "\(type(of: error))"
        }
        inner.log(event: event)
    }

    static func scrub(_ text: String) -> String { KnownSecrets.shared.scrub(Redaction.redact(text)) }

    static func scrub(_ value: Logger.MetadataValue) -> Logger.MetadataValue {
        switch value {
        case .string(let text): .string(scrub(text))
        case .stringConvertible(let convertible): .string(scrub(convertible.description))
        case .array(let values): .array(values.map(scrub))
        case .dictionary(let values): .dictionary(values.mapValues(scrub))
        }
    }
}
