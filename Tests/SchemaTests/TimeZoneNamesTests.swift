import EmbeddedPostgres
import Foundation
import Postgres
import Testing

/// Zones are checked against the table `time_zone_names` (0020): the same answer as the
/// per-session cache they replace, with no per-session rebuild.
@Suite struct TimeZoneNamesTests {
    @Test func theTableHoldsTheServersZonesWithoutFileSystemArtefacts() async throws {
        let (connection, _) = try await migratedDatabase()
        let missing = try await connection.fetchValue(Int.self, """
            SELECT count(*) FROM pg_timezone_names n
             WHERE n.name !~ '^(posix|right)/' AND n.name NOT IN ('localtime', 'posixrules', 'Factory')
               AND NOT EXISTS (SELECT 1 FROM time_zone_names z WHERE z.name = n.name)
            """)
        #expect(missing == 0)
        let artefacts = try await connection.fetchValue(Int.self, """
            SELECT count(*) FROM time_zone_names WHERE name ~ '^(posix|right)/' OR name IN ('localtime', 'posixrules', 'Factory')
            """)
        #expect(artefacts == 0)
        #expect(try await connection.fetchValue(Bool.self, "SELECT is_valid_timezone('America/New_York')") == true)
        for refused in ["posix/America/New_York", "right/UTC", "Factory", "localtime", "Mars/Olympus_Mons", ""] {
            #expect(try await connection.fetchValue(Bool.self, "SELECT is_valid_timezone(\(refused))") == false, "\(refused)")
        }
        #expect(try await connection.fetchValue(Bool.self, "SELECT is_valid_timezone(NULL)") == false)
    }

    @Test func endZonesAreCheckedLikeStartZones() async throws {
        let (connection, _) = try await migratedDatabase()
        let family = try await connection.makeFamily()
        await expectRefusal("23514", constraint: "events_end_tz_valid") {
            try await connection.execute("""
                INSERT INTO events (child_id, logged_by, event_type, start_time, start_tz, start_offset_seconds, end_time, end_tz, end_offset_seconds)
                VALUES (\(family.childID), \(family.userID), 'sleep', '2026-11-20 10:00+00', 'UTC', 0, '2026-11-20 11:00+00', 'posix/UTC', 0)
                """)
        }
        try await connection.execute("""
            INSERT INTO events (child_id, logged_by, event_type, start_time, start_tz, start_offset_seconds, end_time, end_tz, end_offset_seconds)
            VALUES (\(family.childID), \(family.userID), 'sleep', '2026-11-20 10:00+00', 'UTC', 0, '2026-11-20 11:00+00', 'Europe/London', 0)
            """)
    }

    /// A zone the table lacks (a tzdata newer than the migration) is refused until
    /// refresh_time_zone_names() adds it; rows already in it are not re-checked when other
    /// columns change.
    @Test func refreshAddsZonesAndUnchangedZonesAreNotRechecked() async throws {
        let (connection, _) = try await migratedDatabase()
        let family = try await connection.makeFamily()
        let event = try await connection.logEvent(family, type: "diaper", data: #"{"contents":"wet"}"#, zone: "Asia/Kolkata")
        try await connection.execute("DELETE FROM time_zone_names WHERE name = 'Asia/Kolkata'")

        await expectRefusal("23514", constraint: "events_start_tz_valid") {
            try await connection.logEvent(family, type: "diaper", data: #"{"contents":"wet"}"#, zone: "Asia/Kolkata")
        }
        await expectRefusal("23514", constraint: "children_timezone_valid") {
            try await connection.execute("UPDATE children SET timezone = 'Asia/Kolkata' WHERE id = \(family.childID)")
        }
        // The event's zone did not change: the note goes in.
        try await connection.execute("UPDATE events SET notes = 'changed' WHERE id = \(event)")

        #expect(try await connection.fetchValue(Int.self, "SELECT refresh_time_zone_names()") == 1)
        #expect(try await connection.fetchValue(Int.self, "SELECT refresh_time_zone_names()") == 0)
        try await connection.logEvent(family, type: "diaper", data: #"{"contents":"wet"}"#, zone: "Asia/Kolkata")
        try await connection.execute("UPDATE children SET timezone = 'Asia/Kolkata' WHERE id = \(family.childID)")
    }

    /// Nothing is cached in the session any more (the old cache cost a new or reset session
    /// about 25 ms on its first write), and events have one BEFORE trigger.
    @Test func noSessionCacheAndOneTriggerBeforeEachWrite() async throws {
        let (connection, _) = try await migratedDatabase()
        let family = try await connection.makeFamily()
        try await connection.logEvent(family, type: "diaper", data: #"{"contents":"wet"}"#)
        #expect(try await connection.fetchValue(String.self, "SELECT current_setting('babybasics.timezone_names_cache', true)") ?? "" == "")
        let triggers = try await connection.query("""
            SELECT tgname FROM pg_trigger WHERE tgrelid = 'events'::regclass AND NOT tgisinternal ORDER BY 1
            """).decodeColumn(String.self)
        #expect(triggers == ["events_bookkeeping", "events_record_history", "events_sync_removal"])
        // 0020 dropped PRD 8's idx_events_updated; 0024 restored it (IndexUsageTests names all four).
        #expect(try await connection.fetchValue(Bool.self, "SELECT to_regclass('idx_events_updated') IS NOT NULL") == true)
    }

    /// The application role reads the names through the trigger (the table is readable by
    /// everyone) but cannot change them.
    @Test func theAppRoleChecksZonesButCannotChangeThem() async throws {
        let (connection, _) = try await migratedDatabase()
        let family = try await connection.makeFamily()
        try await connection.execute("SET ROLE babybasics_app")
        try await connection.logEvent(family, type: "diaper", data: #"{"contents":"wet"}"#, zone: "Europe/Paris")
        await expectRefusal("42501", constraint: nil) {
            try await connection.execute("INSERT INTO time_zone_names VALUES ('Mars/Olympus_Mons')")
        }
        await expectRefusal("42501", constraint: nil) {
            _ = try await connection.fetchValue(Int.self, "SELECT refresh_time_zone_names()")
        }
        try await connection.execute("RESET ROLE")
    }
}
