import AuthBridgeJSON
import Testing

@Suite("Serialization")
struct JSONSerializationTests {
    @Test func compactOutputHasNoRawNewlines() {
        let value: JSON = ["text": "line one\nline two\r\n", "list": [1, 2, ["nested": "a\u{2028}b"]]]
        let bytes = value.serialized()
        #expect(!bytes.contains(0x0A))
        #expect(!bytes.contains(0x0D))
    }

    @Test func roundTripPreservesValues() throws {
        let value: JSON = ["id": .int(-7), "pi": 3.25, "ok": true, "none": nil, "s": "ü", "a": [], "o": [:]]
        #expect(try JSON.parse(value.serialized()) == value)
    }

    @Test func sortedKeysAreStable() {
        let value: JSON = ["b": 1, "a": 2, "c": 3]
        #expect(value.serializedString(sortKeys: true) == #"{"a":2,"b":1,"c":3}"#)
    }

    @Test func nonFiniteNumbersBecomeNull() throws {
        #expect(JSON.double(.nan).serializedString() == "null")
        #expect(JSON.double(.infinity).serializedString() == "null")
    }

    @Test func appendsToAnExistingBuffer() {
        var buffer = Array("prefix:".utf8)
        JSON.int(5).serialize(into: &buffer)
        #expect(String(decoding: buffer, as: UTF8.self) == "prefix:5")
    }

    @Test func accessorsAndBuilders() {
        let value: JSON = ["n": 2.0, "s": "x"]
        #expect(value["n"]?.intValue == 2)
        #expect(JSON.double(2.5).intValue == nil)
        #expect(value["missing"] == nil)
        #expect(value.setting("s", nil)["s"] == nil)
        #expect(JSON.compactObject(["a": .int(1), "b": nil]) == ["a": 1])
        #expect(value.typeName == "object")
    }
}
