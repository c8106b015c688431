import AuthBridgeJSON
@testable import AuthBridgePluginHost
import Testing

/// The remembered short answer is only ever the parse of the same bytes.
@Suite("Short answers")
struct ShortAnswersTests {
    private func parse(_ answers: ShortAnswers, _ text: String) throws -> JSON {
        let bytes = Array(text.utf8)
        return try bytes.withUnsafeBytes { try answers.parse($0) }
    }

    @Test func eachTextGivesItsOwnValue() throws {
        let answers = ShortAnswers()
        for text in [#"{"state":"valid"}"#, #"{"state":"valid"}"#, #"{"state":"expired"}"#, #"{"state":"valid"}"#, "[]", "[1]", "[1]"] {
            #expect(try parse(answers, text) == JSON.parse(text))
        }
        let long = #"{"state":"unknown","message":""# + String(repeating: "x", count: ShortAnswers.maximumLength) + #""}"#
        #expect(try parse(answers, long) == JSON.parse(long))
    }

    @Test func invalidTextIsStillRefusedAfterAValidOne() throws {
        let answers = ShortAnswers()
        _ = try parse(answers, #"{"state":"valid"}"#)
        #expect(throws: JSONParseError.self) { try parse(answers, #"{"state":"valid""#) }
        #expect(throws: JSONParseError.self) { try parse(answers, #"{"state":"valid"}}"#) }
    }
}
