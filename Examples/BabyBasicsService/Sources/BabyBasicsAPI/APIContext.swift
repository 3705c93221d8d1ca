import Foundation
import Hummingbird

/// The request context of every route: Hummingbird's core storage plus the acting user, set
/// only by `BearerAuthentication` from a verified token.
///
/// ```swift
/// let router = Router(context: APIContext.self)
/// ```
public struct APIContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    /// The user the verified bearer token names; nil before authentication.
    public var actingUser: UUID?

    public init(source: Source) {
        coreContext = .init(source: source)
    }

    /// The acting user, or 401 (a route behind `BearerAuthentication` always has one).
    func user() throws -> UUID {
        guard let actingUser else { throw APIError.unauthorized("sign in: send Authorization: Bearer <token>") }
        return actingUser
    }
}
