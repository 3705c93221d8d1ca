import Foundation
import Postgres
import Testing

/// Each CHECK and partial unique index on events, refused and accepted.
@Suite struct EventConstraintTests {
    @Test func twoActiveSleepsAreRefusedNamingTheIndex() async throws {
        let (connection, _) = try await migratedDatabase()
        let family = try await connection.makeFamily()
        let first = try await connection.logEvent(family, type: "sleep")
        await expectRefusal("23505", constraint: "events_one_active_sleep") {
            try await connection.logEvent(family, type: "sleep", start: "2026-11-20 11:00:00+00")
        }
        // An ended sleep does not block a new one.
        try await connection.execute("""
            UPDATE events SET end_time = start_time + interval '1 hour', end_tz = start_tz, end_offset_seconds = start_offset_seconds,
                              updated_by = logged_by WHERE id = \(first)
            """)
        let second = try await connection.logEvent(family, type: "sleep", start: "2026-11-20 12:00:00+00")
        // A soft-deleted active sleep does not block either.
        try await connection.execute("UPDATE events SET deleted_at = now(), deleted_by = logged_by WHERE id = \(second)")
        try await connection.logEvent(family, type: "sleep", start: "2026-11-20 13:00:00+00")
        // Another child may sleep at the same time.
        let other = try await connection.makeFamily()
        try await connection.logEvent(other, type: "sleep", start: "2026-11-20 13:00:00+00")
    }

    /// Events of a child that does not exist are the foreign key's error however many rows the
    /// statement writes (a second row used to meet the stamp's unique key first: 23505 on
    /// events_child_change_seq_key, 0030); a NULL child is the column's NOT NULL; the same
    /// statements for a real child are accepted.
    @Test func eventsOfAnUnknownChildAreAForeignKeyError() async throws {
        let (connection, _) = try await migratedDatabase()
        let family = try await connection.makeFamily(timezone: "UTC")
        func insert(_ child: UUID, rows: Int) -> SQL {
            """
            INSERT INTO events (child_id, logged_by, event_type, start_time, start_tz, start_offset_seconds, data)
            SELECT \(child), \(family.userID), 'diaper', timestamptz '2026-11-20 10:00+00' + n * interval '1 minute', 'UTC', 0, '{"contents":"wet"}'
            FROM generate_series(1, \(rows)) AS n
            """
        }
        func copy(_ child: UUID, rows: Int) async throws {
            _ = try await connection.copyIn(table: "events", columns: ["child_id", "logged_by", "event_type", "start_time", "start_tz", "start_offset_seconds", "data"]) { writer in
                for index in 0..<rows {
                    try writer.append([child, family.userID, "diaper", Date(timeIntervalSince1970: 1_763_632_800 + Double(index) * 60), "UTC", Int32(0), PostgresJSON(["contents": "wet"])])
                }
            }
        }
        let unknown = UUID()
        for rows in [1, 3] {
            await expectRefusal("23503", constraint: "events_child_id_fkey") { try await connection.execute(insert(unknown, rows: rows)) }
            await expectRefusal("23503", constraint: "events_child_id_fkey") { try await copy(unknown, rows: rows) }
        }
        do {
            try await connection.execute(insert(unknown, rows: 2))
            Issue.record("two events of an unknown child were accepted")
        } catch let error as PostgresError {
            #expect(error.detail == "Key (child_id)=(\(unknown.uuidString.lowercased())) is not present in table \"children\".", "\(error)")
        }
        // No child at all is still the column's NOT NULL.
        await expectRefusal("23502", constraint: nil) {
            try await connection.execute("""
                INSERT INTO events (child_id, logged_by, event_type, start_time, start_tz, start_offset_seconds, data)
                VALUES (NULL, \(family.userID), 'diaper', timestamptz '2026-11-20 10:00+00', 'UTC', 0, '{"contents":"wet"}')
                """)
        }
        #expect(try await connection.fetchValue(Int.self, "SELECT count(*)::int FROM events") == 0)
        try await connection.execute(insert(family.childID, rows: 3))
        try await copy(family.childID, rows: 3)
        #expect(try await connection.fetchValue(Int.self, "SELECT count(DISTINCT change_seq)::int FROM events WHERE child_id = \(family.childID)") == 6)
    }

