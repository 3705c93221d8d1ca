public import Foundation
import Postgres

/// Who cares for a child.
///
/// ```swift
/// let caregivers = try await store.caregivers.list(of: childID, as: userID)
/// try await store.caregivers.remove(nannyID, from: childID, as: primaryID)
/// ```
public struct CaregiverRepository: Sendable {
    let routing: Routing
    var pool: PostgresPool { routing.primary }

    /// The child's caregivers with display names and join dates, primary first.
    public func list(of childID: UUID, as actingUser: UUID) async throws -> [Caregiver] {
        try await routing.reading(as: actingUser) { pool in
            let caregivers = try await pool.query("""
                SELECT cg.user_id, u.display_name, cg.role, cg.joined_at
                FROM caregivers cg JOIN users u ON u.id = cg.user_id
                WHERE cg.child_id = \(childID)
                  AND \(Authorization.isCaregiver(of: "\(childID)", for: actingUser))
                ORDER BY cg.role = 'primary' DESC, cg.joined_at, u.display_name
                """).decode(as: Caregiver.self)
            // A child always has its primary: nothing means "not yours".
            guard !caregivers.isEmpty else { throw StoreError.notFound }
            return caregivers
        }
    }

    /// Removes a caregiver. Primary only, and never the primary.
    public func remove(_ userID: UUID, from childID: UUID, as actingUser: UUID) async throws {
        try await routing.writing(as: actingUser) {
            let rows = try await pool.query("""
                WITH me AS (
                    \(Authorization.membership(of: childID, for: actingUser))
                ), target AS (
                    \(Authorization.membership(of: childID, for: userID))
                ), removed AS (
                    DELETE FROM caregivers cg
                    WHERE cg.child_id = \(childID) AND cg.user_id = \(userID) AND cg.role <> 'primary'
                      AND EXISTS (SELECT FROM me WHERE role = 'primary')
                    RETURNING 1
                )
                SELECT (SELECT role FROM me), (SELECT role FROM target), (SELECT count(*) FROM removed)
                """)
            guard let row = rows.first else { throw StoreError.notFound }
            let (mine, theirs, removed) = try row.decode((CaregiverRole?, CaregiverRole?, Int).self)
            guard let mine else { throw StoreError.notFound }
            guard mine == .primary else { throw StoreError.forbidden(required: .primary) }
            if theirs == .primary { throw StoreError.primaryCaregiverCannotLeave }
            guard removed == 1 else { throw StoreError.notFound }
        }
        await routing.announce([childID])
    }

    /// The acting user stops being a caregiver of the child. The primary must transfer the
    /// role (or delete the child) first.
    public func leave(_ childID: UUID, as actingUser: UUID) async throws {
        try await routing.writing(as: actingUser) {
            let rows = try await pool.query("""
                WITH me AS (
                    \(Authorization.membership(of: childID, for: actingUser))
                ), removed AS (
                    DELETE FROM caregivers cg
                    WHERE cg.child_id = \(childID) AND cg.user_id = \(actingUser) AND cg.role <> 'primary'
                    RETURNING 1
                )
                SELECT (SELECT role FROM me), (SELECT count(*) FROM removed)
                """)
            guard let row = rows.first else { throw StoreError.notFound }
            let (mine, removed) = try row.decode((CaregiverRole?, Int).self)
            guard let mine else { throw StoreError.notFound }
            if mine == .primary || removed == 0 { throw StoreError.primaryCaregiverCannotLeave }
        }
        await routing.announce([childID])
    }
}
