import Foundation
import Postgres
import Testing

@Suite struct TriggerAndHistoryTests {
    @Test func updatedAtRevisionAndCursorAdvanceOnUpdate() async throws {
        let (connection, _) = try await migratedDatabase()
        let family = try await connection.makeFamily()
        let id = try await connection.logEvent(family, type: "diaper", data: #"{"contents":"wet"}"#)
        let cursor: SQL = "SELECT e.updated_at, e.revision, sync_child_position(e.child_id), e.change_seq FROM events e WHERE e.id = \(id)"
        let before = try #require(try await connection.query(cursor).first).decode((Date, Int, Int64, Int64).self)
        try await Task.sleep(for: .milliseconds(5))
        try await connection.execute(#"UPDATE events SET data = '{"contents":"both"}', updated_by = logged_by WHERE id = \#(id)"#)
        let after = try #require(try await connection.query(cursor).first).decode((Date, Int, Int64, Int64).self)
        #expect(after.0 > before.0)
        #expect(after.1 == before.1 + 1)
        // The row took a new stamp, above the old one, and it is the child's position.
        #expect(after.3 > before.3 && after.2 == after.3 && before.2 == before.3)

        let user = try await connection.makeUser()
        let userUpdated = try #require(try await connection.fetchValue(Date.self, "SELECT updated_at FROM users WHERE id = \(user)"))
        try await Task.sleep(for: .milliseconds(5))
        try await connection.execute("UPDATE users SET display_name = 'Renamed' WHERE id = \(user)")
        #expect(try #require(try await connection.fetchValue(Date.self, "SELECT updated_at FROM users WHERE id = \(user)")) > userUpdated)
    }

    @Test func historyKeepsTheOldVersionAfterUpdateAndSoftDelete() async throws {
        let (connection, _) = try await migratedDatabase()
        let family = try await connection.makeFamily()
        let partner = try await connection.makeUser()
        let id = try await connection.logEvent(family, type: "diaper", data: #"{"contents":"wet"}"#)
        try await connection.execute(#"UPDATE events SET data = '{"contents":"dirty"}', updated_by = \#(partner) WHERE id = \#(id)"#)
        try await connection.execute("UPDATE events SET deleted_at = now(), deleted_by = \(family.userID), updated_by = \(family.userID) WHERE id = \(id)")
        let history = try await connection.query("""
            SELECT operation, revision, changed_by, row_before -> 'data' ->> 'contents' AS contents
            FROM event_history WHERE event_id = \(id) ORDER BY revision
            """)
        let rows = try history.map { try $0.decode((String, Int, UUID?, String).self) }
        #expect(rows.count == 2)
        #expect(rows[0].0 == "update" && rows[0].1 == 1 && rows[0].2 == partner && rows[0].3 == "wet")
        #expect(rows[1].0 == "soft_delete" && rows[1].1 == 2 && rows[1].2 == family.userID && rows[1].3 == "dirty")
        // The snapshot turns back into a typed row (the base of undo).
        let restored = try await connection.fetchValue(String.self, """
            SELECT (jsonb_populate_record(NULL::events, row_before)).data ->> 'contents' FROM event_history WHERE event_id = \(id) AND revision = 1
            """)
        #expect(restored == "wet")
    }

    @Test func purgeHardDeletesOnlyOldSoftDeletionsWithTheirHistory() async throws {
        let (connection, _) = try await migratedDatabase()
        let family = try await connection.makeFamily()
        let old = try await connection.logEvent(family, type: "note", data: #"{"category":"x"}"#)
        let recent = try await connection.logEvent(family, type: "note", data: #"{"category":"y"}"#)
        let kept = try await connection.logEvent(family, type: "note", data: #"{"category":"z"}"#)
        try await connection.execute("UPDATE events SET deleted_at = now() - interval '31 days', deleted_by = logged_by WHERE id = \(old)")
        try await connection.execute("UPDATE events SET deleted_at = now() - interval '29 days', deleted_by = logged_by WHERE id = \(recent)")
        await expectRefusal("22023", constraint: nil) {
            try await connection.execute("SELECT purge_deleted_events(interval '1 day')")
        }
        #expect(try await connection.fetchValue(Int.self, "SELECT purge_deleted_events()") == 1)
        let remaining = try await connection.query("SELECT id FROM events ORDER BY start_time").decodeColumn(UUID.self)
        #expect(Set(remaining) == [recent, kept])
        #expect(try await connection.fetchValue(Int.self, "SELECT count(*) FROM event_history WHERE event_id = \(old)") == 0)
    }
}
