import BabyBasicsStore
import Foundation
import Hummingbird
import JWTKit

/// The bearer token's claims: the user (`sub`, a UUID), when the token expires (`exp`), and
/// optionally when it was issued (`iat`), when it starts being valid (`nbf`), who issued it
/// (`iss`) and for whom (`aud`).
///
/// ```swift
/// let token = try await authority.issue(for: userID)
/// ```
public struct AccessToken: JWTPayload {
    public var sub: SubjectClaim
    public var exp: ExpirationClaim
    public var iat: IssuedAtClaim?
    public var nbf: NotBeforeClaim?
    public var iss: IssuerClaim?
    public var aud: AudienceClaim?

    public init(user: UUID, expires: Date, issuedAt: Date? = nil, notBefore: Date? = nil, issuer: String? = nil, audience: String? = nil) {
        sub = SubjectClaim(value: user.uuidString)
        exp = ExpirationClaim(value: expires)
        iat = issuedAt.map(IssuedAtClaim.init(value:))
        nbf = notBefore.map(NotBeforeClaim.init(value:))
        iss = issuer.map(IssuerClaim.init(value:))
        aud = audience.map { AudienceClaim(value: [$0]) }
    }

    public func verify(using algorithm: some JWTAlgorithm) async throws {
        try exp.verifyNotExpired()
    }
}

/// Issues and verifies HMAC-SHA-256 signed tokens (JWT, jwt-kit), as a careful service does: a
/// signature by our key, not expired, not before its `nbf`, from the configured issuer for the
/// configured audience (when configured), valid for no longer than `maximumLifetime`. The
/// acting user comes from a token this authority verified, never from a header the client could
/// write (and `BearerAuthentication` then checks that the user exists).
///
/// ```swift
/// let authority = try await TokenAuthority(secret: settings.secret, issuer: settings.issuer, audience: settings.audience)
/// let user = try await authority.verify(token)
/// ```
public struct TokenAuthority: Sendable {
    let keys: JWTKeyCollection
    public let issuer: String?
    public let audience: String?
    public let maximumLifetime: Duration
    /// Clocks disagree a little: a token issued a moment "in the future" is still accepted.
    static let leeway: TimeInterval = 30

    /// `secret`: at least 32 bytes and 10 different characters (HS256 wants a key as long as
    /// its hash, and `aaaa…` is not a key).
    public init(secret: String, issuer: String? = nil, audience: String? = nil, maximumLifetime: Duration = .seconds(30 * 86_400)) async throws {
        if let problem = Self.weakness(of: secret) { throw APIError.invalid(field: "BB_JWT_SECRET", reason: problem) }
        keys = JWTKeyCollection()
        await keys.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
        self.issuer = issuer
        self.audience = audience
        self.maximumLifetime = maximumLifetime
    }

    /// Why `secret` is not a key, or nil when it is one.
    public static func weakness(of secret: String) -> String? {
        guard secret.utf8.count >= 32 else { return "must be at least 32 bytes long (for example: openssl rand -base64 48)" }
        guard Set(secret.utf8).count >= 10 else { return "must not be a repetition of a few characters: use a random key (openssl rand -base64 48)" }
        return nil
    }

    /// A token for `user`, valid from now for `lifetime` seconds, with this authority's issuer
    /// and audience.
    public func issue(for user: UUID, lifetime: TimeInterval = 3600, now: Date = Date()) async throws -> String {
        try await keys.sign(AccessToken(
            user: user, expires: now.addingTimeInterval(lifetime), issuedAt: now, notBefore: now, issuer: issuer, audience: audience))
    }

    /// The user a valid token names; `unauthorized` otherwise, saying what to do.
    public func verify(_ token: String, now: Date = Date()) async throws -> UUID {
        let payload: AccessToken
        do {
            payload = try await keys.verify(token, as: AccessToken.self)
        } catch {
            throw APIError.unauthorized("the bearer token is not valid (bad signature, malformed or expired): sign in again")
        }
        if let notBefore = payload.nbf?.value, notBefore.timeIntervalSince(now) > Self.leeway {
            throw APIError.unauthorized("the bearer token is not valid yet (nbf is in the future): check the issuer's clock, or sign in again")
        }
        if let issuer, payload.iss?.value != issuer {
            throw APIError.unauthorized("the bearer token was not issued by \(issuer): sign in again")
        }
        if let audience, !(payload.aud?.value.contains(audience) ?? false) {
            throw APIError.unauthorized("the bearer token is not meant for this service (aud): sign in again")
        }
        let issued = min(payload.iat?.value ?? now, now)
        let limit = TimeInterval(maximumLifetime.components.seconds)
        guard payload.exp.value.timeIntervalSince(issued) <= limit + Self.leeway else {
            throw APIError.unauthorized("the bearer token is valid for longer than this service allows (\(Int(limit)) s): sign in again")
        }
        guard let user = UUID(uuidString: payload.sub.value) else {
            throw APIError.unauthorized("the bearer token does not name a user: sign in again")
        }
        return user
    }
}

/// Whether a user still exists, asked of the database at most once per `validity` per user:
/// a token outlives nothing it names for longer than that (a deleted account's token stops
/// working within it).
actor KnownUsers {
    private let store: Store
    private let validity: Duration
    private var known: [UUID: ContinuousClock.Instant] = [:]

    init(store: Store, validity: Duration = .seconds(30)) {
        self.store = store
        self.validity = validity
    }

    func exists(_ user: UUID) async throws -> Bool {
        let now = ContinuousClock.now
        if let until = known[user], now < until { return true }
        do {
            _ = try await store.users.get(user, as: user)
        } catch StoreError.notFound {
            known[user] = nil
            return false
        }
        if known.count > 100_000 { known.removeAll() } // bounded, whatever the traffic
        known[user] = now + validity
        return true
    }
}

/// Sets `APIContext.actingUser` from `Authorization: Bearer <token>`, or answers 401: the
/// token must verify, and its user must exist.
struct BearerAuthentication: RouterMiddleware {
    typealias Context = APIContext
    let authority: TokenAuthority
    let users: KnownUsers

    func handle(_ request: Request, context: APIContext, next: (Request, APIContext) async throws -> Response) async throws -> Response {
        guard let header = request.headers[.authorization], header.lowercased().hasPrefix("bearer ") else {
            throw APIError.unauthorized("sign in: send Authorization: Bearer <token>")
        }
        var context = context
        let user = try await authority.verify(String(header.dropFirst("bearer ".count)).trimmingCharacters(in: .whitespaces))
        guard try await users.exists(user) else {
            throw APIError.unauthorized("the bearer token names a user that does not exist (the account was deleted?): sign in again")
        }
        context.actingUser = user
        return try await next(request, context)
    }
}
