public import Foundation
import Postgres

/// Accounts.
///
/// ```swift
/// let sam = try await store.users.create(email: "sam@example.com", displayName: "Sam")
/// try await store.users.rename(to: "Samantha", as: sam.id)
/// ```
public struct UserRepository: Sendable {
    let routing: Routing
    var pool: PostgresPool { routing.primary }

    /// Signs up a user. `emailTaken` when another account has the email, ignoring case.
    public func create(email: String, displayName: String, passwordHash: String? = nil, appleUserID: String? = nil) async throws -> User {
        let email = try Validate.email(email)
        let name = try Validate.displayName(displayName)
        let user = try await mappingErrors(routing) {
            let rows = try await pool.query("""
                INSERT INTO users AS u (email, display_name, password_hash, apple_user_id)
                VALUES (\(email), \(name), \(passwordHash), \(appleUserID))
                RETURNING \(User.ownColumns)
                """)
            return try one(rows, as: User.self)
        }
        // Their first reads (the profile right after signing up) must find the account.
        if let router = routing.router { await router.noteWrite(by: user.id) }
        return user
    }

    /// `u` is the acting user or shares a child with them. The co-caregivers are listed by a
    /// subquery that does not refer to `u`: Citus plans it first, across the shards of
    /// `caregivers`, and cannot run a correlated one next to `users`, a reference table.
    static func visible(to actingUser: UUID) -> SQL {
        """
        (u.id = \(actingUser) OR u.id IN (
                SELECT theirs.user_id FROM caregivers theirs JOIN caregivers mine ON mine.child_id = theirs.child_id
                WHERE mine.user_id = \(actingUser)))
        """
    }

    /// The acting user, or a user who shares a child with them; `notFound` otherwise.
    public func get(_ id: UUID, as actingUser: UUID) async throws -> User {
        try await routing.reading(as: actingUser) { pool in
            let rows = try await pool.query("""
                SELECT \(User.columns(seenBy: actingUser)) FROM users u
                WHERE u.id = \(id)
                  AND \(Self.visible(to: actingUser))
                """)
            return try one(rows, as: User.self)
        }
    }

    /// Like `get(_:as:)`, by email (ignoring case).
    public func get(email: String, as actingUser: UUID) async throws -> User {
        try await routing.reading(as: actingUser) { pool in
            let rows = try await pool.query("""
                SELECT \(User.columns(seenBy: actingUser)) FROM users u
                WHERE lower(u.email) = lower(\(email))
                  AND \(Self.visible(to: actingUser))
                """)
            return try one(rows, as: User.self)
        }
    }

    /// For the sign-in flow, before there is an acting user: the id and password hash for an
    /// email (ignoring case), or `nil`.
    public func credentials(email: String) async throws -> UserCredentials? {
        try await mappingErrors(routing) {
            try await pool.query("""
                SELECT id, password_hash, apple_user_id FROM users WHERE lower(email) = lower(\(email))
                """).first?.decode(as: UserCredentials.self)
        }
    }

    /// Renames the acting user.
    @discardableResult
    public func rename(to displayName: String, as actingUser: UUID) async throws -> User {
        let name = try Validate.displayName(displayName)
        let renamed = try await routing.writing(as: actingUser) {
            // set_display_name() (0028) also reaches the children's sync feeds on a Citus
            // cluster, where trigger users_sync_display_name cannot run.
            let rows = try await pool.query("""
                SELECT \(User.ownColumns) FROM set_display_name(\(actingUser), \(name)) AS u
                """)
            return try one(rows, as: User.self)
        }
        // Every child's feed carries the new name (its caregivers rows were re-stamped).
        await routing.announcer.announce(on: pool) {
            try await pool.query("SELECT child_id FROM caregivers WHERE user_id = \(actingUser)").decodeColumn(UUID.self)
        }
        return renamed
    }

    /// Deletes the acting user's account (PRD §11). Refused with `soleCaregiver` while they are
    /// the only caregiver of a child; where other caregivers remain, the longest-standing one
    /// becomes primary. Events they logged stay with the child, unattributed.
    public func deleteAccount(as actingUser: UUID) async throws {
        // The children it changes, read before they are changed, where the store must announce
        // them itself (Citus; see ChangeAnnouncer). Nothing is read on one server.
        let affected = try await mappingErrors(routing) {
            guard try await routing.announcer.isNeeded(on: pool) else { return [UUID]() }
            return try await pool.query("""
                SELECT child_id FROM caregivers WHERE user_id = \(actingUser)
                UNION
                SELECT child_id FROM events WHERE logged_by = \(actingUser) OR updated_by = \(actingUser) OR deleted_by = \(actingUser)
                """).decodeColumn(UUID.self)
        }
        do {
            let deleted = try await retryingSafeErrors(routing) { try await pool.query("SELECT delete_user_account(\(actingUser))") }
            guard try deleted.first?.decode(Bool.self, at: 0) == true else {
                throw StoreError.notFound
            }
            // Their reads (a token still in use) must not find the account on a replica.
            if let router = routing.router { await router.noteWrite(by: actingUser) }
            await routing.announce(affected)
        } catch let error as PostgresError where error.declaredConstraint == "users_sole_caregiver_of_child" {
            // The children that block it, for the message (the refusal itself was the database's).
            let children = try await pool.query("""
                SELECT child_id FROM caregivers GROUP BY child_id
                HAVING count(*) = 1 AND bool_or(user_id = \(actingUser))
                """).decodeColumn(UUID.self)
            throw StoreError.soleCaregiver(childIDs: children)
        } catch let error as PostgresError {
            throw StoreError.map(error)
        }
    }
}

/// The single row of `rows`, or `notFound`.
func one<T: Decodable>(_ rows: PostgresRows, as type: T.Type) throws -> T {
    guard let row = rows.first else { throw StoreError.notFound }
    return try row.decode(as: type)
}
