import Foundation
import Migrator
import Postgres
import PostgresTestKit
import Synchronization
import Testing

/// events_bookkeeping's queries are planned once per session, and PL/pgSQL keeps the plan while
/// one transaction writes on: planned while events is empty or small, its "row first" lock read
/// every row of the child (or the table) for each row written, so a bulk write of one child was
/// quadratic (0030). The counts come from the transaction's own statistics
/// (`pg_stat_get_xact_numscans`), not from time.
@Suite struct TriggerPlanTests {
    /// Rows of one bulk insert: enough that PL/pgSQL has long switched to its generic plan.
    static let rows = 300

    /// How one INSERT ... SELECT of `rows` events of a new child read events: sequential scans,
    /// and scans of each index that found something other than a key.
    struct Reads: Equatable, CustomStringConvertible {
        var sequential: Int
        var primaryKey: Int
        /// Scans of the other indexes, by name (only those scanned).
        var otherIndexes: [String: Int]
        var description: String { "\(sequential) sequential, \(primaryKey) of events_pkey, others \(otherIndexes)" }
    }

    func readsOfABulkInsert(_ connection: PostgresConnection) async throws -> Reads {
        let family = try await connection.makeFamily(timezone: "UTC")
        let rows = Self.rows
        return try await connection.transaction { connection in
            try await connection.execute("""
                INSERT INTO events (id, child_id, event_type, start_time, start_tz, start_offset_seconds, data, logged_by)
                SELECT gen_random_uuid(), \(family.childID), 'diaper', timestamptz '2026-11-01 00:00+00' + n * interval '1 minute',
                       'UTC', 0, '{"contents":"wet"}', \(family.userID)
                FROM generate_series(1, \(rows)) AS n
                """)
            let sequential = try #require(try await connection.fetchValue(Int.self, "SELECT pg_stat_get_xact_numscans('events'::regclass)::int"))
            var reads = Reads(sequential: sequential, primaryKey: 0, otherIndexes: [:])
            for row in try await connection.query("""
                SELECT i.indexrelid::regclass::text, pg_stat_get_xact_numscans(i.indexrelid)::int
                  FROM pg_index AS i WHERE i.indrelid = 'events'::regclass
                """) {
                let (name, scans) = try row.decode((String, Int).self)
                if name == "events_pkey" { reads.primaryKey = scans } else if scans > 0 { reads.otherIndexes[name] = scans }
            }
            return reads
        }
    }

    /// A new database (events empty, never analyzed): every row's lock is one probe of the key.
    @Test func aBulkInsertOnANewTableProbesOnlyTheKey() async throws {
        let (connection, _) = try await migratedDatabase()
        let reads = try await readsOfABulkInsert(connection)
        #expect(reads == Reads(sequential: 0, primaryKey: Self.rows, otherIndexes: [:]), "\(reads)")
        await connection.close()
    }

    /// A small table with statistics (a few dozen events, analyzed), where a lookup's cheapest
    /// plan is a sequential scan: the bulk insert still reads no more than the key.
    @Test func aBulkInsertOnASmallAnalyzedTableProbesOnlyTheKey() async throws {
        let (setup, database) = try await migratedDatabase()
        let family = try await setup.makeFamily(timezone: "UTC")
        for hour in 0..<40 {
            try await setup.logEvent(family, type: "diaper", data: #"{"contents":"wet"}"#, start: "2026-10-01 \(String(format: "%02d", hour % 24)):\(hour < 24 ? "00" : "30"):00+00", zone: "UTC")
        }
        try await setup.execute("ANALYZE events")
        #expect(try await setup.fetchValue(Int.self, "SELECT relpages FROM pg_class WHERE oid = 'events'::regclass") ?? 0 < 8)
        await setup.close()
        let connection = try await database.connect() // a session that plans on the small table
        let reads = try await readsOfABulkInsert(connection)
        #expect(reads == Reads(sequential: 0, primaryKey: Self.rows, otherIndexes: [:]), "\(reads)")
        await connection.close()
    }

    /// The schema before 0030, the same bulk insert on a new table: its lock read the child's
    /// rows through idx_events_updated (the check above can fail).
    @Test func theSchemaBefore0030ReadTheChildsRowsForEachRow() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        let migrator = Migrator(configuration: database.configuration, options: .init(directory: migrationsDirectory))
        _ = try await migrator.up(to: 29)
        let connection = try await database.connect()
        let reads = try await readsOfABulkInsert(connection)
        #expect(reads.primaryKey < Self.rows, "\(reads)")
        #expect(reads.sequential + reads.otherIndexes.values.reduce(0, +) > Self.rows / 2, "\(reads)")
        await connection.close()
    }

