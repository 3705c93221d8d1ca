import Foundation
import Postgres

/// The authorization pieces every repository statement embeds, so membership and role are
/// checked inside the statement that reads or writes, never by a separate read.
///
/// ```swift
/// let rows = try await pool.query("""
///     WITH me AS (\(Authorization.membership(of: childID, for: userID))),
///     done AS (DELETE FROM … WHERE … AND EXISTS (SELECT FROM me WHERE role = 'primary') RETURNING 1)
///     SELECT (SELECT role FROM me), (SELECT count(*) FROM done)
///     """)
/// try Authorization.requirePrimary(rows)
/// ```
enum Authorization {
    /// `SELECT role FROM caregivers …` for one child and one user: no row means "not a caregiver".
    static func membership(of childID: UUID, for user: UUID) -> SQL {
        "SELECT role FROM caregivers WHERE child_id = \(childID) AND user_id = \(user)"
    }

    /// `EXISTS (…)`: the user is a caregiver of the child (any role).
    static func isCaregiver(of childID: SQL, for user: UUID) -> SQL {
        "EXISTS (SELECT FROM caregivers auth WHERE auth.child_id = \(childID) AND auth.user_id = \(user))"
    }

    /// Reads `(my role, rows affected)`: `notFound` for a non-member (other families' children
    /// do not exist), `forbidden` for a caregiver, `notFound` when nothing matched.
    static func requirePrimary(_ rows: PostgresRows) throws {
        guard let row = rows.first else { throw StoreError.notFound }
        let (role, affected) = try row.decode((CaregiverRole?, Int).self)
        guard let role else { throw StoreError.notFound }
        guard role == .primary else { throw StoreError.forbidden(required: .primary) }
        guard affected > 0 else { throw StoreError.notFound }
    }
}
