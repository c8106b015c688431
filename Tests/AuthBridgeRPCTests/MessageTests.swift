import AuthBridgeJSON
@testable import AuthBridgeRPC
import Testing

@Suite("Message classification")
struct MessageTests {
    private func decode(_ text: String) -> IncomingMessage {
        var text = text
        return text.withUTF8 { IncomingMessage.decode(UnsafeRawBufferPointer($0)) }
    }

    private func expectInvalid(
        _ text: String, code: RPCError.Code, id: RequestID? = nil,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        guard case .invalid(let gotID, let error) = decode(text) else {
            Issue.record("expected an invalid frame for \(text)", sourceLocation: sourceLocation)
            return
        }
        #expect(error.code == code, sourceLocation: sourceLocation)
        #expect(gotID == id, sourceLocation: sourceLocation)
    }

    @Test func requestsAndNotifications() {
        guard case .request(let request) = decode(#"{"jsonrpc":"2.0","id":"a","method":"m","params":{"x":1}}"#) else {
            Issue.record("not a request")
            return
        }
        #expect(request.id == .string("a"))
        #expect(request.method == "m")
        #expect(request.params?["x"] == 1)
        guard case .notification(let notification) = decode(#"{"jsonrpc":"2.0","method":"n"}"#) else {
            Issue.record("not a notification")
            return
        }
        #expect(notification.method == "n")
        #expect(notification.params == nil)
    }

    @Test func integerIDsAreExact() {
        guard case .request(let request) = decode(#"{"jsonrpc":"2.0","id":9007199254740993,"method":"m"}"#) else {
            Issue.record("not a request")
            return
        }
        #expect(request.id == .int(9_007_199_254_740_993))
    }

    @Test func parseErrors() {
        expectInvalid("garbage", code: .parseError)
        expectInvalid(#"{"jsonrpc":"2.0","id":1,"method":"m""#, code: .parseError)
    }

    @Test func invalidRequests() {
        expectInvalid("[]", code: .invalidRequest)
        expectInvalid(#"[{"jsonrpc":"2.0","id":1,"method":"m"}]"#, code: .invalidRequest)
        expectInvalid("42", code: .invalidRequest)
        expectInvalid(#"{"jsonrpc":"2.0","id":1}"#, code: .invalidRequest, id: .int(1))
        expectInvalid(#"{"jsonrpc":"1.0","id":2,"method":"m"}"#, code: .invalidRequest, id: .int(2))
        expectInvalid(#"{"jsonrpc":2.0,"id":3,"method":"m"}"#, code: .invalidRequest, id: .int(3))
        expectInvalid(#"{"id":4,"method":"m"}"#, code: .invalidRequest, id: .int(4))
        expectInvalid(#"{"jsonrpc":"2.0","id":null,"method":"m"}"#, code: .invalidRequest)
        expectInvalid(#"{"jsonrpc":"2.0","id":1.5,"method":"m"}"#, code: .invalidRequest)
        expectInvalid(#"{"jsonrpc":"2.0","id":{},"method":"m"}"#, code: .invalidRequest)
        expectInvalid(#"{"jsonrpc":"2.0","id":5,"method":7}"#, code: .invalidRequest, id: .int(5))
        expectInvalid(#"{"jsonrpc":"2.0","id":6,"method":"m","params":"x"}"#, code: .invalidRequest, id: .int(6))
    }

    @Test func responsesFromThePeerAreRecognised() {
        guard case .response(let id) = decode(#"{"jsonrpc":"2.0","id":7,"result":null}"#) else {
            Issue.record("not a response")
            return
        }
        #expect(id == .int(7))
    }

    @Test func outgoingFramesHaveExactlyOneOfResultOrError() throws {
        let result = try JSON.parse(OutgoingFrame.result(id: .int(1), ["ok": true]))
        #expect(result["result"] != nil && result["error"] == nil && result["jsonrpc"] == "2.0")
        let error = try JSON.parse(OutgoingFrame.error(id: nil, .parseError("x")))
        #expect(error["result"] == nil && error["id"] == .null && error["error"]?["code"] == .int(-32700))
        let notification = try JSON.parse(OutgoingFrame.notification(method: "n", params: nil))
        #expect(notification["id"] == nil && notification["params"] == nil)
    }

    @Test func idsWithAZeroFractionAreIntegers() {
        for (text, id) in [
            ("7.0", Int64(7)), ("1e3", 1000), ("-2.0E1", -20), ("3.14e2", 314), ("-0.0", 0), ("1e18", 1_000_000_000_000_000_000),
            ("12345678901234567.0", 12_345_678_901_234_567), ("-9223372036854775808.0", .min),
        ] {
            guard case .request(let request) = decode(#"{"jsonrpc":"2.0","id":\#(text),"method":"m"}"#) else {
                Issue.record("\(text) is not a request id")
                continue
            }
            #expect(request.id == .int(id))
        }
        for text in ["1.5", "1e-3", "9223372036854775808", "9.3e18", "1e999", "1e300"] {
            expectInvalid(#"{"jsonrpc":"2.0","id":\#(text),"method":"m"}"#, code: .invalidRequest)
        }
    }

    /// Issue 26: `1e-999` was answered as id 0 — a double reads it as 0.0 — so its answer could
    /// be taken for request 0's. A fraction is refused however close to an integer a double puts it.
    @Test func aFractionADoubleCannotTellFromAnIntegerIsNotAnID() {
        for text in ["1e-999", "-1e-400", "1.0000000000000000001", "0.99999999999999999999", "4503599627370496.5"] {
            expectInvalid(#"{"jsonrpc":"2.0","id":\#(text),"method":"m"}"#, code: .invalidRequest)
            expectInvalid(#"{"jsonrpc":"2.0","id":\#(text)}"#, code: .invalidRequest)
        }
        // Read where the id is, whatever comes before it or however its key is written.
        guard case .request(let request) = decode(#"{"params":{"id":1e-999,"x":[{"id":2}]},"jsonrpc":"2.0","\u0069d" : 5.0e0,"method":"m"}"#)
        else {
            Issue.record("not a request")
            return
        }
        #expect(request.id == .int(5))
    }

    @Test func aCancelsIDIsReadExactlyToo() {
        func cancelled(_ id: String) -> JSON? {
            guard case .notification(let notification) = decode(#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":\#(id)}}"#)
            else { return nil }
            return notification.params?["id"]
        }
        #expect(cancelled("1e-999") == .null)
        #expect(cancelled("1.0000000000000000001") == .null)
        #expect(cancelled("2.0") == .int(2))
        #expect(cancelled("3") == .int(3))
        #expect(cancelled(#""s""#) == .string("s"))
    }

    @Test func aRequestWithAnOutOfRangeNumberIsARequest() {
        guard case .request(let request) = decode(#"{"jsonrpc":"2.0","id":3,"method":"m","params":{"n":1e999}}"#) else {
            Issue.record("not a request")
            return
        }
        #expect(request.id == .int(3) && request.params?["n"] == .double(.infinity))
    }

    @Test func aRequestTooDeepToParseIsRefusedWithItsID() {
        let deep = String(repeating: "[", count: 2100) + String(repeating: "]", count: 2100)
        expectInvalid(#"{"jsonrpc":"2.0","id":"d","method":"m","params":{"x":\#(deep)}}"#, code: .invalidRequest, id: .string("d"))
        expectInvalid(#"{"jsonrpc":"2.0","method":"n","params":{"x":\#(deep)}}"#, code: .invalidRequest)
        expectInvalid(#"{"jsonrpc":"2.0","id":"d","method":"m","params":{"x":\#(deep)}"#, code: .parseError)
    }
}
