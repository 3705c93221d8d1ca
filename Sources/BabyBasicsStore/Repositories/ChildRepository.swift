public import Foundation
import Postgres

/// Children, seen through the acting user's membership.
///
/// ```swift
/// let child = try await store.children.create(ChildDraft(name: "Zoë", birthDate: birth), as: parentID)
/// let mine = try await store.children.list(as: parentID)
/// try await store.children.transferPrimary(of: child.id, to: partnerID, as: parentID)
/// ```
public struct ChildRepository: Sendable {
    let routing: Routing
    var pool: PostgresPool { routing.primary }

    /// Creates a child and makes the acting user its primary caregiver, in one transaction.
    public func create(_ draft: ChildDraft, as actingUser: UUID) async throws -> Child {
        let name = try Validate.childName(draft.name)
        try Validate.settings(draft.settings)
        try Validate.birthDate(draft.birthDate, timezone: draft.settings.timezone)
        let id = UUID.version4()
        let settings = draft.settings
        let created = try await routing.writing(as: actingUser) {
            try await pool.transaction { connection in
                try await connection.execute("""
                    INSERT INTO children (id, name, birth_date, primary_caregiver_id, timezone, day_start_time, settings)
                    VALUES (\(id), \(name), \(draft.birthDate), \(actingUser), \(settings.timezone), \(settings.dayStartTime), \(json: settings.document))
                    """)
                try await connection.execute("""
                    INSERT INTO caregivers (child_id, user_id, role) VALUES (\(id), \(actingUser), 'primary')
                    """)
                return try one(try await connection.query(Self.select(id, as: actingUser)), as: Child.Row.self).child
            }
        }
        await routing.announce([id])
        return created
    }

    static func select(_ id: UUID, as actingUser: UUID) -> SQL {
        """
        SELECT \(Child.columns) FROM children c
        JOIN caregivers me ON me.child_id = c.id AND me.user_id = \(actingUser)
        WHERE c.id = \(id)
        """
    }

    /// The acting user's children, with their role on each, oldest first.
    public func list(as actingUser: UUID) async throws -> [Child] {
        try await routing.reading(as: actingUser) { pool in
            try await pool.query("""
                SELECT \(Child.columns) FROM caregivers me
                JOIN children c ON c.id = me.child_id
                WHERE me.user_id = \(actingUser)
                ORDER BY c.birth_date, c.name
                """).decode(as: Child.Row.self).map(\.child)
        }
    }

    /// One child, if the acting user is a caregiver of it; `notFound` otherwise.
    public func get(_ id: UUID, as actingUser: UUID) async throws -> Child {
        try await routing.reading(as: actingUser) { pool in
            try one(try await pool.query(Self.select(id, as: actingUser)), as: Child.Row.self).child
        }
    }

    /// Updates name, birth date and settings (time zone and day start included). Any caregiver may.
    public func update(_ id: UUID, with changes: ChildChanges, as actingUser: UUID) async throws -> Child {
        let name = try changes.name.map(Validate.childName)
        if let settings = changes.settings { try Validate.settings(settings) }
        if let birthDate = changes.birthDate {
            try Validate.birthDate(birthDate, timezone: changes.settings?.timezone ?? "Pacific/Kiritimati")
        }
        let settings = changes.settings
        let updated = try await routing.writing(as: actingUser) {
            let rows = try await pool.query("""
                UPDATE children AS c SET
                    name = coalesce(\(name), c.name),
                    birth_date = coalesce(\(changes.birthDate), c.birth_date),
                    timezone = coalesce(\(settings?.timezone), c.timezone),
                    day_start_time = coalesce(\(settings?.dayStartTime), c.day_start_time),
                    settings = coalesce(\(settings.map { PostgresJSON($0.document) }), c.settings)
                FROM caregivers me
                WHERE c.id = \(id) AND me.child_id = c.id AND me.user_id = \(actingUser)
                RETURNING \(Child.columns)
                """)
            return try one(rows, as: Child.Row.self).child
        }
        await routing.announce([id])
        return updated
    }

    /// Deletes a child with its events, caregivers and invites (one statement, so one
    /// transaction). Primary only.
    public func delete(_ id: UUID, as actingUser: UUID) async throws {
        try await routing.writing(as: actingUser) {
            let rows = try await pool.query("""
                WITH me AS (
                    \(Authorization.membership(of: id, for: actingUser))
                ), deleted AS (
                    DELETE FROM children c WHERE c.id = \(id) AND EXISTS (SELECT FROM me WHERE role = 'primary')
                    RETURNING c.id
                )
                SELECT (SELECT role FROM me), (SELECT count(*) FROM deleted)
                """)
            try Authorization.requirePrimary(rows)
        }
        await routing.announce([id])
    }

    /// Makes `newPrimary` (already a caregiver) the primary caregiver. Primary only.
    public func transferPrimary(of id: UUID, to newPrimary: UUID, as actingUser: UUID) async throws {
        try await routing.writing(as: actingUser) {
            try await pool.transaction { connection in
                // The child locked (as the function locks it first) with the acting user's
                // role; then the transfer, a call of its own: Citus cannot run the function
                // inside a statement it sends to a shard.
                let role = try await connection.fetchValue(CaregiverRole.self, """
                    SELECT me.role FROM children c
                    JOIN caregivers me ON me.child_id = c.id AND me.user_id = \(actingUser)
                    WHERE c.id = \(id) AND me.child_id = \(id)
                    FOR UPDATE OF c
                    """)
                guard let role else { throw StoreError.notFound }
                guard role == .primary else { throw StoreError.forbidden(required: .primary) }
                _ = try await connection.query("SELECT transfer_primary_caregiver(\(id), \(newPrimary))")
            }
        }
        await routing.announce([id])
    }
}
