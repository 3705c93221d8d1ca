import BabyBasicsStore
import EmbeddedPostgres
import Foundation
import Postgres
import PostgresTestKit
import Testing

@Suite struct ExportTests {
    @Test func csvParsesBackWithARealCSVParser() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: "America/New_York")
        let tricky = "Blowout, big one; \"quoted\"\nsecond line, too"
        try await fixture.log(child, user, .diaper(.both), at("2026-11-20 14:00"), notes: tricky)
        try await fixture.log(child, user, .sleep, at("2026-11-20 09:30"), end: at("2026-11-20 10:15"), notes: "Fussy before sleep")
        let bottle = try await fixture.store.events.prepareBottle(for: child.id, preparedMl: 120, at: at("2026-11-20 08:15"), as: user.id)
        _ = try await fixture.store.events.finishFeeding(bottle.id, remainingMl: 15, at: at("2026-11-20 08:40"), as: user.id)
        try await fixture.log(child, user, .note(category: "Medication"), at("2026-11-20 15:00", "Europe/London"), notes: "Vitamin D")
        let buffer = TextBuffer()
        try await fixture.store.events.exportCSV(for: child.id, range: .allTime, as: user.id) { buffer.append($0) }
        let rows = try await PythonCSV.parse(buffer.text)
        #expect(rows.first == ["date", "time", "event_type", "duration_minutes", "amount_prepared_oz", "amount_consumed_oz", "diaper_contents", "logged_by", "notes",
                               "time_zone", "utc_offset", "start_utc"])
        #expect(rows.dropFirst().map(\.[11]) == ["2026-11-20T13:15:00.000000Z", "2026-11-20T14:30:00.000000Z", "2026-11-20T15:00:00.000000Z", "2026-11-20T19:00:00.000000Z"])
        #expect(rows.dropFirst().map { Array($0.prefix(11)) } == [
            ["2026-11-20", "08:15", "feeding", "", "4", "3.5", "", "Parent", "", "America/New_York", "UTC-05:00"],
            ["2026-11-20", "09:30", "sleep", "45", "", "", "", "Parent", "Fussy before sleep", "America/New_York", "UTC-05:00"],
            // In its own zone: 15:00 in London (10:00 in New York, where the child lives); the
            // zone columns say why it sorts before 14:00.
            ["2026-11-20", "15:00", "note", "", "", "", "", "Parent", "Medication: Vitamin D", "Europe/London", "UTC+00:00"],
            ["2026-11-20", "14:00", "diaper", "", "", "", "both", "Parent", tricky, "America/New_York", "UTC-05:00"],
        ])
        let lastDay = TextBuffer()
        try await fixture.store.events.exportCSV(for: child.id, range: .last24Hours, now: at("2026-11-21 12:00").utc, as: user.id) { lastDay.append($0) }
        #expect(try await PythonCSV.parse(lastDay.text).count == 2)
    }

    /// OWASP "CSV injection": a note or display name that a spreadsheet would run as a formula
    /// reads back as text with a leading `'`; anything else, and every other column, as it is.
    @Test func formulasInNotesAndNamesAreDefused() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: "Asia/Kathmandu")
        try await fixture.admin.execute("UPDATE users SET display_name = '=HYPERLINK(\"http://x\")' WHERE id = \(user.id)")
        let notes = ["=1+1", "+1 bottle", "-2 oz", "@SUM(A1:A9)", "\tcmd", "\rcmd", "a=b", "Fine, really", "\u{FF1D}1+1"]
        for (index, note) in notes.enumerated() {
            try await fixture.log(child, user, .diaper(.wet), at("2026-11-20 0\(index):00", "Asia/Kathmandu"), notes: note)
        }
        let buffer = TextBuffer()
        try await fixture.store.events.exportCSV(for: child.id, range: .allTime, as: user.id) { buffer.append($0) }
        let rows = Array(try await PythonCSV.parse(buffer.text).dropFirst())
        #expect(rows.map { $0[8] } == ["'=1+1", "'+1 bottle", "'-2 oz", "'@SUM(A1:A9)", "'\tcmd", "'\rcmd", "a=b", "Fine, really", "\u{FF1D}1+1"])
        #expect(rows.allSatisfy { $0[7] == "'=HYPERLINK(\"http://x\")" })
        #expect(rows.allSatisfy { $0[9] == "Asia/Kathmandu" && $0[10] == "UTC+05:45" }, "the offset is written so that it is not a formula")
    }

    /// One definition: the CSV a parent downloads is the view a DBA queries, row for row.
    @Test func theCSVIsTheDBAsView() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: "America/New_York")
        try await fixture.log(child, user, .feeding(.breast(startedSide: .left, bothSides: true)), at("2026-03-08 01:40"), end: at("2026-03-08 03:05"))
        try await fixture.log(child, user, .feeding(.bottle(amountMl: 89, preparedMl: nil, remainingMl: nil, feedingStartedAt: nil)), at("2026-03-08 07:00"))
        let bottle = try await fixture.store.events.prepareBottle(for: child.id, preparedMl: 150, at: at("2026-03-08 09:00"), as: user.id)
        _ = try await fixture.store.events.finishFeeding(bottle.id, remainingMl: 30, at: at("2026-03-08 09:30"), as: user.id)
        try await fixture.log(child, user, .sleep, at("2026-03-08 12:00"), end: at("2026-03-08 12:59"))
        try await fixture.log(child, user, .note(category: "Health"), at("2026-03-08 13:00"))
        let buffer = TextBuffer()
        try await fixture.store.events.exportCSV(for: child.id, range: .allTime, as: user.id) { buffer.append($0) }
        let csv = Array(try await PythonCSV.parse(buffer.text).dropFirst())

        let dba = try await PostgresConnection.connect(PostgresConfiguration(fixture.database.connectionString + "&options=-crole%3Dbabybasics_readonly"))
        let view = try await dba.query("""
            SELECT date, time, event_type, duration_minutes::text, amount_prepared_oz::text, amount_consumed_oz::text,
                   diaper_contents, logged_by, notes, time_zone, utc_offset, start_utc
            FROM events_export WHERE child_id = \(child.id) ORDER BY start_time, event_id
            """).map { row in try (0..<12).map { try row.decode(String?.self, at: $0) ?? "" } }
        await dba.close()
        #expect(csv == view)
        #expect(csv.map { Array($0.prefix(11)) } == [
            // Across the spring-forward gap: 01:40 EST to 03:05 EDT is 25 minutes, not 85.
            ["2026-03-08", "01:40", "feeding", "25", "", "", "", "Parent", "", "America/New_York", "UTC-05:00"],
            ["2026-03-08", "07:00", "feeding", "", "3", "3", "", "Parent", "", "America/New_York", "UTC-04:00"],
            // 150 mL is 5.07 oz, 120 mL drunk is 4.06 oz: to the nearest half ounce.
            ["2026-03-08", "09:00", "feeding", "", "5", "4", "", "Parent", "", "America/New_York", "UTC-04:00"],
            ["2026-03-08", "12:00", "sleep", "59", "", "", "", "Parent", "", "America/New_York", "UTC-04:00"],
            ["2026-03-08", "13:00", "note", "", "", "", "", "Parent", "Health", "America/New_York", "UTC-04:00"],
        ])
    }

    @Test func anAllTimeExportStreamsInBatches() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: "UTC")
        try await fixture.admin.execute("""
            INSERT INTO events (child_id, logged_by, event_type, start_time, start_tz, start_offset_seconds, data, notes)
            SELECT \(child.id), \(user.id), 'diaper', timestamptz '2025-01-01 00:00+00' + n * interval '7 minutes', 'UTC', 0, '{"contents":"wet"}', 'n=' || n
            FROM generate_series(1, 5000) AS n
            """)
        let chunks = ChunkCounter()
        try await fixture.store.events.exportCSV(for: child.id, range: .allTime, as: user.id) { chunks.add($0) }
        #expect(chunks.lines == 5001)
        // Header, then one chunk per 500-row batch: never everything at once.
        #expect(chunks.count == 11 && chunks.largest <= 500 * 120)
    }

    @Test func theJSONExportRoundTrips() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: "America/New_York")
        var logged: [Event] = []
        logged.append(try await fixture.log(child, user, .feeding(.breast(startedSide: .right, bothSides: true)), at("2026-11-20 06:00"), end: at("2026-11-20 06:20")))
        logged.append(try await fixture.store.events.prepareBottle(for: child.id, preparedMl: 118.5, at: at("2026-11-20 07:00"), as: user.id))
        logged[1] = try await fixture.store.events.startFeeding(logged[1].id, at: at("2026-11-20 07:10").utc.addingTimeInterval(0.123456), as: user.id)
        logged.append(try await fixture.log(child, user, .note(category: "Milestone"), at("2026-11-20 09:00"), notes: "First smile 😊, \"really\""))
        logged.append(try await fixture.store.events.softDelete(try await fixture.log(child, user, .diaper(.dirty), at("2026-11-20 10:00")).id, as: user.id))
        let buffer = TextBuffer()
        try await fixture.store.events.exportJSON(as: user.id) { buffer.append($0) }
        let document = try ExportCoding.decoder.decode(ExportDocument.self, from: Data(buffer.text.utf8))
        #expect(document.user.id == user.id)
        #expect(document.children.map(\.child.id) == [child.id])
        #expect(document.children[0].caregivers.map(\.userID) == [user.id])
        let exported = document.children[0].events
        #expect(exported.map(\.id) == logged.map(\.id))
        for (event, original) in zip(exported, logged) {
            #expect(event.start == original.start && event.end == original.end && event.notes == original.notes)
            #expect(event.revision == original.revision && event.loggedBy == user.id && event.deletedAt == original.deletedAt)
            #expect(event.createdAt == original.createdAt && event.updatedAt == original.updatedAt)
        }
        #expect(exported[1].data["amount_prepared_ml"] == .number(118.5))
        #expect(exported[1].data["feeding_started_at"] != nil)
    }
}

final class TextBuffer: @unchecked Sendable {
    private let lock = NSLock()
    private var parts: [String] = []
    func append(_ text: String) { lock.withLock { parts.append(text) } }
    var text: String { lock.withLock { parts.joined() } }
}

final class ChunkCounter: @unchecked Sendable {
    private let lock = NSLock()
    private(set) var count = 0
    private(set) var lines = 0
    private(set) var largest = 0
    func add(_ chunk: String) {
        lock.withLock {
            count += 1
            lines += chunk.components(separatedBy: "\r\n").count - 1
            largest = max(largest, chunk.utf8.count)
        }
    }
}
