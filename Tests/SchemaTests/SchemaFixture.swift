import EmbeddedPostgres
import PostgresTestKit
import Foundation
import Migrator
import Postgres
import Testing

/// The repository's `Migrations/` folder.
let migrationsDirectory = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("Migrations")

/// The migration files in version order.
func migrationFiles() throws -> [URL] {
    try FileManager.default.contentsOfDirectory(at: migrationsDirectory, includingPropertiesForKeys: nil)
        .filter { $0.pathExtension == "sql" }
        .sorted { $0.lastPathComponent < $1.lastPathComponent }
}

/// A fresh database with every migration applied by the migration engine, cloned from a
/// template built once per test run.
func migratedDatabase() async throws -> (PostgresConnection, TestDatabase) {
    let database = try await TestPostgres.shared.makeDatabase(template: "schema_tests_template") { connection in
        let name = try #require(try await connection.fetchValue(String.self, "SELECT current_database()"))
        let cluster = try await TestPostgres.shared.cluster()
        let migrator = Migrator(
            configuration: PostgresConfiguration(try cluster.connectionString(database: name)),
            options: .init(directory: migrationsDirectory))
        try await migrator.up()
    }
    return (try await database.connect(), database)
}

/// A family: a user and a child whose primary caregiver they are.
struct Family {
    let userID: UUID
    let childID: UUID
}

extension PostgresConnection {
    @discardableResult
    func makeUser(_ email: String = "parent-\(UUID().uuidString.prefix(8))@example.com") async throws -> UUID {
        let id = UUID()
        try await execute("INSERT INTO users (id, email, display_name) VALUES (\(id), \(email), 'Parent')")
        return id
    }

    func makeFamily(timezone: String = "America/New_York") async throws -> Family {
        let user = try await makeUser()
        let child = UUID()
        try await transaction { connection in
            try await connection.execute("""
                INSERT INTO children (id, name, birth_date, primary_caregiver_id, timezone)
                VALUES (\(child), 'Zoë', '2026-03-08', \(user), \(timezone))
                """)
            try await connection.execute("INSERT INTO caregivers (child_id, user_id, role) VALUES (\(child), \(user), 'primary')")
        }
        return Family(userID: user, childID: child)
    }

    /// Inserts an event naming only the contract columns; returns its id.
    @discardableResult
    func logEvent(
        _ family: Family, type: String, data: String = "{}", start: String = "2026-11-20 10:00:00+00",
        end: String? = nil, zone: String = "America/New_York", id: UUID = UUID()
    ) async throws -> UUID {
        let endZone: String? = end == nil ? nil : zone
        // The zone's offset at each instant, as a client computes it (0 for a zone that does
        // not exist: the database refuses the zone first).
        func offset(_ instant: String?) -> Int32? {
            guard let instant else { return nil }
            let formatter = DateFormatter()
            formatter.locale = Locale(identifier: "en_US_POSIX")
            formatter.dateFormat = "yyyy-MM-dd HH:mm:ssx"
            guard let date = formatter.date(from: instant), let tz = TimeZone(identifier: zone) else { return 0 }
            return Int32(tz.secondsFromGMT(for: date))
        }
        try await execute("""
            INSERT INTO events (id, child_id, logged_by, event_type, start_time, start_tz, start_offset_seconds,
                                end_time, end_tz, end_offset_seconds, data)
            VALUES (\(id), \(family.childID), \(family.userID), \(type), \(start)::timestamptz, \(zone), \(offset(start)),
                    \(end)::timestamptz, \(endZone), \(offset(end)), \(data)::jsonb)
            """)
        return id
    }
}

/// Expects the statement to be refused with `sqlState` naming `constraint`.
func expectRefusal(
    _ sqlState: String, constraint: String?, sourceLocation: SourceLocation = #_sourceLocation,
    isolation: isolated (any Actor)? = #isolation, _ body: () async throws -> Void
) async {
    do {
        try await body()
        Issue.record("expected SQLSTATE \(sqlState) (\(constraint ?? "-")), but the statement was accepted", sourceLocation: sourceLocation)
    } catch let error as PostgresError {
        #expect(error.sqlState == sqlState, "got \(error)", sourceLocation: sourceLocation)
        if let constraint {
            #expect(error.constraint == constraint, "got \(error)", sourceLocation: sourceLocation)
        }
    } catch {
        Issue.record("unexpected \(error)", sourceLocation: sourceLocation)
    }
}