    /// Row first, counter second (0022): an insert of a key that another transaction holds waits
    /// for that transaction before it takes the child's counter, so the holder can still stamp
    /// its change; the insert then fails on the key. The probe of the counter is shown to see a
    /// holder first: an insert in an open transaction holds it.
    @Test(.timeLimit(.minutes(5))) func anInsertOfAHeldKeyWaitsBeforeItTakesTheCounter() async throws {
        let (admin, database) = try await migratedDatabase()
        let family = try await admin.makeFamily(timezone: "UTC")
        let event = try await admin.logEvent(family, type: "diaper", data: #"{"contents":"wet"}"#, zone: "UTC")
        let counterIsFree: SQL = "SELECT 1 FROM sync_counters WHERE child_id = \(family.childID) FOR NO KEY UPDATE NOWAIT"

        // The probe sees a holder: an open transaction that inserted an event of the child.
        let writer = try await database.connect()
        try await writer.execute("BEGIN")
        try await writer.logEvent(family, type: "diaper", data: #"{"contents":"dirty"}"#, zone: "UTC")
        let held = await #expect(throws: PostgresError.self) { try await admin.execute(counterIsFree) }
        #expect(held?.kind == .lockNotAvailable, "\(String(describing: held))")
        try await writer.execute("ROLLBACK")

        // A transaction holds the event's row (no stamp yet).
        let holder = try await database.connect()
        try await holder.execute("BEGIN")
        try await holder.execute("SELECT 1 FROM events WHERE id = \(event) FOR UPDATE")
        // An insert of the same key waits for it...
        let inserter = try await database.connect()
        let inserterPID = await inserter.backendPID
        let done = Mutex(false)
        let insert = Task {
            defer { done.withLock { $0 = true } }
            try await inserter.logEvent(family, type: "diaper", data: #"{"contents":"wet"}"#, zone: "UTC", id: event)
        }
        // (Without the lock it would not wait: the key's row is only locked, so the insert
        // fails on it at once.)
        while try await admin.fetchValue(Bool.self, "SELECT cardinality(pg_blocking_pids(\(inserterPID))) > 0") != true {
            if done.withLock({ $0 }) { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(!done.withLock { $0 }, "the insert of a held key did not wait for its holder")
        // ...holding no counter: the probe takes it and lets it go, and the holder stamps its change.
        try await admin.transaction { try await $0.execute(counterIsFree) }
        try await holder.execute("UPDATE events SET data = '{\"contents\":\"dirty\"}' WHERE id = \(event)")
        try await holder.execute("COMMIT")
        // The insert then fails on the key, and wrote nothing.
        let duplicate = await #expect(throws: PostgresError.self) { try await insert.value }
        #expect(duplicate?.sqlState == "23505" && duplicate?.constraint == "events_pkey", "\(String(describing: duplicate))")
        #expect(try await admin.fetchValue(Int.self, "SELECT count(*)::int FROM events WHERE child_id = \(family.childID)") == 1)
        #expect(try await admin.fetchValue(String.self, "SELECT data->>'contents' FROM events WHERE id = \(event)") == "dirty")
        for connection in [writer, holder, inserter, admin] { await connection.close() }
    }
}
