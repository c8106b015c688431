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
}
