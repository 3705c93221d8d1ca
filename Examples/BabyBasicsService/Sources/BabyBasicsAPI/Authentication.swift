import Foundation
import Hummingbird
import JWTKit

/// The bearer token's claims: the user (`sub`, a UUID) and when the token expires (`exp`).
///
/// ```swift
/// let token = try await authority.issue(for: userID)
/// ```
public struct AccessToken: JWTPayload {
    public var sub: SubjectClaim
    public var exp: ExpirationClaim

    public init(user: UUID, expires: Date) {
        sub = SubjectClaim(value: user.uuidString)
        exp = ExpirationClaim(value: expires)
    }

    public func verify(using algorithm: some JWTAlgorithm) async throws {
        try exp.verifyNotExpired()
    }
}

/// Issues and verifies HMAC-SHA-256 signed tokens (JWT, jwt-kit). The acting user comes from a
/// token this authority verified, never from a header the client could write.
///
/// ```swift
/// let authority = await TokenAuthority(secret: ProcessInfo.processInfo.environment["BB_JWT_SECRET"]!)
/// let user = try await authority.verify(token)
/// ```
public struct TokenAuthority: Sendable {
    let keys: JWTKeyCollection

    /// `secret`: at least 32 bytes (HS256 wants a key as long as its hash).
    public init(secret: String) async throws {
        guard secret.utf8.count >= 32 else {
            throw APIError.invalid(field: "BB_JWT_SECRET", reason: "must be at least 32 bytes long")
        }
        keys = JWTKeyCollection()
        await keys.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
    }

    /// A token for `user`, valid for `lifetime`.
    public func issue(for user: UUID, lifetime: TimeInterval = 3600) async throws -> String {
        try await keys.sign(AccessToken(user: user, expires: Date().addingTimeInterval(lifetime)))
    }

    /// The user a valid, unexpired token names; `unauthorized` otherwise.
    public func verify(_ token: String) async throws -> UUID {
        let payload: AccessToken
        do {
            payload = try await keys.verify(token, as: AccessToken.self)
        } catch {
            throw APIError.unauthorized("the bearer token is not valid (bad signature, malformed or expired): sign in again")
        }
        guard let user = UUID(uuidString: payload.sub.value) else {
            throw APIError.unauthorized("the bearer token does not name a user: sign in again")
        }
        return user
    }
}

/// Sets `APIContext.actingUser` from `Authorization: Bearer <token>`, or answers 401.
struct BearerAuthentication: RouterMiddleware {
    typealias Context = APIContext
    let authority: TokenAuthority

    func handle(_ request: Request, context: APIContext, next: (Request, APIContext) async throws -> Response) async throws -> Response {
        guard let header = request.headers[.authorization], header.lowercased().hasPrefix("bearer ") else {
            throw APIError.unauthorized("sign in: send Authorization: Bearer <token>")
        }
        var context = context
        context.actingUser = try await authority.verify(String(header.dropFirst("bearer ".count)).trimmingCharacters(in: .whitespaces))
        return try await next(request, context)
    }
}
