extension URLQuery {
    /// The query of the URL a sign-in ended at (`completeSignIn`'s `callbackUrl`), read strictly by
    /// name (AuthBridgeURL's one rule: `+` is a space, a malformed escape refuses the whole query).
    /// Throws `ProviderFailure.malformedCallback` for a query that is not well formed.
    public static func callback(_ url: String) throws(ProviderFailure) -> URLQuery {
        guard let query = URLQuery(url: url) else { throw .malformedCallback }
        return query
    }
}

extension ProviderFailure {
    /// The failure for a callback whose query is not well formed: a definitive refusal of the
    /// callback (`-32004` `invalidCallback`), naming no value.
    public static let malformedCallback = ProviderFailure.definitive(
        "invalidCallback",
        "The sign-in ended at a callback URL that is not well formed (a '%' not followed by two hex digits); nothing was stored. Sign in again.")
}
