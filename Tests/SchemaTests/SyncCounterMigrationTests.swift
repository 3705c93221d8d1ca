import EmbeddedPostgres
import PostgresTestKit
import Foundation
import Migrator
import Postgres
import Testing

/// 0011 on a database that already has families: every row gets a stamp in the old feed
/// order, counters start above them, and nothing else about the rows changes; 0013 then
/// draws every stamp from one sequence that starts above them all; 0022 gives each child its
/// own counter again (sync_counters), starting above every stamp the sequence gave.
@Suite struct SyncCounterMigrationTests {
    @Test func existingRowsGetTheirCountersInTheOldFeedOrder() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        let connection = try await database.connect()
        let migrator = Migrator(configuration: database.configuration, options: .init(directory: migrationsDirectory))
        _ = try await migrator.up(to: 10)

        let first = try await connection.makeFamily()
        let second = try await connection.makeFamily()
        let partner = try await connection.makeUser()
        try await connection.execute("INSERT INTO caregivers (child_id, user_id) VALUES (\(first.childID), \(partner))")
        var logged: [UUID] = []
        for index in 0..<5 {
            let family = index % 2 == 0 ? first : second
            logged.append(try await connection.logEvent(family, type: "diaper", data: #"{"contents":"wet"}"#))
        }
        // An edit moves the first event to the end of the old feed order.
        try await connection.execute("UPDATE events SET notes = 'edited', updated_by = logged_by WHERE id = \(logged[0])")
        let before = try await connection.query("SELECT id, revision, updated_at FROM events ORDER BY id").map { try $0.decode((UUID, Int, Date).self) }
        let historyBefore = try await connection.fetchValue(Int.self, "SELECT count(*)::int FROM event_history")

        _ = try await migrator.up(to: 12)

        let after = try await connection.query("SELECT id, revision, updated_at FROM events ORDER BY id").map { try $0.decode((UUID, Int, Date).self) }
        #expect(after.map(\.0) == before.map(\.0) && after.map(\.1) == before.map(\.1) && after.map(\.2) == before.map(\.2),
                "the renumbering is not an edit: no revision, no updated_at")
        #expect(try await connection.fetchValue(Int.self, "SELECT count(*)::int FROM event_history") == historyBefore)
        // First child: events 2 and 4 (logged[2], logged[4]) then the edited logged[0]; then its two caregivers.
        let stamps = try await connection.query("SELECT id, change_seq FROM events WHERE child_id = \(first.childID) ORDER BY change_seq")
            .map { try $0.decode((UUID, Int64).self) }
        #expect(stamps.map(\.0) == [logged[2], logged[4], logged[0]] && stamps.map(\.1) == [1, 2, 3])
        let caregivers = try await connection.query("SELECT change_seq FROM caregivers WHERE child_id = \(first.childID) ORDER BY change_seq").decodeColumn(Int64.self)
        #expect(caregivers == [4, 5])
        let counters = try #require(try await connection.query("SELECT change_seq, record_seq, sync_floor FROM children WHERE id = \(first.childID)").first)
            .decode((Int64, Int64, Int64).self)
        #expect(counters == (6, 6, 0))
        // The next write takes the next value.
        let next = try await connection.logEvent(first, type: "diaper", data: #"{"contents":"dirty"}"#)
        #expect(try await connection.fetchValue(Int64.self, "SELECT change_seq FROM events WHERE id = \(next)") == 7)

        // 0013: stamps come from one sequence, which starts above every child's counter, so a
        // client's position stays valid and the next write of any child sorts above it.
        let secondCounter = try #require(try await connection.fetchValue(Int64.self, "SELECT change_seq FROM children WHERE id = \(second.childID)"))
        #expect(secondCounter < 7)
        _ = try await migrator.up(to: 21)
        #expect(try await connection.fetchValue(Int64.self, "SELECT sync_child_position(\(first.childID))") == 7)
        #expect(try await connection.fetchValue(Int64.self, "SELECT sync_child_position(\(second.childID))") == secondCounter)
        let afterSequence = try await connection.logEvent(second, type: "diaper", data: #"{"contents":"dirty"}"#)
        #expect(try await connection.fetchValue(Int64.self, "SELECT change_seq FROM events WHERE id = \(afterSequence)") == 8,
                "the second child's next stamp is above every stamp of every child")
        #expect(try await connection.fetchValue(Int64.self, "SELECT sync_child_position(\(second.childID))") == 8)

        // 0022: a counter per child, at the sequence's last value (at or above every stamp of
        // every child): every position a client holds stays valid, and each child's next stamp
        // is above it, counted per child from there.
        _ = try await migrator.up()
        for family in [first, second] {
            #expect(try await connection.fetchValue(Int64.self, "SELECT sync_child_position(\(family.childID))") == 8)
            let logged = try await connection.logEvent(family, type: "diaper", data: #"{"contents":"wet"}"#)
            #expect(try await connection.fetchValue(Int64.self, "SELECT change_seq FROM events WHERE id = \(logged)") == 9)
            #expect(try await connection.fetchValue(Int64.self, "SELECT sync_child_position(\(family.childID))") == 9)
        }
        #expect(try await connection.fetchValue(Int.self, "SELECT count(*)::int FROM pg_class WHERE relname = 'sync_stamp_seq'") == 0)
        await connection.close()
    }

    /// A child without a counter (rows loaded with triggers off) has the position of its rows,
    /// and its first stamp starts a counter above all of them; a child with one counts on from it.
    @Test func aMissingCounterStartsAboveTheChildsRows() async throws {
        let (connection, _) = try await migratedDatabase()
        let loaded = try await connection.makeFamily()
        let counted = try await connection.makeFamily()
        let event = try await connection.logEvent(loaded, type: "diaper", data: #"{"contents":"wet"}"#)
        try await connection.executeUnsafeRawSQL("""
            SET session_replication_role = replica;
            UPDATE events SET change_seq = 500 WHERE id = '\(event.uuidString)';
            DELETE FROM sync_counters WHERE child_id = '\(loaded.childID.uuidString)';
            SET session_replication_role = DEFAULT;
            """)
        #expect(try await connection.fetchValue(Int64.self, "SELECT sync_child_position(\(loaded.childID))") == 500)
        let next = try await connection.logEvent(loaded, type: "diaper", data: #"{"contents":"dirty"}"#)
        #expect(try await connection.fetchValue(Int64.self, "SELECT change_seq FROM events WHERE id = \(next)") == 501)
        #expect(try await connection.fetchValue(Int64.self, "SELECT last_stamp FROM sync_counters WHERE child_id = \(loaded.childID)") == 501)

        // The other child kept its own counter: 1 for its record, 2 for its primary caregiver.
        let own = try await connection.logEvent(counted, type: "diaper", data: #"{"contents":"wet"}"#)
        #expect(try await connection.fetchValue(Int64.self, "SELECT change_seq FROM events WHERE id = \(own)") == 3)
    }

    /// Many stamps of one child in one transaction count on from its counter without walking
    /// every version the transaction wrote (the hint `bb_sync.last_counter`); a forged hint
    /// changes nothing: it matches only a visible version of that child's own counter.
    @Test func manyStampsInOneTransactionAndAForgedHint() async throws {
        let (connection, _) = try await migratedDatabase()
        let family = try await connection.makeFamily()
        let other = try await connection.makeFamily()
        let position: SQL = "SELECT sync_child_position(\(family.childID))"
        let before = try #require(try await connection.fetchValue(Int64.self, position))
        try await connection.transaction { connection in
            try await connection.execute("""
                INSERT INTO events (child_id, logged_by, event_type, start_time, start_tz, start_offset_seconds, data)
                SELECT \(family.childID), \(family.userID), 'diaper', now() - g * interval '1 minute', 'UTC', 0, '{"contents":"wet"}'
                FROM generate_series(1, 2000) AS g
                """)
        }
        let stamps = try await connection.query("SELECT change_seq FROM events WHERE child_id = \(family.childID) ORDER BY change_seq").decodeColumn(Int64.self)
        #expect(stamps == Array((before + 1)...(before + 2000)))
        #expect(try await connection.fetchValue(Int64.self, position) == before + 2000)

        let othersCounter: SQL = "SELECT last_stamp FROM sync_counters WHERE child_id = \(other.childID)"
        let othersBefore = try await connection.fetchValue(Int64.self, othersCounter)
        let othersVersion = try #require(try await connection.fetchValue(String.self, "SELECT ctid::text FROM sync_counters WHERE child_id = \(other.childID)"))
        for forged in ["\(family.childID.uuidString.lowercased())@\(othersVersion)", "\(family.childID.uuidString.lowercased())@(999999,1)", "nonsense"] {
            let stamp = try await connection.transaction { connection in
                try await connection.execute("SELECT set_config('bb_sync.last_counter', \(forged), true)")
                return try await connection.logEvent(family, type: "diaper", data: #"{"contents":"dirty"}"#)
            }
            let taken = try await connection.fetchValue(Int64.self, "SELECT change_seq FROM events WHERE id = \(stamp)")
            #expect(taken == (try await connection.fetchValue(Int64.self, position)), "hint \(forged)")
        }
        #expect(try await connection.fetchValue(Int64.self, position) == before + 2003)
        #expect(try await connection.fetchValue(Int64.self, othersCounter) == othersBefore, "a forged hint moved another child's counter")
    }
}
