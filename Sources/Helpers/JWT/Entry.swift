import AuthBridgeJSON

// ID-token verification, in its own shared library so that jwt-kit,
// swift-crypto and Foundation load only when the first ID token arrives
// (the host's cold start stays < 10 ms). The host dlopens it and calls one
// C entry point; like the HTTP helper, requests and answers are JSON text.
//
// Request JSON:  {"token","jwks":{…},"issuer","audience","nonce"?,"nowMs",
//                 "leewaySeconds"? (60),"algorithms"? (see SignatureAlgorithm)}
// Answer JSON:   {"claims":{…}}
//             or {"error":{"reason":"malformed"|"unknownKey"|…,"message":"…"}}
//
// Threading: `authbridge_jwt_verify_v1` may be called from any thread and
// returns at once; `done` is called exactly once, on the calling thread for a
// request that is not JSON, otherwise on a Swift concurrency thread. The
// request bytes are read before the call returns.

public typealias JWTDone = @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<UInt8>?, Int) -> Void

@_cdecl("authbridge_jwt_verify_v1")
public func verify(
    _ bytes: UnsafePointer<UInt8>, _ length: Int,
    _ context: UnsafeMutableRawPointer?, _ done: JWTDone
) {
    let completion = Completion(context: context, done: done)
    guard let request = try? JSON.parse(UnsafeRawBufferPointer(start: bytes, count: length)) else {
        completion.fail("invalidRequest", "the verification request is not JSON")
        return
    }
    Task.detached {
        completion.finish(await IDTokenCheck.verify(request: request))
    }
}

/// The host's completion callback and its context (owned by the host).
struct Completion: @unchecked Sendable {
    let context: UnsafeMutableRawPointer?
    let done: JWTDone

    func finish(_ answer: JSON) {
        let text = answer.serialized()
        text.withUnsafeBufferPointer { done(context, $0.baseAddress, $0.count) }
    }

    func fail(_ reason: String, _ message: String) {
        finish(["error": ["reason": .string(reason), "message": .string(message)]])
    }
}
