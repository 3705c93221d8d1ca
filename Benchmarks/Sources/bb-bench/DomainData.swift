import EmbeddedPostgres
import Foundation
import Migrator
import Postgres
import PostgresTestKit

/// Realistic data: N children × D days of 15-20 events a day (a night's sleep across
/// midnight, naps, breast and bottle feedings, diapers, notes), loaded by binary COPY.
struct DomainData {
    struct Family: Sendable {
        var child: UUID
        var user: UUID
        var zone: String
    }

    static let zones = ["America/New_York", "Europe/London", "Australia/Adelaide", "America/Los_Angeles", "Asia/Tokyo"]
    static let columns = ["id", "child_id", "logged_by", "updated_by", "event_type", "start_time", "start_tz", "start_offset_seconds",
                          "end_time", "end_tz", "end_offset_seconds", "data", "notes", "change_seq"]

    /// Creates `count` users and children (one family each); returns them.
    /// A finished prepared bottle whose first sip came 5 minutes after it was made (the
    /// schema checks that the sip lies within the bottle's life).
    static func bottle(firstSip: Date) -> JSONB {
        JSONB(#"{"kind":"bottle","amount_prepared_ml":150,"amount_remaining_ml":20,"feeding_started_at":"\#(firstSip.formatted(.iso8601))"}"#)
    }

    static func families(_ connection: PostgresConnection, count: Int, tag: String) async throws -> [Family] {
        var families: [Family] = []
        for index in 0..<count {
            families.append(Family(child: UUID(), user: UUID(), zone: zones[index % zones.count]))
        }
        let created = families
        try await connection.transaction { connection in
            for family in created {
                try await connection.execute("INSERT INTO users (id, email, display_name) VALUES (\(family.user), \("\(tag)-\(family.user.uuidString.prefix(8))@example.com"), 'Parent')")
                try await connection.execute("""
                    INSERT INTO children (id, name, birth_date, primary_caregiver_id, timezone) VALUES (\(family.child), 'Baby', '2024-01-01', \(family.user), \(family.zone))
                    """)
                try await connection.execute("INSERT INTO caregivers (child_id, user_id, role) VALUES (\(family.child), \(family.user), 'primary')")
            }
        }
        return families
    }

    /// Loads `days` days of events per family, ending at `end`; returns the row count.
    /// Triggers are off during the load (session_replication_role = replica), so the sync
    /// stamps are written here (and the children's counters after); constraints and indexes
    /// still apply.
    static func load(_ connection: PostgresConnection, families: [Family], days: Int, end: Date, eventsPerDay: Int? = nil) async throws -> Int {
        try await connection.executeUnsafeRawSQL("SET session_replication_role = replica")
        defer { Task { try? await connection.executeUnsafeRawSQL("SET session_replication_role = DEFAULT") } }
        let documents = [
            "left": JSONB(#"{"kind":"breast","started_side":"left","both_sides":false}"#),
            "right": JSONB(#"{"kind":"breast","started_side":"right","both_sides":true}"#),
            "wet": JSONB(#"{"contents":"wet"}"#), "dirty": JSONB(#"{"contents":"dirty"}"#), "both": JSONB(#"{"contents":"both"}"#),
            "sleep": JSONB("{}"), "note": JSONB(#"{"category":"health"}"#),
        ]
        let count = try await connection.copyIn(table: "events", columns: columns) { writer in
            var sequence: Int64 = 0
            var random = SplitMix(seed: 42)
            for family in families {
                let zone = TimeZone(identifier: family.zone) ?? .gmt
                for day in 0..<days {
                    let midnight = end.addingTimeInterval(Double(day - days) * 86_400)
                    var events: [Generated] = []
                    if let perDay = eventsPerDay {
                        for index in 0..<perDay { events.append(Generated(type: "diaper", start: Double(index) * 86_400 / Double(perDay), doc: "wet")) }
                    } else {
                        let night = 19.5 * 3600 + random.double(in: -1800...1800)
                        events.append(Generated(type: "sleep", start: night, end: night + 10.5 * 3600 + random.double(in: -1800...1800), doc: "sleep"))
                        for nap in [9.5, 13.0, 16.5] {
                            let start = nap * 3600 + random.double(in: -900...900)
                            events.append(Generated(type: "sleep", start: start, end: start + random.double(in: 1800...5400), doc: "sleep"))
                        }
                        for feed in 0..<8 {
                            let start = (6.0 + Double(feed) * 2) * 3600 + random.double(in: -600...600)
                            let kind = feed % 4 == 3 ? "bottle" : (feed % 2 == 0 ? "left" : "right")
                            events.append(Generated(type: "feeding", start: start, end: start + random.double(in: 600...1500), doc: kind))
                        }
                        let diapers = 5 + random.int(3)
                        for diaper in 0..<diapers {
                            let contents = ["wet", "dirty", "both"][random.int(3)]
                            events.append(Generated(type: "diaper", start: (7.0 + Double(diaper) * 2.2) * 3600 + random.double(in: 0...900), doc: contents))
                        }
                        if random.int(5) == 0 { events.append(Generated(type: "note", start: 12 * 3600, doc: "note", note: "Vitamin D, 1 drop")) }
                    }
                    for event in events {
                        let start = midnight.addingTimeInterval(event.start)
                        let offset = Int32(zone.secondsFromGMT(for: start))
                        let endDate = event.end.map { midnight.addingTimeInterval($0) }
                        let endOffset = endDate.map { Int32(zone.secondsFromGMT(for: $0)) }
                        sequence += 1
                        try writer.append([
                            UUID(), family.child, family.user, family.user, event.type, start, family.zone, offset,
                            endDate, endDate == nil ? nil : family.zone, endOffset,
                            event.doc == "bottle" ? bottle(firstSip: start.addingTimeInterval(300)) : documents[event.doc], event.note,
                            sequence,
                        ])
                    }
                }
            }
        }
        // The next stamps are drawn above the ones written by hand (each child's counter, 0022).
        // Only the children just loaded: the whole table grouped after every family made a
        // 10M-event growth run quadratic.
        let children = families.map(\.child)
        try await connection.execute("""
            INSERT INTO sync_counters AS k (child_id, last_stamp)
            SELECT e.child_id, max(e.change_seq) FROM events AS e WHERE e.child_id = ANY(\(children)) GROUP BY e.child_id
            ON CONFLICT (child_id) DO UPDATE SET last_stamp = greatest(k.last_stamp, excluded.last_stamp)
            """)
        try await connection.executeUnsafeRawSQL("SET session_replication_role = DEFAULT")
        return count
    }
}

/// One generated event, in seconds after its day's midnight.
struct Generated {
    var type: String
    var start: Double
    var end: Double? = nil
    var doc: String
    var note: String? = nil
}

/// A small deterministic random generator, so every run loads the same shape of data.
typealias SplitMix = SeededGenerator

extension SeededGenerator {
    mutating func double(in range: ClosedRange<Double>) -> Double {
        range.lowerBound + (range.upperBound - range.lowerBound) * Double(next() >> 11) / Double(1 << 53)
    }
    mutating func int(_ upperBound: Int) -> Int { Int(next() % UInt64(upperBound)) }
}

extension Runner {
    /// A new database `name` on `cluster`, migrated, with `count` families of 30 days each
    /// ending now, analyzed: the HTTP and scale-out groups' data.
    func familyDatabase(_ cluster: EmbeddedPostgres, name: String, count: Int = 20) async throws
        -> (url: String, admin: PostgresConnection, families: [DomainData.Family], end: Date) {
        try await cluster.createDatabase(name)
        let url = try cluster.connectionString(database: name)
        try await Migrator(configuration: PostgresConfiguration(url), options: .init(directory: repository.appendingPathComponent("Migrations"))).up()
        let admin = try await PostgresConnection.connect(url)
        let end = Date()
        let families = try await DomainData.families(admin, count: count, tag: name)
        _ = try await DomainData.load(admin, families: families, days: 30, end: end)
        try await admin.executeUnsafeRawSQL("VACUUM (ANALYZE) events")
        return (url, admin, families, end)
    }

    /// Runs `call` twice (the first warms the statement cache: the second is the steady
    /// state) and returns what the server logged during the second run (auto_explain's plans).
    func loggedDuringSecondRun(_ cluster: EmbeddedPostgres, _ call: () async throws -> Void) async throws -> String {
        try await call()
        let before = (try? FileManager.default.attributesOfItem(atPath: cluster.logFile.path)[.size] as? Int) ?? 0
        try await call()
        try await Task.sleep(for: .milliseconds(200))
        let handle = try FileHandle(forReadingFrom: cluster.logFile)
        defer { try? handle.close() }
        try handle.seek(toOffset: UInt64(before))
        return String(decoding: try handle.readToEnd() ?? Data(), as: UTF8.self)
    }
}
