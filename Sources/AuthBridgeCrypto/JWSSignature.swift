import AuthBridgeSystem

/// JWS signature verification (RS*, PS*, ES*, EdDSA) over GNU Nettle in libAuthBridgeNettle.so: what
/// checks ID tokens. Nettle and not jwt-kit: 7 MiB less resident in the agent (bench/README, "ID tokens by GNU Nettle").
public enum JWSSignature {
    /// The algorithms `verify` knows (RFC 7518 §3.1, RFC 8037 §3.1).
    public static let algorithms: Set<String> = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]

    /// A public key as its JWK members, decoded from base64url.
    public enum PublicKey: Sendable {
        case rsa(modulus: [UInt8], exponent: [UInt8])
        /// `crv` "P-256", "P-384" or "P-521".
        case ec(curve: String, x: [UInt8], y: [UInt8])
        /// `crv` "Ed25519".
        case okp(curve: String, x: [UInt8])
    }

    public enum Verdict: Sendable, Equatable {
        case verified
        /// The signature does not verify with the key, or is not of the algorithm's form.
        case refused
        /// The key cannot verify this algorithm at all (too small, not on its curve, another curve…).
        case unusableKey
    }

    /// Whether `signature` over `signingInput` verifies with `key` under `algorithm`.
    ///
    /// Throws `unavailable` when the library is missing, `invalidInput` for an algorithm outside `algorithms`.
    public static func verify(_ signature: [UInt8], of signingInput: [UInt8], algorithm: String, key: PublicKey) throws(CryptoFailure) -> Verdict {
        let function = try NettleJWSLibrary.verify()
        let (curve, first, second): (String?, [UInt8], [UInt8]) =
            switch key {
            case .rsa(let modulus, let exponent): (nil, modulus, exponent)
            case .ec(let curve, let x, let y): (curve, x, y)
            case .okp(let curve, let x): (curve, x, [])
            }
        let status = algorithm.withCString { algorithm in
            withOptionalCString(curve) { curve in
                first.withUnsafeBufferPointer { first in
                    second.withUnsafeBufferPointer { second in
                        signingInput.withUnsafeBufferPointer { input in
                            signature.withUnsafeBufferPointer { signature in
                                function(
                                    algorithm, curve, first.baseAddress, first.count, second.baseAddress, second.count, input.baseAddress,
                                    input.count, signature.baseAddress, signature.count)
                            }
                        }
                    }
                }
            }
        }
        switch status {
        case 0: return .verified
        case 1: return .refused
        case 2: return .unusableKey
        default: throw CryptoFailure(reason: .invalidInput, message: "JWS verification: invalid input")
        }
    }

    private static func withOptionalCString<Result>(_ text: String?, _ body: (UnsafePointer<CChar>?) -> Result) -> Result {
        guard let text else { return body(nil) }
        return text.withCString { body($0) }
    }
}

/// libAuthBridgeNettle.so's JWS entry point (Sources/Helpers/Nettle/include/authbridge_nettle.h: its
/// contract); bound apart from the vault's functions, on the first ID token.
enum NettleJWSLibrary {
    typealias Verify =
        @convention(c) (
            UnsafePointer<CChar>?, UnsafePointer<CChar>?, UnsafePointer<UInt8>?, Int, UnsafePointer<UInt8>?, Int, UnsafePointer<UInt8>?, Int,
            UnsafePointer<UInt8>?, Int
        ) -> Int32

    struct Function: @unchecked Sendable { let verify: Verify }

    static let library = HelperLibrary<Function>(
        "The cryptography library (\(SymmetricLibrary.file))", candidates: HelperLibraryLocation.candidates(SymmetricLibrary.file)
    ) { symbols in
        symbols.function("authbridge_nettle_jws_verify_v1", as: Verify.self).map(Function.init(verify:))
    }

    static func verify() throws(CryptoFailure) -> Verify {
        switch library.load() {
        case .success(let function): return function.verify
        case .failure(let failure): throw CryptoFailure(reason: .unavailable, message: failure.notInstalledMessage)
        }
    }
}
