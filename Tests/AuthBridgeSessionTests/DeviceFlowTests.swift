import AuthBridgeJSON
import AuthBridgePluginHost
@testable import AuthBridgeSession
import Synchronization
import Testing

@Suite("Device authorization grant (RFC 8628)")
struct DeviceFlowTests {
    private let now: Int64 = 1_700_000_000_000

    /// A scripted token endpoint and a virtual clock: `sleep` advances the
    /// clock and records the wait, so the pacing is checked without waiting.
    final class Script: Sendable {
        let answers: Mutex<[Result<JSON, ProviderFailure>]>
        let waits = Mutex<[Int64]>([])
        let clock: Mutex<Int64>

        init(start: Int64, _ answers: [Result<JSON, ProviderFailure>]) {
            self.answers = Mutex(answers)
            self.clock = Mutex(start)
        }

        func polling(interval: Int64, deadline: Int64) -> DevicePolling {
            var polling = DevicePolling(intervalMilliseconds: interval, deadline: deadline)
            polling.now = { self.clock.withLock { $0 } }
            polling.sleep = { milliseconds in
                self.waits.withLock { $0.append(milliseconds) }
                self.clock.withLock { $0 += milliseconds }
            }
            return polling
        }

        var poll: DevicePolling.Poll {
            { self.answers.withLock { $0.isEmpty ? .failure(pending("authorization_pending")) : $0.removeFirst() } }
        }
    }

    static func pending(_ reason: String, kind: ProviderFailure.Kind = .transient) -> ProviderFailure {
        ProviderFailure(kind, reason: reason, message: reason)
    }

    private let tokens: JSON = ["tokens": ["accessToken": "at"]]

    @Test func pollsAtTheIntervalUntilTheUserApproves() async throws {
        let script = Script(
            start: now,
            [
                .failure(Self.pending("authorization_pending")), .failure(Self.pending("authorization_pending")),
                .success(tokens),
            ])
        let answer = try await script.polling(interval: 2_000, deadline: now + 600_000).run(profile: "p", poll: script.poll)
        #expect(answer == tokens)
        #expect(script.waits.withLock { $0 } == [2_000, 2_000, 2_000])
    }

    @Test func slowDownAddsFiveSecondsForEveryLaterPoll() async throws {
        let script = Script(
            start: now,
            [
                .failure(Self.pending("slow_down")), .failure(Self.pending("authorization_pending")),
                .failure(Self.pending("slow_down")), .success(tokens),
            ])
        _ = try await script.polling(interval: 1_000, deadline: now + 600_000).run(profile: "p", poll: script.poll)
        #expect(script.waits.withLock { $0 } == [1_000, 6_000, 6_000, 11_000])
    }

    @Test func aTransientFailureBacksOffAndKeepsPolling() async throws {
        let script = Script(start: now, [.failure(Self.pending("refused")), .failure(Self.pending("serverError")), .success(tokens)])
        _ = try await script.polling(interval: 5_000, deadline: now + 600_000).run(profile: "p", poll: script.poll)
        #expect(script.waits.withLock { $0 } == [5_000, 10_000, 20_000])
    }

