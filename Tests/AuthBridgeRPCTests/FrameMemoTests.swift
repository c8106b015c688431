import AuthBridgeJSON
@testable import AuthBridgeRPC
import Testing

/// A frame decoded from a remembered shape must be exactly what a full parse
/// gives: each test decodes with the memo and without it and compares.
@Suite("Frame memo")
struct FrameMemoTests {
    /// What a decode told, in a comparable form.
    private struct Decoded: Equatable, CustomStringConvertible {
        var kind: String
        var params: JSON?
        var description: String { kind + (params.map { " " + String(decoding: $0.serialized(), as: UTF8.self) } ?? "") }
    }

    private func summary(_ message: IncomingMessage) -> Decoded {
        switch message {
        case .request(let request): Decoded(kind: "request \(request.id) \(request.method)", params: request.params)
        case .notification(let notification): Decoded(kind: "notification \(notification.method)", params: notification.params)
        case .response(let id): Decoded(kind: "response \(String(describing: id))")
        case .invalid(let id, let error): Decoded(kind: "invalid \(String(describing: id)) \(error.code.rawValue)")
        }
    }

    private func full(_ text: String) -> Decoded {
        var text = text
        return text.withUTF8 { summary(IncomingMessage.decode(UnsafeRawBufferPointer($0))) }
    }

    /// Decodes `text` with `memo`.
    private func memoized(_ memo: inout FrameMemo, _ text: String) -> Decoded {
        var text = text
        return text.withUTF8 { summary(memo.decode(UnsafeRawBufferPointer($0))) }
    }

    /// Every frame of `texts`, decoded in order by one memo, equals its full parse.
    private func expectSameAsParsing(_ texts: [String], sourceLocation: SourceLocation = #_sourceLocation) {
        var memo = FrameMemo()
        for text in texts {
            #expect(memoized(&memo, text) == full(text), "\(text)", sourceLocation: sourceLocation)
        }
    }

    private func frame(id: String, params: String = #"{"provider":"work"}"#, spacing: String = "") -> String {
        #"{"jsonrpc":"2.0","id"\#(spacing):\#(spacing)\#(id),"method":"getAccessToken","params":\#(params)}"#
    }

    @Test func theSameRequestWithOtherIdsIsAnsweredFromItsShape() {
        var memo = FrameMemo()
        _ = memoized(&memo, frame(id: "1"))
        for id in ["2", "0", "-7", "123456789012345678", #""a""#, #""req-42 x""#, #""""#] {
            #expect(memoized(&memo, frame(id: id)) == full(frame(id: id)))
        }
        // Remembered, not parsed: the shape gives the request even where a parse is not tried.
        var text = frame(id: "99")
        let recalled = text.withUTF8 { bytes -> Request? in
            guard case .request(let request) = memo.decode(UnsafeRawBufferPointer(bytes)) else { return nil }
            return request
        }
        #expect(recalled?.id == .int(99))
        #expect(recalled?.params?["provider"] == "work")
    }