    @Test func twentyConcurrentSleepStartsHaveExactlyOneWinner() async throws {
        let (setup, database) = try await migratedDatabase()
        let family = try await setup.makeFamily()
        let connections = try await withThrowingTaskGroup(of: PostgresConnection.self) { group in
            for _ in 0..<20 { group.addTask { try await database.connect() } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        let outcomes = await withTaskGroup(of: Result<Void, PostgresError>.self) { group in
            for connection in connections {
                group.addTask {
                    do {
                        try await connection.logEvent(family, type: "sleep")
                        return .success(())
                    } catch let error as PostgresError {
                        return .failure(error)
                    } catch {
                        return .failure(PostgresError(kind: .misuse, message: "\(error)"))
                    }
                }
            }
            return await group.reduce(into: []) { $0.append($1) }
        }
        let winners = outcomes.filter { if case .success = $0 { true } else { false } }
        #expect(winners.count == 1)
        for case .failure(let error) in outcomes {
            #expect(error.kind == .uniqueViolation && error.constraint == "events_one_active_sleep", "\(error)")
        }
        #expect(try await setup.fetchValue(Int.self, "SELECT count(*) FROM events WHERE event_type = 'sleep'") == 1)
    }

    @Test func oneBottleFeedingInProgressButManyPreparedBottles() async throws {
        let (connection, _) = try await migratedDatabase()
        let family = try await connection.makeFamily()
        try await connection.logEvent(family, type: "feeding", data: #"{"kind":"bottle","amount_prepared_ml":120}"#)
        try await connection.logEvent(family, type: "feeding", data: #"{"kind":"bottle","amount_prepared_ml":90}"#)
        try await connection.logEvent(family, type: "feeding", data: #"{"kind":"bottle","amount_prepared_ml":120,"feeding_started_at":"2026-11-20T10:05:00Z"}"#)
        await expectRefusal("23505", constraint: "events_one_bottle_in_progress") {
            try await connection.logEvent(family, type: "feeding", data: #"{"kind":"bottle","amount_prepared_ml":60,"feeding_started_at":"2026-11-20T10:06:00Z"}"#)
        }
    }

    @Test func dataIsCheckedPerEventType() async throws {
        let (connection, _) = try await migratedDatabase()
        let family = try await connection.makeFamily()
        let refused: [(type: String, data: String, constraint: String)] = [
            ("bath", "{}", "events_event_type_valid"),
            ("diaper", #"{"contents":"dry"}"#, "events_diaper_data_valid"),
            ("diaper", "{}", "events_diaper_data_valid"),
            ("diaper", #"{"contents":"wet","color":"green"}"#, "events_diaper_data_valid"),
            ("sleep", #"{"quality":"good"}"#, "events_sleep_data_valid"),
            ("note", #"{"category":"  "}"#, "events_note_data_valid"),
            ("note", #"{"category":"health","text":"x"}"#, "events_note_data_valid"),
            ("feeding", #"{"kind":"formula"}"#, "events_feeding_data_valid"),
            ("feeding", #"{"kind":"breast","started_side":"middle","both_sides":false}"#, "events_feeding_data_valid"),
            ("feeding", #"{"kind":"breast","started_side":"left"}"#, "events_feeding_data_valid"),
            ("feeding", #"{"kind":"bottle","amount_ml":0}"#, "events_feeding_data_valid"),
            ("feeding", #"{"kind":"bottle","amount_ml":-30}"#, "events_feeding_data_valid"),
            ("feeding", #"{"kind":"bottle","amount_prepared_ml":0}"#, "events_feeding_data_valid"),
            ("feeding", #"{"kind":"bottle","amount_prepared_ml":100,"amount_remaining_ml":120}"#, "events_feeding_data_valid"),
            ("feeding", #"{"kind":"bottle","amount_prepared_ml":100,"amount_remaining_ml":-1}"#, "events_feeding_data_valid"),
            ("feeding", #"{"kind":"bottle","amount_prepared_ml":100,"feeding_started_at":"yesterday"}"#, "events_feeding_data_valid"),
            ("feeding", #"{"kind":"bottle","amount_ml":100,"brand":"x"}"#, "events_feeding_data_valid"),
        ]
        for (type, data, constraint) in refused {
            await expectRefusal("23514", constraint: constraint) { try await connection.logEvent(family, type: type, data: data) }
        }
        let accepted: [(String, String)] = [
            ("diaper", #"{"contents":"wet"}"#), ("diaper", #"{"contents":"dirty"}"#), ("diaper", #"{"contents":"both"}"#),
            ("note", #"{"category":"health"}"#),
            ("feeding", #"{"kind":"breast","started_side":"right","both_sides":true}"#),
            ("feeding", #"{"kind":"bottle","amount_ml":120}"#),
            ("feeding", #"{"kind":"bottle","amount_prepared_ml":100,"amount_remaining_ml":0}"#),
            ("feeding", #"{"kind":"bottle","amount_prepared_ml":100,"amount_remaining_ml":100}"#),
        ]
        for (type, data) in accepted { try await connection.logEvent(family, type: type, data: data) }
        #expect(try await connection.fetchValue(Int.self, "SELECT count(*) FROM events") == accepted.count)
    }

    @Test func timesMustBeOrderedCompleteAndAtMostADay() async throws {
        let (connection, _) = try await migratedDatabase()
        let family = try await connection.makeFamily()
        await expectRefusal("23514", constraint: "events_end_after_start") {
            try await connection.logEvent(family, type: "sleep", start: "2026-11-20 10:00:00+00", end: "2026-11-20 09:59:59+00")
        }
        await expectRefusal("23514", constraint: "events_max_duration_24h") {
            try await connection.logEvent(family, type: "sleep", start: "2026-11-20 10:00:00+00", end: "2026-11-21 10:00:01+00")
        }
        await expectRefusal("23514", constraint: "events_end_all_or_none") {
            try await connection.execute("""
                INSERT INTO events (child_id, logged_by, event_type, start_time, start_tz, start_offset_seconds, end_time)
                VALUES (\(family.childID), \(family.userID), 'sleep', now() - interval '1 hour', 'UTC', 0, now())
                """)
        }
        await expectRefusal("23514", constraint: "events_start_tz_valid") {
            try await connection.logEvent(family, type: "diaper", data: #"{"contents":"wet"}"#, zone: "Mars/Olympus_Mons")
        }
        // Exactly 24 hours and a zero-length event are fine.
        try await connection.logEvent(family, type: "sleep", start: "2026-11-18 10:00:00+00", end: "2026-11-19 10:00:00+00")
        try await connection.logEvent(family, type: "sleep", start: "2026-11-17 10:00:00+00", end: "2026-11-17 10:00:00+00")
    }

    /// Migration 0025: a start in 1900 or later, notes of at most 5000 Unicode scalars and a
    /// note's category of at most 100, each counted by char_length ("e" and 60,000 combining
    /// accents is 60,001), for every writer, not only the app.
    @Test func startsFrom1900AndTextsWithinTheirScalarLimits() async throws {
        let (connection, _) = try await migratedDatabase()
        let family = try await connection.makeFamily()
        let wet = #"{"contents":"wet"}"#
        await expectRefusal("23514", constraint: "events_start_from_1900") {
            try await connection.logEvent(family, type: "diaper", data: wet, start: "1899-12-31 23:59:59.999999+00", zone: "UTC")
        }
        await expectRefusal("23514", constraint: "events_start_from_1900") {
            try await connection.logEvent(family, type: "diaper", data: wet, start: "0001-01-01 00:00:00+00", zone: "UTC")
        }
        let event = try await connection.logEvent(family, type: "diaper", data: wet, start: "1900-01-01 00:00:00+00", zone: "UTC")

        for notes in ["e" + String(repeating: "\u{0301}", count: 60_000), String(repeating: "é", count: 5001)] {
            await expectRefusal("23514", constraint: "events_notes_length") {
                try await connection.execute("UPDATE events SET notes = \(notes), updated_by = logged_by WHERE id = \(event)")
            }
        }
        try await connection.execute("UPDATE events SET notes = \(String(repeating: "👶", count: 5000)), updated_by = logged_by WHERE id = \(event)")

        func category(_ text: String) -> String { #"{"category":"\#(text)"}"# }
        await expectRefusal("23514", constraint: "events_note_category_length") {
            try await connection.logEvent(family, type: "note", data: category(String(repeating: "c", count: 101)))
        }
        await expectRefusal("23514", constraint: "events_note_category_length") {
            try await connection.logEvent(family, type: "note", data: category("e" + String(repeating: "\u{0301}", count: 100)))
        }
        try await connection.logEvent(family, type: "note", data: category(String(repeating: "ç", count: 100)))
        #expect(try await connection.fetchValue(Int.self, "SELECT count(*)::int FROM events") == 2)
    }

    @Test func aDBAInsertNamingOnlyTheContractColumnsWorks() async throws {
        let (connection, _) = try await migratedDatabase()
        let family = try await connection.makeFamily()
        try await connection.execute("""
            INSERT INTO events (id, child_id, logged_by, event_type, start_time, start_tz, start_offset_seconds, data)
            VALUES (\(UUID()), \(family.childID), \(family.userID), 'diaper', now(), 'Europe/London', 0, '{"contents":"both"}')
            """)
        let row = try #require(try await connection.query("SELECT revision, updated_by, change_seq FROM events").first)
        let (revision, updatedBy, sequence) = try row.decode((Int, UUID?, Int64).self)
        #expect(revision == 1 && updatedBy == family.userID && sequence > 0)
    }

    /// An offset the zone never had at that instant is refused; both readings of a repeated
    /// (fall-back) hour are consistent pairs and accepted.
    @Test func anOffsetMustBeTheZonesAtThatInstant() async throws {
        let (connection, _) = try await migratedDatabase()
        let family = try await connection.makeFamily()
        func insert(_ start: String, _ offset: Int32, end: String? = nil, endOffset: Int32? = nil) async throws {
            try await connection.execute("""
                INSERT INTO events (child_id, logged_by, event_type, start_time, start_tz, start_offset_seconds, end_time, end_tz, end_offset_seconds, data)
                VALUES (\(family.childID), \(family.userID), 'sleep', \(start)::timestamptz, 'America/New_York', \(offset),
                        \(end)::timestamptz, \(end == nil ? nil : "America/New_York"), \(endOffset), '{}')
                """)
        }
        await expectRefusal("23514", constraint: "events_start_offset_matches_zone") { try await insert("2026-07-14 12:00+00", 3600) }
        await expectRefusal("23514", constraint: "events_start_offset_matches_zone") { try await insert("2026-07-14 12:00+00", -18000) }
        try await insert("2026-07-14 12:00+00", -14400, end: "2026-07-14 13:00+00", endOffset: -14400)
        await expectRefusal("23514", constraint: "events_end_offset_matches_zone") {
            try await insert("2026-07-15 12:00+00", -14400, end: "2026-07-15 13:00+00", endOffset: 0)
        }
        // 01:30 on 1 Nov 2026 happens twice in New York: 05:30 UTC (EDT) and 06:30 UTC (EST).
        try await insert("2026-11-01 05:30+00", -14400, end: "2026-11-01 05:40+00", endOffset: -14400)
        try await insert("2026-11-01 06:30+00", -18000, end: "2026-11-01 06:40+00", endOffset: -18000)
        await expectRefusal("23514", constraint: "events_start_offset_matches_zone") { try await insert("2026-11-01 06:30+00", -14400) }
    }
}
