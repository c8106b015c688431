import AuthBridgeJSON
@testable import AuthBridgeRedaction
import AuthBridgeURL
import Testing

/// A token-like value: 43 characters of the base64url alphabet (a PKCE verifier's size), made from `seed`.
private func token(_ seed: Int, length: Int = 43) -> String {
    let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    var state = UInt64(truncatingIfNeeded: seed) &* 0x9E37_79B9_7F4A_7C15 &+ 1
    return String(
        (0..<length).map { _ in
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return alphabet[Int(state >> 58)]
        })
}

@Suite("Known secrets")
struct KnownSecretsTests {
    @Test func everyFormOfAValueIsMasked() {
        let secrets = KnownSecrets()
        let value = "rt/with+slash=and more"
        secrets.remember(value)
        let base64 = Base64.encode(value.utf8)
        let forms = [
            value, FormEncoding.percentEncode(value), base64, String(base64.reversed().drop(while: { $0 == "=" }).reversed()),
            String(base64.map { $0 == "+" ? "-" : $0 == "/" ? "_" : $0 }.reversed().drop(while: { $0 == "=" }).reversed()),
        ]
        for form in forms {
            #expect(secrets.scrub("got <\(form)> back") == "got <[REDACTED]> back", "\(form)")
        }
    }

    @Test func shortValuesAreNotRememberedAndShortTextIsUnchanged() {
        let secrets = KnownSecrets()
        secrets.remember("seven77")
        secrets.remember(nil)
        #expect(secrets.count == 0)
        #expect(secrets.scrub("seven77 ok") == "seven77 ok")
    }

    @Test func aValueContainingAnotherIsMaskedWhole() {
        let secrets = KnownSecrets()
        secrets.remember("inner-secret")
        secrets.remember("outer-inner-secret-tail")
        #expect(secrets.scrub("a outer-inner-secret-tail b inner-secret c") == "a [REDACTED] b [REDACTED] c")
    }

    @Test func overlappingValuesAreMaskedTogetherAndNoPartIsLeft() {
        let secrets = KnownSecrets()
        secrets.remember("abcdefgh12")
        secrets.remember("12345678xy")
        // Replacing one value after the other left "345678xy" of the second.
        #expect(secrets.scrub("x abcdefgh12345678xy z") == "x [REDACTED] z")
        #expect(secrets.scrub("aaaaaaaaaaaa") == "aaaaaaaaaaaa")
        secrets.remember("aaaaaaaa")
        #expect(secrets.scrub("aaaaaaaaaaaa!") == "[REDACTED]!", "every occurrence, also overlapping ones")
        #expect(secrets.scrub("abcdefgh12abcdefgh12") == "[REDACTED][REDACTED]", "values side by side stay apart")
    }

    @Test func textAroundTheMasksIsKeptByteForByte() {
        let secrets = KnownSecrets()
        secrets.remember("ümlaut-sécret")
        #expect(secrets.scrub("é ümlaut-sécret € ümlaut-sécret") == "é [REDACTED] € [REDACTED]")
        #expect(secrets.scrub("no secret here: naïve") == "no secret here: naïve")
    }

    @Test func jsonStringsAreScrubbedWhereverTheyAre() {
        let secrets = KnownSecrets()
        secrets.remember("token-12345678")
        let scrubbed = secrets.scrub(["a": ["b": "x token-12345678"], "c": ["token-12345678", 3]] as JSON)
        #expect(scrubbed == ["a": ["b": "x [REDACTED]"], "c": ["[REDACTED]", 3]])
    }

    @Test func theOldestValuesAreForgottenPastTheCapacity() {
        let secrets = KnownSecrets()
        for index in 0..<(KnownSecrets.capacity + 10) { secrets.remember(token(index)) }
        #expect(secrets.count == KnownSecrets.capacity)
        #expect(secrets.scrub(token(KnownSecrets.capacity + 9)) == "[REDACTED]")
        #expect(secrets.scrub(token(10)) == "[REDACTED]")
        #expect(secrets.scrub(token(9)) == token(9), "forgotten")
        // A value remembered after a scrub is masked by the next one.
        secrets.remember("remembered-late")
        #expect(secrets.scrub("remembered-late") == "[REDACTED]")
    }

    /// Issue 26: every scrub searched for each form in turn, copying the message each time, so
    /// its cost grew with the message's size times the secrets held (400 sign-in starts: 2.57 s of
    /// CPU for a 4 MiB message). Now it reads the message once: at most two steps per byte, with
    /// a full table, whatever the text (the cost per MiB is bench/redaction.py's).
    @Test func scrubbingReadsTheMessageOnceWhateverTheSecretsHeld() {
        let secrets = KnownSecrets()
        for index in 0..<KnownSecrets.capacity { secrets.remember(token(index)) }
        let held = token(7)
        let texts = [
            String(repeating: "x", count: 1 << 20),
            String(repeating: "\(held.prefix(42))-", count: (1 << 20) / 43), // a value's start, again and again
            String(repeating: "no secret, \(held) ", count: (1 << 20) / 56),
            String(repeating: token(7, length: 20), count: (1 << 20) / 20),
        ]
        for text in texts {
            var steps = 0
            let scrubbed = secrets.scrub(text, steps: &steps)
            #expect(steps <= 2 * text.utf8.count, "\(steps) steps for \(text.utf8.count) bytes")
            #expect(!scrubbed.hasSubstring(held))
        }
    }
}
