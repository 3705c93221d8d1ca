import Migrator
import Postgres
import PostgresTestKit
import Testing

/// PostgreSQL prepares a table's CHECKs again for every INSERT and UPDATE statement, and
/// inlines each SQL-language function they call by parsing its body each time. So no CHECK of
/// events (written on every tap) calls one: its rule functions are PL/pgSQL, compiled once per
/// session (0029). children keeps one: its rows change rarely, and its helper is inlined once
/// per session into the PL/pgSQL feeding validator's cached plan, where SQL is the cheaper form.
@Suite struct CheckPreparationTests {
    @Test func noCheckOfEventsCallsASQLFunction() async throws {
        let (connection, _) = try await migratedDatabase()
        #expect(try await sqlFunctionsCalledByChecks(connection, table: "events") == [])
        await connection.close()
    }

    /// The same query on the schema before 0029 names the five calls it replaced.
    @Test func theSchemaBefore0029CalledFive() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        let migrator = Migrator(configuration: database.configuration, options: .init(directory: migrationsDirectory))
        _ = try await migrator.up(to: 28)
        let connection = try await database.connect()
        #expect(try await sqlFunctionsCalledByChecks(connection, table: "events") == [
            "events_diaper_data_valid calls event_diaper_data_is_valid(jsonb)",
            "events_end_offset_matches_zone calls utc_offset_seconds(text,timestamp with time zone)",
            "events_note_data_valid calls event_note_data_is_valid(jsonb)",
            "events_sleep_data_valid calls event_sleep_data_is_valid(jsonb)",
            "events_start_offset_matches_zone calls utc_offset_seconds(text,timestamp with time zone)",
        ])
        await connection.close()
    }

    private func sqlFunctionsCalledByChecks(_ connection: PostgresConnection, table: String) async throws -> [String] {
        try await connection.query("""
            SELECT c.conname || ' calls ' || p.oid::regprocedure::text
              FROM pg_constraint AS c
              JOIN pg_depend AS d ON d.classid = 'pg_constraint'::regclass AND d.objid = c.oid
                                 AND d.refclassid = 'pg_proc'::regclass
              JOIN pg_proc AS p ON p.oid = d.refobjid
              JOIN pg_language AS l ON l.oid = p.prolang
             WHERE c.contype = 'c' AND c.conrelid = \(table)::regclass AND l.lanname = 'sql'
             ORDER BY 1
            """).decodeColumn(String.self)
    }
}