    @Test func theCodeExpiringEndsTheWaitWithATimeout() async {
        let script = Script(start: now, [])
        await #expect {
            try await script.polling(interval: 5_000, deadline: now + 12_000).run(profile: "p", poll: script.poll)
        } throws: { error in
            (error as? SessionError)?.kind == .timeout && (error as? SessionError)?.reason == "expired_token"
        }
        #expect(script.waits.withLock { $0 } == [5_000, 5_000], "no poll is sent after the deadline")
    }

    @Test func theServerSayingExpiredTokenIsATimeout() async {
        let script = Script(start: now, [.failure(Self.pending("expired_token"))])
        await #expect { try await script.polling(interval: 1_000, deadline: now + 600_000).run(profile: "p", poll: script.poll) } throws: {
            ($0 as? SessionError)?.reason == "expired_token"
        }
    }

    @Test func aDenialIsAUserCancellation() async {
        let script = Script(start: now, [.failure(Self.pending("access_denied", kind: .definitive))])
        await #expect { try await script.polling(interval: 1_000, deadline: now + 600_000).run(profile: "p", poll: script.poll) } throws: {
            ($0 as? SessionError)?.kind == .userCancelled && ($0 as? SessionError)?.reason == "access_denied"
        }
    }

    @Test func anotherDefinitiveRefusalEndsTheSignIn() async {
        let script = Script(start: now, [.failure(Self.pending("invalid_client", kind: .definitive))])
        await #expect { try await script.polling(interval: 1_000, deadline: now + 600_000).run(profile: "p", poll: script.poll) } throws: {
            ($0 as? SessionError)?.kind == .providerRefused
        }
    }

    /// Issue 12 §4: an OAuth error the server answered ends the sign-in at once
    /// (RFC 8628 §3.5 lists only pending, slow_down, denied and expired as
    /// reasons to go on); only a server that did not answer is polled again.
    @Test(arguments: ["invalid_request", "unsupported_grant_type", "invalid_scope", "some_new_error"])
    func anOAuthErrorTheServerAnsweredEndsTheSignIn(_ reason: String) async {
        let script = Script(start: now, [.failure(ProviderFailure(.transient, reason: reason, message: reason, status: 400))])
        await #expect { try await script.polling(interval: 1_000, deadline: now + 600_000).run(profile: "p", poll: script.poll) } throws: {
            ($0 as? SessionError)?.kind == .providerRefused && ($0 as? SessionError)?.reason == reason
        }
        #expect(script.waits.withLock { $0 } == [1_000], "one poll, no more")
    }

    @Test func anIntervalBelowOneSecondIsRaised() {
        #expect(DevicePolling(intervalMilliseconds: 10, deadline: now).intervalMilliseconds == 1_000)
    }

    // MARK: - The device authorization answer

    private func response(_ status: Int64, _ body: String) -> JSON {
        ["status": .int(status), "headers": [:], "body": .string(body)]
    }

    @Test func theAnswerBecomesTheDeviceFlowsBeginOutput() throws {
        let body =
            #"{"device_code":"dc","user_code":"WDJB-MJHT","verification_uri":"https://example.com/device","#
            + #""verification_uri_complete":"https://example.com/device?user_code=WDJB-MJHT","expires_in":1800,"interval":5}"#
        let answer = try StandardSteps.parseDeviceAuthorization(response(200, body), now: now).get()
        #expect(
            answer == [
                "deviceCode": "dc", "userCode": "WDJB-MJHT", "verificationUri": "https://example.com/device",
                "verificationUriComplete": "https://example.com/device?user_code=WDJB-MJHT",
                "expiresAt": .int(now + 1_800_000), "intervalMs": 5_000,
            ])
    }

    @Test func intervalDefaultsToFiveSeconds() throws {
        let body = #"{"device_code":"dc","user_code":"u","verification_uri":"https://example.com/d","expires_in":600}"#
        #expect(try StandardSteps.parseDeviceAuthorization(response(200, body), now: now).get()["intervalMs"] == 5_000)
    }

    @Test func anInsecureVerificationURIIsRefused() {
        let body = #"{"device_code":"dc","user_code":"u","verification_uri":"http://example.com/d","expires_in":600}"#
        #expect(throws: ProviderFailure.self) { try StandardSteps.parseDeviceAuthorization(self.response(200, body), now: self.now).get() }
    }

    @Test func anInsecureVerificationURICompleteIsLeftOut() throws {
        let body =
            #"{"device_code":"dc","user_code":"u","verification_uri":"https://example.com/d","#
            + #""verification_uri_complete":"http://example.com/d?user_code=u","expires_in":600}"#
        let answer = try StandardSteps.parseDeviceAuthorization(response(200, body), now: now).get()
        #expect(answer["verificationUri"] == "https://example.com/d" && answer["verificationUriComplete"] == nil)
    }

    @Test func anOAuthErrorIsClassified() {
        let result = StandardSteps.parseDeviceAuthorization(response(400, #"{"error":"invalid_client"}"#), now: now)
        guard case .failure(let failure) = result else {
            Issue.record("expected a failure")
            return
        }
        #expect(failure.kind == .definitive && failure.reason == "invalid_client")
    }
}
