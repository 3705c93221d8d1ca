import Foundation
import Postgres
import Testing

/// With 100k events, the planner picks the index each query was written for.
@Suite struct IndexUsageTests {
    /// 2,000 users, 1,000 children (each with a primary and a second caregiver) and 100 events
    /// per child. Triggers are off during the load (session_replication_role), so the sync
    /// stamps and counters are filled by hand (1…100 per child, as the counter would); indexes
    /// still apply.
    func loadVolume(_ connection: PostgresConnection) async throws {
        try await connection.executeUnsafeRawSQL("""
            SET session_replication_role = replica;
            INSERT INTO users (id, email, display_name)
                SELECT gen_random_uuid(), 'user' || i || '@example.com', 'User ' || i FROM generate_series(1, 2000) AS i;
            CREATE TEMP TABLE numbered AS SELECT id, row_number() OVER (ORDER BY email) AS n FROM users;
            INSERT INTO children (id, name, birth_date, primary_caregiver_id, timezone)
                SELECT gen_random_uuid(), 'Child ' || n, date '2026-01-01', id, 'America/New_York' FROM numbered WHERE n <= 1000;
            INSERT INTO caregivers (child_id, user_id, role) SELECT id, primary_caregiver_id, 'primary' FROM children;
            INSERT INTO caregivers (child_id, user_id, role)
                SELECT c.id, u.id, 'caregiver' FROM children c JOIN numbered p ON p.id = c.primary_caregiver_id JOIN numbered u ON u.n = p.n + 1000;
            INSERT INTO events (child_id, logged_by, event_type, start_time, start_tz, start_offset_seconds,
                                end_time, end_tz, end_offset_seconds, data, change_seq)
                SELECT c.id, c.primary_caregiver_id,
                       (ARRAY['feeding', 'diaper', 'sleep', 'note'])[g % 4 + 1],
                       timestamptz '2026-08-01 00:00+00' + g * interval '97 minutes', 'America/New_York', -14400,
                       CASE WHEN g % 4 = 2 THEN timestamptz '2026-08-01 00:00+00' + g * interval '97 minutes' + interval '50 minutes' END,
                       CASE WHEN g % 4 = 2 THEN 'America/New_York' END,
                       CASE WHEN g % 4 = 2 THEN -14400 END,
                       (ARRAY['{"kind":"bottle","amount_ml":120}', '{"contents":"wet"}', '{}', '{"category":"health"}'])[g % 4 + 1]::jsonb,
                       g
                FROM children c, generate_series(1, 100) AS g;
            INSERT INTO sync_counters (child_id, last_stamp) SELECT id, 100 FROM children;
            SET session_replication_role = DEFAULT;
            ANALYZE;
            """)
    }

    func plan(_ connection: PostgresConnection, _ sql: SQL) async throws -> String {
        try await connection.query("EXPLAIN \(sql)").decodeColumn(String.self).joined(separator: "\n")
    }

    @Test func eachQueryUsesItsIndex() async throws {
        let (connection, _) = try await migratedDatabase()
        try await loadVolume(connection)
        #expect(try await connection.fetchValue(Int.self, "SELECT count(*) FROM events") == 100_000)
        let child = try #require(try await connection.fetchValue(UUID.self, "SELECT id FROM children ORDER BY name LIMIT 1"))
        let user = try #require(try await connection.fetchValue(UUID.self, "SELECT user_id FROM caregivers WHERE child_id = \(child) AND role = 'caregiver'"))
        let from = Date(timeIntervalSince1970: 1_754_265_600) // 2025-08-04
        let to = from.addingTimeInterval(86_400)

        let timeline = try await plan(connection, "SELECT * FROM timeline_events(\(child), \(from), \(to))")
        #expect(timeline.contains("idx_events_child_time"), "\(timeline)")

        let active = try await plan(connection, """
            SELECT id, event_type, start_time FROM events
            WHERE child_id = \(child) AND event_type IN ('sleep', 'feeding') AND end_time IS NULL AND deleted_at IS NULL
            """)
        #expect(active.contains("idx_events_child_active"), "\(active)")

        // An incremental sync after the child's 90th change: a range scan of the child's stamps.
        let sync = try await plan(connection, "SELECT * FROM sync_events_since(\(child), \(Int64(90)), \(Int32(100)))")
        #expect(sync.contains("events_child_change_seq_key"), "\(sync)")
        // (The Swift feed's own statement is planned in SyncPlanTests, with a long history.)

        let children = try await plan(connection, """
            SELECT c.* FROM caregivers cg JOIN children c ON c.id = cg.child_id WHERE cg.user_id = \(user)
            """)
        #expect(children.contains("idx_caregivers_user_child"), "\(children)")

        // Event by id without its child (get, edit, delete): one probe of events_pkey
        // (id, child_id), whose first column is the id (0022).
        let event = try #require(try await connection.fetchValue(UUID.self, "SELECT id FROM events WHERE child_id = \(child) LIMIT 1"))
        let byID = try await plan(connection, "SELECT * FROM events WHERE id = \(event)")
        #expect(byID.contains("Index Scan using events_pkey"), "\(byID)")

        // PRD 8 "sync queries": what changed recently for this child.
        let recent = try await plan(connection, "SELECT id, updated_at FROM events WHERE child_id = \(child) ORDER BY updated_at DESC LIMIT 20")
        #expect(recent.contains("idx_events_updated"), "\(recent)")
    }

    /// PRD §8 "Required Indexes", all four, exactly as the spec defines them (baby_id is our
    /// child_id, baby_caregiver our caregivers): the schema keeps every one.
    @Test func theSpecsFourIndexesAreThere() async throws {
        let (connection, _) = try await migratedDatabase()
        let definitions = try await connection.query("""
            SELECT indexname, indexdef FROM pg_indexes
            WHERE schemaname = 'public' AND indexname IN ('idx_events_child_time', 'idx_events_child_active', 'idx_events_updated', 'idx_caregivers_user_child')
            ORDER BY indexname
            """).map { try ($0.decode(String.self, at: 0), $0.decode(String.self, at: 1)) }
        let byName = Dictionary(uniqueKeysWithValues: definitions)
        #expect(byName["idx_events_child_time"] == "CREATE INDEX idx_events_child_time ON public.events USING btree (child_id, start_time DESC)")
        #expect(byName["idx_events_child_active"] == "CREATE INDEX idx_events_child_active ON public.events USING btree (child_id, event_type, end_time) WHERE ((end_time IS NULL) AND (deleted_at IS NULL))")
        #expect(byName["idx_events_updated"] == "CREATE INDEX idx_events_updated ON public.events USING btree (child_id, updated_at DESC)")
        #expect(byName["idx_caregivers_user_child"] == "CREATE INDEX idx_caregivers_user_child ON public.caregivers USING btree (user_id, child_id)")
        #expect(try await connection.fetchValue(Bool.self, """
            SELECT bool_and(indisvalid) FROM pg_index WHERE indexrelid::regclass::text IN ('idx_events_child_time', 'idx_events_child_active', 'idx_events_updated', 'idx_caregivers_user_child')
            """) == true)
    }
}
