import Foundation
import Postgres
import Testing

@Suite struct RoleTests {
    @Test func theApplicationRoleCannotDeleteEventsUsersOrHistory() async throws {
        let (connection, _) = try await migratedDatabase()
        let family = try await connection.makeFamily()
        let id = try await connection.logEvent(family, type: "diaper", data: #"{"contents":"wet"}"#)
        try await connection.executeUnsafeRawSQL("SET ROLE babybasics_app")
        // Allowed: read, write, update, soft delete.
        try await connection.logEvent(family, type: "note", data: #"{"category":"health"}"#)
        try await connection.execute("UPDATE events SET deleted_at = now(), deleted_by = logged_by, updated_by = logged_by WHERE id = \(id)")
        #expect(try await connection.fetchValue(Int.self, "SELECT count(*) FROM events") == 2)
        // Refused: hard deletes and schema changes.
        for statement: SQL in ["DELETE FROM events", "DELETE FROM users", "DELETE FROM event_history", "TRUNCATE events",
                               "INSERT INTO event_history (event_id, child_id, revision, operation, row_before) SELECT id, child_id, 99, 'update', '{}' FROM events LIMIT 1",
                               "ALTER TABLE events ADD COLUMN x int", "CREATE TABLE sneaky (id int)", "DROP TABLE events"] {
            await expectRefusal("42501", constraint: nil) { try await connection.execute(statement) }
        }
        // Only the SECURITY DEFINER purge hard-deletes.
        #expect(try await connection.fetchValue(Int.self, "SELECT purge_deleted_events()") == 0)
        try await connection.executeUnsafeRawSQL("RESET ROLE")
        #expect(try await connection.fetchValue(Int.self, "SELECT count(*) FROM events") == 2)
    }

    @Test func theReadOnlyRoleOnlyReadsAndNeverSeesSecrets() async throws {
        let (connection, _) = try await migratedDatabase()
        let family = try await connection.makeFamily()
        try await connection.executeUnsafeRawSQL("SET ROLE babybasics_readonly")
        #expect(try await connection.fetchValue(Int.self, "SELECT count(*) FROM children") == 1)
        #expect(try await connection.fetchValue(String.self, "SELECT email FROM users LIMIT 1")?.isEmpty == false)
        await expectRefusal("42501", constraint: nil) { try await connection.execute("SELECT password_hash FROM users") }
        await expectRefusal("42501", constraint: nil) { try await connection.execute("UPDATE children SET name = 'x' WHERE id = \(family.childID)") }
        await expectRefusal("42501", constraint: nil) { try await connection.logEvent(family, type: "note", data: #"{"category":"x"}"#) }
        try await connection.executeUnsafeRawSQL("RESET ROLE")
    }

    /// PRD §11: analytics sees pseudonymous ids, types, times and amounts, never a name, an
    /// email or a note; the tables behind the views are closed to it. The DBA role reads names.
    @Test func theAnalyticsRoleSeesNoNames() async throws {
        let (connection, _) = try await migratedDatabase()
        let family = try await connection.makeFamily()
        try await connection.logEvent(family, type: "note", data: #"{"category":"Visit from Grandma Rose"}"#)
        try await connection.execute("UPDATE events SET notes = 'Rose says hi' WHERE child_id = \(family.childID)")
        try await connection.executeUnsafeRawSQL("SET ROLE babybasics_analytics")
        #expect(try await connection.fetchValue(Int.self, "SELECT count(*) FROM analytics_events WHERE child_id = \(family.childID)") == 1)
        #expect(try await connection.fetchValue(Int.self, "SELECT count(*) FROM analytics_children") == 1)
        #expect(try await connection.fetchValue(Int.self, "SELECT count(*) FROM analytics_caregivers") == 1)
        // Nothing in what it can read holds a name, an email, a note or a zone.
        let everything = try await connection.fetchValue(String.self, """
            SELECT concat_ws(' ', (SELECT string_agg(e::text, ' ') FROM analytics_events e),
                                  (SELECT string_agg(c::text, ' ') FROM analytics_children c),
                                  (SELECT string_agg(g::text, ' ') FROM analytics_caregivers g))
            """) ?? ""
        for secret in ["Rose", "@example.com", "America/New_York", "Visit"] {
            #expect(!everything.contains(secret), "analytics can read \(secret): \(everything)")
        }
        for table in ["users", "children", "caregivers", "events", "event_history", "invites", "events_export"] {
            await expectRefusal("42501", constraint: nil) { try await connection.execute("SELECT 1 FROM \(identifier: table) LIMIT 1") }
        }
        try await connection.executeUnsafeRawSQL("RESET ROLE; SET ROLE babybasics_readonly")
        #expect(try await connection.fetchValue(String.self, "SELECT notes FROM events LIMIT 1") == "Rose says hi", "the DBA role reads notes")
        try await connection.executeUnsafeRawSQL("RESET ROLE")
    }

    @Test func roleSetUpIsIdempotent() async throws {
        let (connection, _) = try await migratedDatabase()
        // The template already ran it once in this cluster; running it again changes nothing.
        try await connection.execute("SELECT setup_roles_and_grants()")
        try await connection.execute("SELECT setup_roles_and_grants()")
        #expect(try await connection.fetchValue(Int.self, "SELECT count(*) FROM pg_roles WHERE rolname IN ('babybasics_app', 'babybasics_readonly', 'babybasics_analytics')") == 3)
    }
}
