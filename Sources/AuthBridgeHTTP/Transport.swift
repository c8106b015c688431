import AuthBridgeJSON
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

// The host's HTTP transport, in its own shared library so that
// FoundationNetworking (and libcurl) load only when the first request is made
// (~5–6 ms of start-up otherwise). The host dlopens it and calls these three
// C entry points; requests arrive already vetted and encoded by the host.
//
// Request JSON:  {"method","url","headers":{…},"body":"…"?,"timeoutMs":…}
// Answer JSON:   {"status","headers":{lower-case…},"body":"…"}
//             or {"error":{"reason":"timeout"|"refused"|…,"message":"…"}}
//
// Threading: `perform` may be called from any thread; `done` is called
// exactly once, on a URLSession delegate thread. `cancel` may be called
// any time before `release`; `release` is called once, after `done`.

public typealias HTTPDone = @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<UInt8>?, Int) -> Void

/// One request in flight.
final class InFlight: @unchecked Sendable {
    let lock = NSLock()
    var task: URLSessionDataTask?
    var cancelled = false
}

/// Refuses redirects: a token endpoint that redirects is misconfigured, and
/// following could downgrade to http or leak a body to another host.
final class NoRedirects: NSObject, URLSessionTaskDelegate, @unchecked Sendable {
    func urlSession(_ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
                    newRequest request: URLRequest, completionHandler: @escaping (URLRequest?) -> Void) {
        completionHandler(nil)
    }
}

let session: URLSession = {
    let configuration = URLSessionConfiguration.ephemeral
    configuration.httpCookieStorage = nil
    configuration.httpShouldSetCookies = false
    configuration.urlCache = nil
    configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
    return URLSession(configuration: configuration, delegate: NoRedirects(), delegateQueue: nil)
}()

@_cdecl("authbridge_http_perform_v1")
public func authbridgeHTTPPerform(_ bytes: UnsafePointer<UInt8>, _ length: Int,
                                  _ context: UnsafeMutableRawPointer?, _ done: HTTPDone) -> UnsafeMutableRawPointer {
    let flight = InFlight()
    let handle = Unmanaged.passRetained(flight).toOpaque()
    let completion = Completion(context: context, done: done)
    let finish = completion.finish
    let fail = completion.fail
    guard let request = try? JSON.parse(UnsafeRawBufferPointer(start: bytes, count: length)),
          let urlText = request["url"]?.stringValue, let url = URL(string: urlText)
    else {
        fail("invalidRequest", "the HTTP request could not be read")
        return handle
    }
    var urlRequest = URLRequest(url: url)
    urlRequest.httpMethod = request["method"]?.stringValue ?? "GET"
    urlRequest.timeoutInterval = Double(request["timeoutMs"]?.intValue ?? 30_000) / 1000
    for (name, value) in request["headers"]?.objectValue ?? [:] {
        if let value = value.stringValue { urlRequest.setValue(value, forHTTPHeaderField: name) }
    }
    if let body = request["body"]?.stringValue { urlRequest.httpBody = Data(body.utf8) }

    let task = session.dataTask(with: urlRequest) { data, response, error in
        if let error {
            let (reason, message) = classify(error)
            fail(reason, message)
            return
        }
        guard let http = response as? HTTPURLResponse else {
            fail("protocol", "the server's answer was not HTTP")
            return
        }
        var headers: [String: JSON] = [:]
        for (name, value) in http.allHeaderFields {
            if let name = name as? String, let value = value as? String { headers[name.lowercased()] = .string(value) }
        }
        let body = data.map { String(decoding: $0, as: UTF8.self) } ?? ""
        finish(["status": .int(Int64(http.statusCode)), "headers": .object(headers), "body": .string(body)])
    }
    flight.lock.lock()
    flight.task = task
    let cancelledEarly = flight.cancelled
    flight.lock.unlock()
    if cancelledEarly { task.cancel() }
    task.resume()
    return handle
}

/// The host's completion callback and its context (owned by the host).
struct Completion: @unchecked Sendable {
    let context: UnsafeMutableRawPointer?
    let done: HTTPDone

    func finish(_ answer: JSON) {
        let text = answer.serialized()
        text.withUnsafeBufferPointer { done(context, $0.baseAddress, $0.count) }
    }

    func fail(_ reason: String, _ message: String) {
        finish(["error": ["reason": .string(reason), "message": .string(message)]])
    }
}

@_cdecl("authbridge_http_cancel_v1")
public func authbridgeHTTPCancel(_ handle: UnsafeMutableRawPointer) {
    let flight = Unmanaged<InFlight>.fromOpaque(handle).takeUnretainedValue()
    flight.lock.lock()
    flight.cancelled = true
    let task = flight.task
    flight.lock.unlock()
    task?.cancel()
}

@_cdecl("authbridge_http_release_v1")
public func authbridgeHTTPRelease(_ handle: UnsafeMutableRawPointer) {
    Unmanaged<InFlight>.fromOpaque(handle).release()
}

/// Maps URLSession errors to the ABI's transient reasons. The message never
/// contains the URL's query (it may hold a code or token).
func classify(_ error: Error) -> (String, String) {
    guard let urlError = error as? URLError else { return ("network", "the request failed") }
    switch urlError.code {
    case .timedOut: return ("timeout", "the server did not answer in time")
    case .cannotConnectToHost: return ("refused", "the server refused the connection")
    case .networkConnectionLost: return ("reset", "the connection was reset")
    case .cannotFindHost, .dnsLookupFailed: return ("dns", "the server's name could not be resolved")
    case .secureConnectionFailed, .serverCertificateUntrusted, .serverCertificateHasBadDate,
         .serverCertificateNotYetValid, .serverCertificateHasUnknownRoot, .clientCertificateRejected:
        return ("tls", "the TLS connection failed")
    case .cancelled: return ("cancelled", "the request was cancelled")
    case .notConnectedToInternet: return ("offline", "the machine is offline")
    default: return ("network", "the request failed (\(urlError.code.rawValue))")
    }
}
