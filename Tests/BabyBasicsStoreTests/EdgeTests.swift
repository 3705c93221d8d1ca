import BabyBasicsStore
import Foundation
import Postgres
import PostgresTestKit
import Testing

/// The data at its edges (issue 30): which instants an event can have and how exactly they are
/// kept, zones as sent, texts counted in Unicode scalars, a CSV that any reader splits right,
/// and an edit that changes nothing.
@Suite struct EdgeTests {
    // MARK: Instants

    /// Starts from 1900-01-01 00:00 UTC to a day after now: just inside is accepted, just
    /// outside is `invalid(field: "start")` and writes nothing.
    @Test func anEventStartsBetween1900AndADayFromNow() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: "UTC")
        let first = try #require(ISOTimestamp.parse("1900-01-01T00:00:00Z"))
        let justBefore = try #require(ISOTimestamp.parse("1899-12-31T23:59:59.999999Z"))
        let before = try await fixture.fingerprint()
        for (instant, reason) in [
            (justBefore, "must be in 1900 or later"),
            (try #require(ISOTimestamp.parse("0001-01-01T00:00:00Z")), "must be in 1900 or later"),
            (Date().addingTimeInterval(86_400 + 60), "must not be in the future (more than a day after now)"),
            (try #require(ISOTimestamp.parse("9999-12-31T23:59:59Z")), "must not be in the future (more than a day after now)"),
        ] {
            await expectStoreError(.invalid(field: "start", reason: reason)) {
                try await fixture.log(child, user, .diaper(.wet), EventTimestamp(utc: instant, timeZone: "UTC", offsetSeconds: 0))
            }
        }
        await expectStoreError(.invalid(field: "start", reason: "must not be in the future (more than a day after now)")) {
            _ = try await fixture.store.events.startSleep(for: child.id, at: EventTimestamp(utc: Date().addingTimeInterval(2 * 86_400), timeZone: "UTC", offsetSeconds: 0), as: user.id)
        }
        #expect(try await fixture.fingerprint() == before)

        let oldest = try await fixture.log(child, user, .diaper(.wet), EventTimestamp(utc: first, timeZone: "UTC", offsetSeconds: 0))
        let soon = try await fixture.log(child, user, .diaper(.dirty), EventTimestamp(utc: Date().addingTimeInterval(86_400 - 60), timeZone: "UTC", offsetSeconds: 0))
        #expect(try await fixture.store.events.get(oldest.id, as: user.id).start.utc == first)
        #expect(try await fixture.admin.fetchValue(String.self, "SELECT start_time::text FROM events WHERE id = \(oldest.id)") == "1900-01-01 00:00:00+00")
        #expect(soon.start.utc > Date())
    }

    /// An instant goes in and comes back to the microsecond, whatever the fraction: from the
    /// store, as PostgreSQL prints it, and in the JSON export.
    @Test func instantsAreKeptToTheMicrosecond() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: "UTC")
        let texts = ["1900-01-01T00:00:00.000001Z", "1969-12-31T23:59:59.999999Z", "2000-02-29T12:34:56.5Z", "2026-11-20T08:00:00.123456Z", "2026-03-08T07:00:00.000999Z"]
        for text in texts {
            let instant = try #require(ISOTimestamp.parse(text))
            let event = try await fixture.log(child, user, .diaper(.wet), EventTimestamp(utc: instant, timeZone: "UTC", offsetSeconds: 0))
            let read = try await fixture.store.events.get(event.id, as: user.id)
            #expect(ISOTimestamp.format(read.start.utc, alwaysFraction: true) == ISOTimestamp.format(instant, alwaysFraction: true))
            #expect(ISOTimestamp.parseMicroseconds(ISOTimestamp.format(read.start.utc)) == ISOTimestamp.parseMicroseconds(text))
            let printed = try await fixture.admin.fetchValue(String.self, """
                SELECT to_char(start_time AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') FROM events WHERE id = \(event.id)
                """)
            #expect(printed == ISOTimestamp.format(instant, alwaysFraction: true), "\(text)")
        }
    }

    // MARK: Zones

    /// A zone is kept as the caller named it (`UTC` is not renamed `GMT`); an empty or unknown
    /// one is `invalid(field: "start.timeZone")`, on log and on update alike.
    @Test func zonesAreKeptAsSentAndUnknownOnesRefused() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: "UTC")
        let now = Date().addingTimeInterval(-3600)
        let utc = try #require(EventTimestamp(now, zoneNamed: "UTC"))
        #expect(utc.timeZone == "UTC" && utc.offsetSeconds == 0)
        #expect(EventTimestamp(now, zoneNamed: "") == nil && EventTimestamp(now, zoneNamed: "Nowhere/Land") == nil)
        let event = try await fixture.log(child, user, .diaper(.wet), utc)
        #expect(try await fixture.store.events.get(event.id, as: user.id).start.timeZone == "UTC")
        #expect(try await fixture.admin.fetchValue(String.self, "SELECT start_tz FROM events WHERE id = \(event.id)") == "UTC")

        let before = try await fixture.fingerprint()
        for zone in ["", "Nowhere/Land"] {
            await expectStoreError(.invalid(field: "start.timeZone", reason: "\"\(zone)\" is not an IANA time zone")) {
                try await fixture.log(child, user, .diaper(.wet), EventTimestamp(utc: now, timeZone: zone, offsetSeconds: 0))
            }
            await expectStoreError(.invalid(field: "start.timeZone", reason: "\"\(zone)\" is not an IANA time zone")) {
                _ = try await fixture.store.events.update(event.id, with: EventChanges(start: EventTimestamp(utc: now, timeZone: zone, offsetSeconds: 0)), expectedRevision: event.revision, as: user.id)
            }
        }
        #expect(try await fixture.fingerprint() == before)
        let kathmandu = try #require(EventTimestamp(now, zoneNamed: "Asia/Kathmandu"))
        let moved = try await fixture.store.events.update(event.id, with: EventChanges(start: kathmandu), expectedRevision: event.revision, as: user.id)
        #expect(moved.start.timeZone == "Asia/Kathmandu" && moved.start.offsetSeconds == 20_700 && moved.start.utc == event.start.utc)
    }

    // MARK: Texts

    /// Notes hold 5000 Unicode scalars and a note's category 100, counted as PostgreSQL's
    /// char_length counts: "e" and 60,000 combining accents is 60,001, not one character.
    @Test func textLimitsCountUnicodeScalars() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: "UTC")
        let start = EventTimestamp(utc: Date().addingTimeInterval(-3600), timeZone: "UTC", offsetSeconds: 0)
        let zalgo = "e" + String(repeating: "\u{0301}", count: 60_000)
        #expect(zalgo.count == 1, "one grapheme cluster: a Character count would let it through")
        let before = try await fixture.fingerprint()
        for notes in [zalgo, String(repeating: "é", count: 5001), String(repeating: "👶", count: 5001)] {
            await expectStoreError(.invalid(field: "notes", reason: "must be at most 5000 characters (Unicode scalars)")) {
                try await fixture.log(child, user, .diaper(.wet), start, notes: notes)
            }
        }
        await expectStoreError(.invalid(field: "category", reason: "must be at most 100 characters (Unicode scalars)")) {
            try await fixture.log(child, user, .note(category: String(repeating: "c", count: 101)), start)
        }
        await expectStoreError(.invalid(field: "category", reason: "must be at most 100 characters (Unicode scalars)")) {
            try await fixture.log(child, user, .note(category: "e" + String(repeating: "\u{0301}", count: 100)), start)
        }
        #expect(try await fixture.fingerprint() == before)

        let longest = String(repeating: "👶", count: 5000)
        let note = try await fixture.log(child, user, .note(category: String(repeating: "ç", count: 100)), start, notes: longest)
        #expect(note.notes == longest)
        #expect(try await fixture.admin.fetchValue(Int.self, "SELECT char_length(notes) FROM events WHERE id = \(note.id)") == 5000)
        #expect(try await fixture.admin.fetchValue(Int.self, "SELECT char_length(data ->> 'category') FROM events WHERE id = \(note.id)") == 100)
    }

    // MARK: Edits

    /// An edit that changes nothing (no change given, or each the same as stored) leaves the
    /// revision where it was; with a stale revision it is still `conflict(current:)`.
    @Test func anEditThatChangesNothingKeepsTheRevision() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: "UTC")
        let event = try await fixture.log(child, user, .diaper(.wet), at("2026-11-20 08:00", "UTC"), notes: "before")
        let empty = try await fixture.store.events.update(event.id, with: EventChanges(), expectedRevision: event.revision, as: user.id)
        #expect(empty == event)
        let same = try await fixture.store.events.update(event.id, with: EventChanges(payload: .diaper(.wet), start: event.start, notes: "before"), expectedRevision: event.revision, as: user.id)
        #expect(same == event)
        #expect(try await fixture.admin.fetchValue(Int.self, "SELECT revision FROM events WHERE id = \(event.id)") == event.revision)

        let changed = try await fixture.store.events.update(event.id, with: EventChanges(notes: "after"), expectedRevision: event.revision, as: user.id)
        #expect(changed.revision == event.revision + 1 && changed.notes == "after")
        await expectStoreError(.conflict(current: changed)) {
            _ = try await fixture.store.events.update(event.id, with: EventChanges(), expectedRevision: event.revision, as: user.id)
        }
        #expect(try await fixture.store.events.update(event.id, with: EventChanges(), expectedRevision: changed.revision, as: user.id) == changed)
    }

    // MARK: CSV

    /// Notes with CR LF, a lone CR, a lone LF, quotes (one followed by a combining accent) and
    /// commas: Python's csv and a strict RFC 4180 reader each read one record per event, every
    /// note as written, and no cell starts with what a spreadsheet runs as a formula.
    @Test func theCSVSplitsRightWhateverTheNotesHold() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: "America/New_York")
        try await fixture.admin.execute("UPDATE users SET display_name = '-Dad' WHERE id = \(user.id)")
        let notes = ["crlf\r\nsecond line", "lone cr\rsecond", "lone lf\nsecond", "\"\u{0301}quoted\", then, commas", "trailing CR LF\r\n", "\r\nleading", "plain"]
        for (index, note) in notes.enumerated() {
            try await fixture.log(child, user, .diaper(.wet), at("2026-11-20 0\(index):00"), notes: note)
        }
        let buffer = TextBuffer()
        try await fixture.store.events.exportCSV(for: child.id, range: .allTime, as: user.id) { buffer.append($0) }
        let expected = notes.map { $0.unicodeScalars.first == "\r" ? "'" + $0 : $0 }
        for rows in [try await PythonCSV.parse(buffer.text), try StrictCSV.parse(buffer.text)] {
            #expect(rows.count == notes.count + 1)
            #expect(rows.allSatisfy { $0.count == 12 })
            #expect(rows.dropFirst().map { $0[8] } == expected)
            #expect(rows.dropFirst().allSatisfy { $0[7] == "'-Dad" && $0[10] == "UTC-05:00" })
            for cell in rows.joined() {
                #expect(!["=", "+", "-", "@", "\t", "\r"].contains(cell.unicodeScalars.first ?? "x"), "a cell a spreadsheet would run: \(cell.debugDescription)")
            }
        }
    }

    /// A bottle only prepared, or being fed, has no consumed amount yet: the CSV leaves it
    /// empty (not 0) until the remainder is known; a finished one says how much.
    @Test func aBottleNotFinishedHasNoConsumedAmount() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: "America/New_York")
        _ = try await fixture.store.events.prepareBottle(for: child.id, preparedMl: 120, at: at("2026-11-20 07:00"), as: user.id)
        let feeding = try await fixture.store.events.prepareBottle(for: child.id, preparedMl: 150, at: at("2026-11-20 08:00"), as: user.id)
        _ = try await fixture.store.events.startFeeding(feeding.id, at: at("2026-11-20 08:05").utc, as: user.id)
        let finished = try await fixture.store.events.prepareBottle(for: child.id, preparedMl: 90, at: at("2026-11-20 09:00"), as: user.id)
        _ = try await fixture.store.events.finishFeeding(finished.id, remainingMl: 90, at: at("2026-11-20 09:20"), as: user.id)
        let buffer = TextBuffer()
        try await fixture.store.events.exportCSV(for: child.id, range: .allTime, as: user.id) { buffer.append($0) }
        let rows = Array(try StrictCSV.parse(buffer.text).dropFirst())
        #expect(rows.map { [$0[4], $0[5]] } == [["4", ""], ["5", ""], ["3", "0"]])
    }
}
