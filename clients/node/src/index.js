// AuthBridge client for Node: `const bridge = await AuthBridge.start({...})`.
// See ../README.md; the types are in ../index.d.ts.

export { AuthBridge, CLIENT_VERSION, hostArguments, resolveHostPath } from './client.js';
export {
  PROTOCOL_VERSION,
  ErrorCodes,
  errorClasses,
  errorFromResponse,
  AuthBridgeError,
  ParseError,
  InvalidRequestError,
  MethodNotFoundError,
  InvalidParamsError,
  InternalError,
  ServerNotInitializedError,
  RequestCancelledError,
  NotSignedInError,
  ProviderUnknownError,
  ProviderRefusedError,
  UserCancelledError,
  TimeoutError,
  ProviderUnavailableError,
  PluginError,
  UnsupportedError,
  UnsupportedProtocolVersionError,
  StorageError,
  NoPendingSignInError,
  ConfigurationError,
  AbortError,
  RequestTimeoutError,
  HostExitedError,
  HostNotFoundError,
  AgentNotRunningError,
  InsecureUrlError,
} from './protocol.js';
export { openInBrowser, profileNameForUrl } from './resource_url.js';
export { parseChallenges } from './authorized_fetch.js';
export { LineDecoder, MAX_LINE_BYTES, agentSocketPath } from './transport.js';
