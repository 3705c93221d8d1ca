public import Foundation
import Postgres

/// A person with an account: a parent, a grandparent, a nanny.
///
/// ```swift
/// let user = try await store.users.create(email: "sam@example.com", displayName: "Sam")
/// print(user.displayName)
/// ```
public struct User: Codable, Sendable, Equatable, Identifiable {
    public var id: UUID
    /// The sign-in email. Only in your own record: `nil` in a co-caregiver's, who is known to
    /// you by their display name, not by their sign-in identifiers.
    public var email: String?
    public var displayName: String
    /// The Sign in with Apple subject, when linked. Only in your own record, like `email`.
    public var appleUserID: String?
    public var createdAt: Date
    public var updatedAt: Date

    /// The columns that fill your own `User`: `SELECT \(User.ownColumns) FROM users u WHERE u.id = me`.
    static let ownColumns: SQL = "u.id, u.email, u.display_name, u.apple_user_id AS apple_user_id, u.created_at, u.updated_at"

    /// The columns that fill a `User` as `viewer` may see it: another user's email and Apple
    /// subject are NULL.
    static func columns(seenBy viewer: UUID) -> SQL {
        """
        u.id, CASE WHEN u.id = \(viewer) THEN u.email END AS email, u.display_name,
        CASE WHEN u.id = \(viewer) THEN u.apple_user_id END AS apple_user_id, u.created_at, u.updated_at
        """
    }

    enum CodingKeys: String, CodingKey {
        case id, email, displayName, appleUserID = "appleUserId", createdAt, updatedAt
    }
}

/// What sign-in needs: the user id and the stored password hash (never part of `User`).
///
/// ```swift
/// if let credentials = try await store.users.credentials(email: email) { verify(password, credentials.passwordHash) }
/// ```
public struct UserCredentials: Sendable, Decodable {
    public var id: UUID
    public var passwordHash: String?
    public var appleUserID: String?

    enum CodingKeys: String, CodingKey {
        case id, passwordHash, appleUserID = "appleUserId"
    }
}
