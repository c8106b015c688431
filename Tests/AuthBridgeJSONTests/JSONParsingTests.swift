import AuthBridgeJSON
import Testing

@Suite("Parsing")
struct JSONParsingTests {
    @Test func scalarsAndContainers() throws {
        let value = try JSON.parse(#"{"a":1,"b":-2.5,"c":"x","d":[true,false,null],"e":{}}"#)
        #expect(value["a"] == .int(1))
        #expect(value["b"] == .double(-2.5))
        #expect(value["c"]?.stringValue == "x")
        #expect(value["d"] == [true, false, nil])
        #expect(value["e"] == .object([:]))
    }

    @Test func topLevelScalarsAreAccepted() throws {
        #expect(try JSON.parse("42") == .int(42))
        #expect(try JSON.parse(#""text""#) == .string("text"))
        #expect(try JSON.parse("null") == .null)
    }

    @Test func integersKeepFullPrecision() throws {
        let big = Int64(1) << 53 + 1
        #expect(try JSON.parse("\(big)").intValue == big)
        #expect(try JSON.parse("\(Int64.max)") == .int(.max))
    }

    @Test func unicodeAndEscapesRoundTrip() throws {
        let text = "snow ☃, emoji 🎉, quote \", newline \n, nul \u{0}"
        let parsed = try JSON.parse(JSON.string(text).serialized())
        #expect(parsed == .string(text))
    }

    @Test(arguments: [
        "", "{", "[1,", "{\"a\":}", "nope", "{\"a\":1}x", "{\"a\":1,\"a\":2}", "01",
    ])
    func malformedTextIsRejected(_ text: String) {
        #expect(throws: JSONParseError.self) { try JSON.parse(text) }
    }

    @Test func invalidUTF8IsRejected() {
        let bytes: [UInt8] = [0x22, 0xC3, 0x28, 0x22]
        #expect(throws: JSONParseError.self) { try JSON.parse(bytes) }
    }

    @Test func errorsCarryAPosition() {
        do {
            _ = try JSON.parse("{\n  \"a\": x }")
            Issue.record("parse should have failed")
        } catch {
            #expect(error.line == 2)
            #expect(!error.message.isEmpty)
        }
    }

    // Valid JSON is never refused for its numbers (RFC 8259 §6 sets no range); jansson refuses the
    // whole text, so `parse` falls back (WideNumbers).

    @Test(arguments: [
        ("9223372036854775808", 9.223372036854775808e18), ("-9223372036854775809", -9.223372036854775809e18),
        ("18446744073709551616", 1.8446744073709551616e19), ("1" + String(repeating: "0", count: 40), 1e40),
    ])
    func integersBeyond64BitsBecomeTheNearestDouble(_ text: String, _ expected: Double) throws {
        let value = try JSON.parse(#"{"id":7,"params":{"n":\#(text),"s":"\#(text)","k":[1,-2,3.5]}}"#)
        #expect(value["params"]?["n"] == .double(expected))
        #expect(value["params"]?["s"] == .string(text), "a string of digits stays a string")
        #expect(value["id"] == .int(7))
        #expect(value["params"]?["k"] == [1, -2, 3.5])
    }

    @Test(arguments: [
        ("1e999", Double.infinity), ("-1e999", -Double.infinity), ("1.7976931348623157e309", Double.infinity),
        ("-2E+400", -Double.infinity),
    ])
    func numbersBeyondADoubleBecomeInfinity(_ text: String, _ expected: Double) throws {
        #expect(try JSON.parse("[\(text), 1]") == [.double(expected), 1])
        #expect(try JSON.parse(text) == .double(expected))
    }

    @Test func underflowIsZeroAsBefore() throws {
        #expect(try JSON.parse("1e-999") == .double(0))
    }

    @Test func aStringThatLooksLikeTheFallbacksSentinelStaysAString() throws {
        let value = try JSON.parse(##"["\u0000abc#0", 1e999, "\u0000", "#0"]"##)
        #expect(value == [.string("\u{0}abc#0"), .double(.infinity), .string("\u{0}"), .string("#0")])
    }

    @Test(arguments: [#"{"a":99999999999999999999999,}"#, #"[1e999 2]"#, #"{"a":1e999,"a":2}"#, #"[01e999]"#, #"[-]"#])
    func invalidTextWithWideNumbersIsStillRefused(_ text: String) {
        #expect(throws: JSONParseError.self) { try JSON.parse(text) }
    }

    @Test func tooDeepIsReportedAsSuch() {
        let deep = String(repeating: "[", count: 3000) + String(repeating: "]", count: 3000)
        do {
            _ = try JSON.parse(deep)
            Issue.record("parse should have failed")
        } catch {
            #expect(error.isTooDeep)
        }
        do {
            _ = try JSON.parse("[1,")
            Issue.record("parse should have failed")
        } catch {
            #expect(!error.isTooDeep)
        }
    }

    @Test func theEnvelopeOfATooDeepTextCanBeRead() throws {
        let deep = String(repeating: "[", count: 3000) + String(repeating: "]", count: 3000)
        let text = #"{"id":"x","s":"[[[{","params":{"a":\#(deep),"b":2}}"#
        let (value, truncated) = try Array(text.utf8).withUnsafeBytes { try JSON.parse($0, truncatingBeyond: 2) }
        #expect(truncated)
        #expect(value["id"] == "x" && value["s"] == "[[[{")
        #expect(value["params"]?["a"] == .null && value["params"]?["b"] == 2)
    }

    @Test(
        arguments: [
            ("0", 0), ("-0", 0), ("-0.0", 0), ("7.0", 7), ("1e3", 1000), ("1E+3", 1000), ("3.14e2", 314), ("0.5e1", 5), ("100e-2", 1),
            ("9223372036854775807", .max), ("-9223372036854775808", .min), ("922337203685477580.7e1", .max), ("0e999999999999", 0),
        ] as [(String, Int64)])
    func exactIntegersAreReadFromTheText(_ text: String, _ value: Int64) {
        var text = text
        #expect(text.withUTF8 { JSONText.exactInteger(UnsafeRawBufferPointer($0)) } == value)
    }

    @Test(arguments: [
        "1.5", "1e-999", "1.0000000000000000001", "0.99999999999999999999", "9223372036854775808", "-9223372036854775809", "1e19",
        "1e999999999999", "1e-999999999999", "", "-", "01", "1.", ".5", "1e", "+1", "0x10", "1 ",
    ])
    func otherNumbersAndTokensAreNot(_ text: String) {
        var text = text
        #expect(text.withUTF8 { JSONText.exactInteger(UnsafeRawBufferPointer($0)) } == nil)
    }

    @Test func aMembersValueIsFoundWhereItIs() {
        func value(_ path: [String], _ text: String) -> String? {
            var text = text
            return text.withUTF8 { buffer in
                let raw = UnsafeRawBufferPointer(buffer)
                return JSONText.span(of: path, in: raw).map { String(decoding: raw[$0], as: UTF8.self) }
            }
        }
        let text = #" { "a" : [1, {"id": 9}], "s": "}\"id\":", "p": {"x": {"id": 1}, "id" : 2.50 }, "\u0069d":-1e3 } "#
        #expect(value(["id"], text) == "-1e3")
        #expect(value(["p", "id"], text) == "2.50")
        #expect(value(["p", "x"], text) == #"{"id": 1}"#)
        #expect(value(["s"], text) == #""}\"id\":""#)
        #expect(value(["missing"], text) == nil)
        #expect(value(["a", "id"], text) == nil)
        #expect(value(["id"], "[1]") == nil)
    }
}