    @Test func idsThatAreNotPlainAreParsed() {
        expectSameAsParsing([
            frame(id: "1"),
            frame(id: "1.0"), frame(id: "1e3"), frame(id: "01"), frame(id: "-0"), frame(id: "1234567890123456789012"),
            frame(id: #""a\"b""#), frame(id: #""\u00e9""#), frame(id: "\"é\""), frame(id: "null"), frame(id: "true"),
            frame(id: "[1]"), frame(id: #"{"x":1}"#), frame(id: #"1,"id":2"#), frame(id: #"1,"params":{}"#), frame(id: ""),
            frame(id: "\"unterminated"),
        ])
    }

    @Test func anIdInsideTheParamsIsNeverTakenForTheRequestsId() {
        // The top-level id written with spaces, a nested "id" with the same value.
        let nested = #"{"provider":"work","id":5}"#
        expectSameAsParsing([
            frame(id: "5", params: nested, spacing: " "),
            frame(id: "6", params: nested, spacing: " "),
            frame(id: "5", params: #"{"provider":"work","id":6}"#, spacing: " "),
            #"{"params":{"id":1},"jsonrpc":"2.0","method":"m","id":1}"#,
            #"{"params":{"id":1},"jsonrpc":"2.0","method":"m","id":2}"#,
            #"{"params":{"id":3},"jsonrpc":"2.0","method":"m","id":2}"#,
            #"{"params":["id",{"id":4}],"jsonrpc":"2.0","method":"id","id":4}"#,
            #"{"params":["id",{"id":4}],"jsonrpc":"2.0","method":"id","id":5}"#,
        ])
    }

    @Test func framesWithEscapesOrTwoIdsAreNeverRemembered() {
        // An escaped key is an "id" too; which of two ids counts is the parser's business.
        expectSameAsParsing([
            #"{"jsonrpc":"2.0","\u0069d":1,"id":1,"method":"m"}"#,
            #"{"jsonrpc":"2.0","\u0069d":1,"id":2,"method":"m"}"#,
            #"{"jsonrpc":"2.0","id":1,"id":1,"method":"m"}"#,
            #"{"jsonrpc":"2.0","id":1,"id":2,"method":"m"}"#,
            #"{"jsonrpc":"2.0","id":1,"method":"m","params":{"k":"a\"id\":1"}}"#,
            #"{"jsonrpc":"2.0","id":2,"method":"m","params":{"k":"a\"id\":1"}}"#,
        ])
    }

    @Test func otherParamsMethodsAndMessagesAreParsed() {
        expectSameAsParsing([
            frame(id: "1"), frame(id: "2", params: #"{"provider":"home"}"#), frame(id: "3"),
            #"{"jsonrpc":"2.0","id":4,"method":"checkSignInStatus","params":{"provider":"work"}}"#,
            #"{"jsonrpc":"2.0","method":"getAccessToken","params":{"provider":"work"}}"#,
            #"{"jsonrpc":"2.0","id":5,"result":{}}"#,
            #"{"jsonrpc":"2.0","id":6,"method":"getAccessToken","params":{"provider":"work"}} "#,
            "[" + frame(id: "7") + "]",
        ])
    }

    @Test func aFewShapesTakingTurnsAreEachRemembered() {
        var memo = FrameMemo()
        for round in 0..<3 {
            for shape in 0..<FrameMemo.capacity {
                let text = #"{"jsonrpc":"2.0","id":\#(round * 10 + shape),"method":"m\#(shape)","params":{}}"#
                #expect(memoized(&memo, text) == full(text))
            }
        }
    }

    /// Every token put where the id goes, remembered shape or not, decodes as the parser says.
    @Test func anyTokenInTheIdsPlaceDecodesAsTheParserSays() {
        let tokens = [
            "1", "-1", "0", "00", "9223372036854775807", "999999999999999999", "-999999999999999999", "1.5", "2E2", "+1", "- 1",
            #""x""#, #""""#, #"" ""#, #""\n""#, "\"\u{7F}\"", "\"a", "a\"", "\"\"\"", "nul", "tru", "{}", "[]", "1}", "1,", "\"1\",",
        ]
        var memo = FrameMemo()
        _ = memoized(&memo, frame(id: "1"))
        for token in tokens {
            #expect(memoized(&memo, frame(id: token)) == full(frame(id: token)), "\(token)")
        }
    }

    @Test func plainIDs() {
        func id(_ text: String) -> RequestID? {
            var text = text
            return text.withUTF8 { FrameMemo.plainID(UnsafeRawBufferPointer($0)) }
        }
        #expect(id("42") == .int(42))
        #expect(id("-42") == .int(-42))
        #expect(id("0") == .int(0))
        #expect(id(#""abc""#) == .string("abc"))
        #expect(id("007") == nil)
        #expect(id("-") == nil)
        #expect(id("1234567890123456789") == nil)
        #expect(id(#""a\"""#) == nil)
        #expect(id("\"") == nil)
    }
}
