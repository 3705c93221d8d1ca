import EmbeddedPostgres
import Foundation
import Postgres
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Which database bbmigrate uses: --url, then DATABASE_URL, then libpq's PG* variables (with
/// service files and .pgpass), then the embedded cluster. Environment variables are
/// process-wide, so each case runs in a child process.
@Suite struct ConnectionResolutionTests {
    @Test func pgVariablesServiceFileAndPgpassAreLibpqs() async throws {
        let (database, _) = try await emptyDatabase()
        let port = try database.cluster.port()
        let password = try String(contentsOf: database.cluster.directory.appendingPathComponent("superuser.password"), encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let folder = try MigrationFolder()
        let serviceFile = folder.url.appendingPathComponent("pg_service.conf")
        try "[bbtest]\nhost=127.0.0.1\nport=\(port)\nuser=postgres\ndbname=\(database.name)\n".write(to: serviceFile, atomically: true, encoding: .utf8)
        let passFile = folder.url.appendingPathComponent("pgpass")
        try "127.0.0.1:\(port):*:postgres:\(password)\n".write(to: passFile, atomically: true, encoding: .utf8)
        chmod(passFile.path, 0o600)
        let environment = ["PGSERVICEFILE": serviceFile.path, "PGPASSFILE": passFile.path, "PGSERVICE": "bbtest"]
        let up = try await bbmigrate("up", "--dir", repositoryMigrations.path, environment: environment)
        #expect(up.status == 0, "\(up.stderr)")
        #expect(!up.stderr.contains("embedded"))

        // Plain PG* variables, no service file.
        let plain = ["PGHOST": "127.0.0.1", "PGPORT": String(port), "PGUSER": "postgres", "PGDATABASE": database.name, "PGPASSFILE": passFile.path]
        let status = try await bbmigrate("status", "--exit-code", "--dir", repositoryMigrations.path, environment: plain)
        #expect(status.status == 0, "\(status.stderr)")

        // DATABASE_URL wins over PG* variables; --url wins over DATABASE_URL.
        let bogus = ["DATABASE_URL": "postgresql://postgres@127.0.0.1:1/nowhere?connect_timeout=2"]
        #expect(try await bbmigrate("status", "--dir", repositoryMigrations.path, environment: plain.merging(bogus) { $1 }).status == 3)
        let overridden = try await bbmigrate("status", "--url", database.connectionString, "--dir", repositoryMigrations.path, environment: bogus)
        #expect(overridden.status == 0, "\(overridden.stderr)")
    }
}
