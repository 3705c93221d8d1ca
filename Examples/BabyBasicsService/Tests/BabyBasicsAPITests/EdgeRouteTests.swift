import BabyBasicsStore
import Foundation
import Postgres
import PostgresTestKit
import Testing

/// The API at its edges (issue 30), over real HTTP: every accepted instant comes back as sent,
/// from the API, the database and the CSV; instants outside the window, empty or unknown zones
/// and over-long texts are 422 naming the API's own field; bodies are snake_case; an empty
/// PATCH is no edit; one id sent in parallel to two children is one event for each.
@Suite struct EdgeRouteTests {
    // MARK: Instants

    /// A property test: random instants across the accepted window (1900-01-01 to a day from
    /// now), to the microsecond, written in UTC or with a random offset, each logged in a
    /// random zone, come back as the same instant from the API (the POST's answer and a GET),
    /// from the database, and from the CSV (`start_utc` exactly; `date`, `time` and
    /// `utc_offset` agreeing with it). The seed is in every failure message; set
    /// `BB_TEST_SEED` to replay one.
    @Test func anyAcceptedInstantComesBackAsTheSameInstant() async throws {
        let fixture = try await ServiceFixture.make()
        defer { Task { await fixture.close() } }
        let (_, child, token) = try await fixture.family(zone: "UTC")
        let seed = ProcessInfo.processInfo.environment["BB_TEST_SEED"].flatMap(UInt64.init) ?? UInt64.random(in: 0...UInt64.max)
        var random = SeededGenerator(seed: seed)
        let zones = ["UTC", "America/New_York", "Asia/Kathmandu", "Australia/Lord_Howe", "Pacific/Chatham", "America/St_Johns", "Europe/London", "Pacific/Kiritimati", "Africa/Monrovia"]
        let first = ProlepticGregorian.days(year: 1900, month: 1, day: 1) * 86_400_000_000
        let last = try #require(ProlepticGregorian.microseconds(of: Date())) + 86_400_000_000 - 600_000_000
        var instants: [Int64] = [first, first + 1, -1, 951_827_696_500_000]
        for _ in 0..<60 { instants.append(first + Int64(random.next() % UInt64(last - first))) }

        var sent: [(micros: Int64, text: String, zone: String)] = []
        for micros in instants {
            let offsetMinutes = random.next() % 3 == 0 ? 0 : Int64(random.next() % 105) * 15 - 720
            let zone = zones[Int(random.next() % UInt64(zones.count))]
            let text = Self.isoText(micros, offsetMinutes: offsetMinutes, wholeSeconds: micros % 1_000_000 == 0)
            let id = UUID()
            let body = #"{"id":"\#(id)","type":"diaper","start_time":"\#(text)","time_zone":"\#(zone)","data":{"contents":"wet"}}"#
            let created = try await fixture.call(.POST, "/children/\(child.id)/events", token: token, json: body)
            #expect(created.status == 201, "seed \(seed): \(text) in \(zone): \(created.text)")
            let read = try await fixture.call(.GET, "/children/\(child.id)/events/\(id)", token: token)
            for reply in [created, read] {
                #expect((reply.json["start_time"] as? String).flatMap(ISOTimestamp.parseMicroseconds) == micros, "seed \(seed): \(text) came back as \(reply.json["start_time"] ?? "nothing")")
                #expect(reply.json["start_tz"] as? String == zone, "seed \(seed)")
            }
            let stored = try await fixture.admin.fetchValue(Int64.self, "SELECT (extract(epoch FROM start_time) * 1000000)::bigint FROM events WHERE id = \(id)")
            #expect(stored == micros, "seed \(seed): \(text) is stored as \(stored.map { ISOTimestamp.format(microseconds: $0) } ?? "nothing")")
            sent.append((micros, text, zone))
        }

        let csv = try await fixture.call(.GET, "/children/\(child.id)/export.csv?range=all", token: token)
        #expect(csv.status == 200)
        let rows = Array(try StrictCSV.parse(csv.text).dropFirst())
        #expect(try await PythonCSV.parse(csv.text).dropFirst().map { $0 } == rows)
        try #require(rows.count == sent.count, "seed \(seed)")
        for (row, event) in zip(rows, sent.sorted { $0.micros < $1.micros }) {
            #expect(ISOTimestamp.parseMicroseconds(row[11]) == event.micros, "seed \(seed): \(event.text) is \(row[11]) in the CSV")
            #expect(row[9] == event.zone)
            let offset = try #require(Self.offsetSeconds(row[10]), "seed \(seed): offset \(row[10])")
            let local = ISOTimestamp.format(microseconds: event.micros + offset * 1_000_000)
            #expect(row[0] == String(local.prefix(10)) && row[1] == String(local.dropFirst(11).prefix(5)), "seed \(seed): \(event.text) in \(event.zone) is \(row[0]) \(row[1]) \(row[10])")
        }
    }

