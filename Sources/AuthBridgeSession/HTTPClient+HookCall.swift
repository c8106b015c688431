import AuthBridgeJSON
import AuthBridgeNetwork
import AuthBridgePluginHost

extension HTTPClient {
    /// Performs one request for a hook (a plugin's `host->http`, a standard step) on its thread;
    /// cancelling the hook call cancels the request.
    public func perform(_ request: JSON, call: HookCall?) -> Result<JSON, ProviderFailure> {
        perform(request, onCancel: { cancel in call?.onCancel(cancel) })
    }
}