    /// Before 1900, more than a day ahead, or a day that does not exist: 422 naming the field,
    /// nothing written. A sleep cannot start in 9999 (it could then never end); the next plain
    /// start and end work.
    @Test func instantsOutsideTheWindowAre422() async throws {
        let fixture = try await ServiceFixture.make()
        defer { Task { await fixture.close() } }
        let (_, child, token) = try await fixture.family()
        for start in ["0001-01-01T00:00:00Z", "1582-10-10T00:00:00Z", "1899-12-31T23:59:59.999999Z", "9999-12-31T23:59:59Z", iso(minutesFromNow: 2 * 24 * 60)] {
            let reply = try await fixture.call(.POST, "/children/\(child.id)/events", token: token,
                                               json: #"{"id":"\#(UUID())","type":"diaper","start_time":"\#(start)","time_zone":"UTC","data":{"contents":"wet"}}"#)
            #expect(reply.status == 422 && reply.json["field"] as? String == "start_time", "\(start): \(reply.text)")
        }
        let tooLate = try await fixture.call(.POST, "/children/\(child.id)/events", token: token, json: #"""
            {"id":"\#(UUID())","type":"sleep","start_time":"\#(iso(minutesFromNow: -60))","end_time":"9999-01-01T00:00:00Z","time_zone":"UTC"}
            """#)
        #expect(tooLate.status == 422 && tooLate.json["field"] as? String == "end_time", "\(tooLate.text)")
        let noSuchDay = try await fixture.call(.POST, "/children/\(child.id)/events", token: token,
                                               json: #"{"id":"\#(UUID())","type":"diaper","start_time":"2026-02-30T00:00:00Z","time_zone":"UTC","data":{"contents":"wet"}}"#)
        #expect(noSuchDay.status == 422 && noSuchDay.json["field"] as? String == "start_time", "\(noSuchDay.text)")

        let sleep = try await fixture.call(.POST, "/children/\(child.id)/sleep/start", token: token, json: #"{"at":"9999-01-01T00:00:00Z"}"#)
        #expect(sleep.status == 422 && sleep.json["field"] as? String == "at", "\(sleep.text)")
        #expect(try await fixture.eventCount() == 0)
        #expect(try await fixture.call(.POST, "/children/\(child.id)/sleep/start", token: token, json: "{}").status == 201)
        #expect(try await fixture.call(.POST, "/children/\(child.id)/sleep/end", token: token, json: "{}").status == 200)
        let oldest = try await fixture.call(.POST, "/children/\(child.id)/events", token: token,
                                            json: #"{"id":"\#(UUID())","type":"diaper","start_time":"1900-01-01T00:00:00Z","time_zone":"UTC","data":{"contents":"wet"}}"#)
        #expect(oldest.status == 201 && oldest.json["start_time"] as? String == "1900-01-01T00:00:00.000000Z", "\(oldest.text)")
    }

    // MARK: Zones

    /// `UTC` is stored and returned as `UTC`; an empty or unknown zone is 422 `time_zone`
    /// wherever a zone is sent (a PATCH too, which then changes nothing); a PATCH with a zone
    /// alone moves the event's wall clock, not its instant.
    @Test func zonesStayAsSentAndUnknownOnesAre422() async throws {
        let fixture = try await ServiceFixture.make()
        defer { Task { await fixture.close() } }
        let (_, child, token) = try await fixture.family(zone: "UTC")
        let start = iso(minutesFromNow: -30)
        let id = UUID()
        let created = try await fixture.call(.POST, "/children/\(child.id)/events", token: token,
                                             json: #"{"id":"\#(id)","type":"diaper","start_time":"\#(start)","time_zone":"UTC","data":{"contents":"wet"}}"#)
        #expect(created.status == 201 && created.json["start_tz"] as? String == "UTC", "\(created.text)")
        #expect(try await fixture.admin.fetchValue(String.self, "SELECT start_tz FROM events WHERE id = \(id)") == "UTC")
        let childJSON = try await fixture.call(.GET, "/sync", token: token).json["children"] as? [[String: Any]]
        #expect((childJSON?.first?["settings"] as? [String: Any])?["time_zone"] as? String == "UTC")

        for zone in ["", "Nowhere/Land"] {
            let post = try await fixture.call(.POST, "/children/\(child.id)/events", token: token,
                                              json: #"{"id":"\#(UUID())","type":"diaper","start_time":"\#(start)","time_zone":"\#(zone)","data":{"contents":"wet"}}"#)
            #expect(post.status == 422 && post.json["field"] as? String == "time_zone", "\(zone): \(post.text)")
            let patch = try await fixture.call(.PATCH, "/children/\(child.id)/events/\(id)", token: token,
                                               json: #"{"expected_revision":1,"time_zone":"\#(zone)","notes":"moved"}"#)
            #expect(patch.status == 422 && patch.json["field"] as? String == "time_zone", "\(zone): \(patch.text)")
            let sleep = try await fixture.call(.POST, "/children/\(child.id)/sleep/start", token: token, json: #"{"time_zone":"\#(zone)"}"#)
            #expect(sleep.status == 422 && sleep.json["field"] as? String == "time_zone", "\(zone): \(sleep.text)")
        }
        #expect(try await fixture.eventCount() == 1)
        #expect(try await fixture.admin.fetchValue(String.self, "SELECT start_tz || ' ' || revision || ' ' || coalesce(notes, '-') FROM events WHERE id = \(id)") == "UTC 1 -")

        let moved = try await fixture.call(.PATCH, "/children/\(child.id)/events/\(id)", token: token, json: #"{"expected_revision":1,"time_zone":"Asia/Kathmandu"}"#)
        #expect(moved.status == 200, "\(moved.text)")
        #expect(moved.json["start_tz"] as? String == "Asia/Kathmandu" && moved.json["start_offset_seconds"] as? Int == 20_700)
        #expect((moved.json["start_time"] as? String).flatMap(ISOTimestamp.parseMicroseconds) == ISOTimestamp.parseMicroseconds(start))
    }

    // MARK: Names, limits, bodies

    /// Every 422 names the field as the API spells it, never a Swift property.
    @Test func a422NamesTheFieldAsTheAPISpellsIt() async throws {
        let fixture = try await ServiceFixture.make()
        defer { Task { await fixture.close() } }
        let (_, child, token) = try await fixture.family()
        let start = iso(minutesFromNow: -60)
        func event(_ type: String, data: String, extra: String = "") -> String {
            #"{"id":"\#(UUID())","type":"\#(type)","start_time":"\#(start)","time_zone":"UTC","data":\#(data)\#(extra)}"#
        }
        let cases: [(String, String, String)] = [
            ("/children/\(child.id)/events", event("feeding", data: #"{"kind":"bottle","amount_ml":-5}"#), "data.amount_ml"),
            ("/children/\(child.id)/events", event("feeding", data: #"{"kind":"bottle","prepared_ml":0}"#), "data.prepared_ml"),
            ("/children/\(child.id)/events", event("feeding", data: #"{"kind":"bottle","amount_ml":1e400}"#), "data.amount_ml"),
            ("/children/\(child.id)/events", event("note", data: #"{"category":"\#(String(repeating: "c", count: 101))"}"#), "data.category"),
            ("/children/\(child.id)/events", event("sleep", data: "{}", extra: #","end_time":"\#(iso(minutesFromNow: -120))""#), "end_time"),
            ("/children/\(child.id)/events", event("note", data: #"{"category":"Health"}"#, extra: #","notes":"e\#(String(repeating: "\u{0301}", count: 5000))""#), "notes"),
            ("/children/\(child.id)/bottles", #"{"prepared_ml":-1}"#, "prepared_ml"),
        ]
        for (path, body, field) in cases {
            let reply = try await fixture.call(.POST, path, token: token, json: body)
            #expect(reply.status == 422 && reply.json["field"] as? String == field, "\(field): \(reply.text.prefix(300))")
        }
        let huge = try await fixture.call(.POST, "/children/\(child.id)/events", token: token, json: cases[2].1)
        #expect((huge.json["message"] as? String)?.contains("out of range") == true, "\(huge.text)")
        #expect(try await fixture.eventCount() == 0)

        let bottle = try await fixture.call(.POST, "/children/\(child.id)/bottles", token: token, json: #"{"prepared_ml":120}"#)
        let bottleID = try #require(bottle.json["id"] as? String)
        let finish = try await fixture.call(.POST, "/children/\(child.id)/bottles/\(bottleID)/finish", token: token, json: #"{"remaining_ml":-3}"#)
        #expect(finish.status == 422 && finish.json["field"] as? String == "remaining_ml", "\(finish.text)")
        let category = try await fixture.call(.POST, "/children/\(child.id)/events", token: token,
                                              json: event("note", data: #"{"category":"\#(String(repeating: "c", count: 100))"}"#))
        #expect(category.status == 201, "\(category.text)")
    }

    /// Every key of every body is snake_case: `/sync` included (its children and their settings).
    @Test func everyBodyIsSnakeCase() async throws {
        let fixture = try await ServiceFixture.make()
        defer { Task { await fixture.close() } }
        let (_, child, token) = try await fixture.family()
        _ = try await fixture.call(.POST, "/children/\(child.id)/bottles", token: token, json: #"{"prepared_ml":120}"#)
        _ = try await fixture.call(.POST, "/children/\(child.id)/sleep/start", token: token, json: "{}")
        var keys: Set<String> = []
        for path in ["/sync", "/children/\(child.id)/dashboard", "/children/\(child.id)/timeline"] {
            let reply = try await fixture.call(.GET, path, token: token)
            #expect(reply.status == 200, "\(path): \(reply.text)")
            Self.collectKeys(try JSONSerialization.jsonObject(with: reply.body), into: &keys)
        }
        #expect(keys.isSuperset(of: ["birth_date", "primary_caregiver_id", "day_start_time", "children"]), "\(keys.sorted())")
        #expect(keys.filter { $0.contains(where: \.isUppercase) }.isEmpty, "\(keys.filter { $0.contains(where: \.isUppercase) }.sorted())")
    }

    /// A PATCH with nothing to change (or only what is already stored) is no edit: 200 with
    /// the revision as it was. A stale revision is still 409.
    @Test func anEmptyPatchIsNoEdit() async throws {
        let fixture = try await ServiceFixture.make()
        defer { Task { await fixture.close() } }
        let (_, child, token) = try await fixture.family()
        let id = UUID()
        #expect(try await fixture.call(.POST, "/children/\(child.id)/events", token: token, json: EventRouteTests.diaper(id)).status == 201)
        let path = "/children/\(child.id)/events/\(id)"
        let empty = try await fixture.call(.PATCH, path, token: token, json: #"{"expected_revision":1}"#)
        #expect(empty.status == 200 && empty.json["revision"] as? Int == 1, "\(empty.text)")
        let same = try await fixture.call(.PATCH, path, token: token, json: #"{"expected_revision":1,"data":{"contents":"both"}}"#)
        #expect(same.status == 200 && same.json["revision"] as? Int == 1, "\(same.text)")
        let changed = try await fixture.call(.PATCH, path, token: token, json: #"{"expected_revision":1,"notes":"blowout"}"#)
        #expect(changed.status == 200 && changed.json["revision"] as? Int == 2, "\(changed.text)")
        #expect(try await fixture.call(.PATCH, path, token: token, json: #"{"expected_revision":1}"#).status == 409)
        #expect(try await fixture.admin.fetchValue(Int.self, "SELECT revision FROM events WHERE id = \(id)") == 2)
    }

    /// One id, twenty parallel POSTs, ten to each of two children: one event per child
    /// (one 201 each, the rest 200), never two rows for one child.
    @Test func oneIdSentInParallelToTwoChildrenIsOneEventEach() async throws {
        let fixture = try await ServiceFixture.make()
        defer { Task { await fixture.close() } }
        let (user, first, token) = try await fixture.family()
        var draft = ChildDraft(name: "Twin", birthDate: PostgresDate(year: 2026, month: 9, day: 1))
        draft.settings.timezone = "UTC"
        let twin = try await fixture.store.children.create(draft, as: user.id)
        let id = UUID()
        let body = EventRouteTests.diaper(id)
        let replies = try await withThrowingTaskGroup(of: (UUID, Int).self) { group in
            for index in 0..<20 {
                let child = index % 2 == 0 ? first.id : twin.id
                group.addTask { (child, try await fixture.call(.POST, "/children/\(child)/events", token: token, json: body).status) }
            }
            return try await group.reduce(into: [(UUID, Int)]()) { $0.append($1) }
        }
        for child in [first.id, twin.id] {
            #expect(replies.filter { $0.0 == child }.map(\.1).sorted() == [200, 200, 200, 200, 200, 200, 200, 200, 200, 201])
        }
        #expect(try await fixture.admin.fetchValue(Int.self, "SELECT count(*)::int FROM events WHERE id = \(id)") == 2)
    }

    // MARK: Helpers

    /// `micros` as ISO 8601 text: `Z` when `offsetMinutes` is 0, else the local time with
    /// `±hh:mm`; six fraction digits unless `wholeSeconds`.
    static func isoText(_ micros: Int64, offsetMinutes: Int64, wholeSeconds: Bool) -> String {
        var text = ISOTimestamp.format(microseconds: micros + offsetMinutes * 60_000_000, alwaysFraction: !wholeSeconds)
        guard offsetMinutes != 0 else { return text }
        text.removeLast()
        let magnitude = abs(offsetMinutes)
        let hours = magnitude / 60 < 10 ? "0\(magnitude / 60)" : "\(magnitude / 60)"
        let minutes = magnitude % 60 < 10 ? "0\(magnitude % 60)" : "\(magnitude % 60)"
        return text + (offsetMinutes < 0 ? "-" : "+") + hours + ":" + minutes
    }

    /// `UTC-05:00` → -18000, `UTC-00:44:30` → -2670.
    static func offsetSeconds(_ text: String) -> Int64? {
        guard text.hasPrefix("UTC"), let sign = text.dropFirst(3).first else { return nil }
        let parts = text.dropFirst(4).split(separator: ":").compactMap { Int64($0) }
        guard parts.count == 2 || parts.count == 3 else { return nil }
        let magnitude = parts[0] * 3600 + parts[1] * 60 + (parts.count == 3 ? parts[2] : 0)
        switch sign {
        case "+": return magnitude
        case "-": return -magnitude
        default: return nil
        }
    }

    static func collectKeys(_ value: Any, into keys: inout Set<String>) {
        if let object = value as? [String: Any] {
            for (key, inner) in object {
                keys.insert(key)
                collectKeys(inner, into: &keys)
            }
        } else if let array = value as? [Any] {
            for inner in array { collectKeys(inner, into: &keys) }
        }
    }
}
