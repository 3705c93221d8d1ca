import EmbeddedPostgres
import Foundation
import Migrator
import Testing

/// What bbmigrate says, for people and for CI: no silent fall-back, JSON on every outcome, one
/// table of exit codes.
@Suite struct OutputTests {
    @Test func anEmptyDatabaseURLIsAUsageErrorNotTheEmbeddedCluster() async throws {
        let workspace = URL(fileURLWithPath: "/tmp/bbm-empty-\(UUID().uuidString.prefix(6))")
        try FileManager.default.createDirectory(at: workspace, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: workspace) }
        let empty = try await bbmigrate("up", "--dir", repositoryMigrations.path, environment: ["DATABASE_URL": ""], directory: workspace)
        #expect(empty.status == 2)
        #expect(empty.stderr.contains("DATABASE_URL is set but empty"))
        #expect(!FileManager.default.fileExists(atPath: workspace.appendingPathComponent(".bbdata").path))
        #expect(try await bbmigrate("status", "--url", "", "--dir", repositoryMigrations.path, directory: workspace).status == 2)
        #expect(try await bbmigrate("status", "--dir", repositoryMigrations.path, environment: ["DATABASE_URL": "\n"], directory: workspace).status == 2)
        let huge = try await bbmigrate("up", "--ddl-lock-timeout", "99999999999999999", "--dir", repositoryMigrations.path, environment: ["DATABASE_URL": "postgresql://127.0.0.1:1/x"], directory: workspace)
        #expect(huge.status == 2)
        #expect(huge.stderr.contains("--ddl-lock-timeout 1 to 2147483 seconds"))
    }

    @Test func everyOutcomeHasJSONWithRealBooleans() async throws {
        let folder = try MigrationFolder()
        let new = try await bbmigrate("new", "add_growth_table", "--json", "--dir", folder.path)
        let created = try #require(try JSONSerialization.jsonObject(with: Data(new.stdout.utf8)) as? [String: Any])
        #expect(created["ok"] as? Bool == true)
        #expect((created["file"] as? String)?.hasSuffix("0001_add_growth_table.sql") == true)

        let usage = try await bbmigrate("new", "Not Snake", "--json")
        #expect(usage.status == 2)
        let refused = try #require(try JSONSerialization.jsonObject(with: Data(usage.stdout.utf8)) as? [String: Any])
        #expect(refused["ok"] as? Bool == false)
        #expect(refused["exit_code"] as? Int == 2)

        let (database, _) = try await emptyDatabase()
        try folder.write("0002_broken.sql", "SELECT 1/0;")
        try folder.write("0001_add_growth_table.sql", "CREATE TABLE growth (id int);")
        let failed = try await bbmigrate("up", "--json", "--url", database.connectionString, "--dir", folder.path)
        #expect(failed.status == 5)
        let report = try #require(try JSONSerialization.jsonObject(with: Data(failed.stdout.utf8)) as? [String: Any])
        #expect(report["ok"] as? Bool == false)
        #expect((report["applied"] as? [[String: Any]])?.compactMap { $0["name"] as? String } == ["add_growth_table"])
        #expect((report["error"] as? String)?.contains("0002_broken.sql:1:") == true)

        let status = try await bbmigrate("embedded", "status", "--json", "--data-dir", folder.url.appendingPathComponent("none").path)
        #expect(status.status == 3)
        #expect((try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any])?["ok"] as? Bool == false)
    }

    @Test func theREADMEsExitCodeTableIsTheOneInTheCode() throws {
        let readme = try String(contentsOf: repositoryMigrations.deletingLastPathComponent().appendingPathComponent("README.md"), encoding: .utf8)
        for code in MigrationExitCode.allCases {
            #expect(readme.contains("| \(code.rawValue) | \(code.meaning) |"), "README lacks the row for exit code \(code.rawValue)")
        }
    }

    @Test func theDockerfileBuildsWithTheSwiftThatCIUses() throws {
        let dockerfile = try String(contentsOf: repositoryMigrations.deletingLastPathComponent().appendingPathComponent("Dockerfile"), encoding: .utf8)
        #if compiler(>=6.3) && !compiler(>=6.4)
        #expect(dockerfile.contains("FROM swift:6.3-bookworm AS build"))
        #else
        Issue.record("this test knows the Swift 6.3 toolchain; update it and the Dockerfile together")
        #endif
    }

    @Test func ourOwnIndexMigrationBuildsConcurrently() throws {
        let files = try MigrationFile.load(from: repositoryMigrations)
        for file in files {
            for statement in try file.statements() where statement.words.prefix(3) == ["CREATE", "INDEX", "CONCURRENTLY"] || statement.words.prefix(4) == ["CREATE", "UNIQUE", "INDEX", "CONCURRENTLY"] {
                #expect(file.runsOutsideTransaction)
            }
        }
        let dashboard = try #require(files.first { $0.name == "dashboard_indexes" })
        #expect(dashboard.runsOutsideTransaction)
        #expect(try dashboard.statements().contains { $0.concurrentIndexName?.name == "idx_events_child_last_breast" })
    }
}

/// bbmigrate logs through swift-log on stderr: progress at info, each statement (text and
/// parameter count, never values) at debug, nothing of the connections by default.
@Suite struct CLILoggingTests {
    @Test func progressByDefaultAndEveryStatementAtDebugWithoutValues() async throws {
        let folder = try MigrationFolder()
        try folder.write("0001_growth.sql", "CREATE TABLE growth (id int, note text DEFAULT 'Zq7-literal');")
        let (quiet, _) = try await emptyDatabase()
        let plain = try await bbmigrate("up", "--url", quiet.connectionString, "--dir", folder.path)
        #expect(plain.status == 0)
        #expect(plain.stderr.contains("bbmigrate: applying 0001_growth.sql"))
        #expect(!plain.stderr.contains("postgres: "))

        let (loud, _) = try await emptyDatabase()
        let debug = try await bbmigrate("up", "--log-level", "debug", "--url", loud.connectionString, "--dir", folder.path)
        #expect(debug.status == 0)
        let statements = debug.stderr.split(separator: "\n").filter { $0.hasPrefix("postgres: statement ") }
        #expect(statements.count > 3)
        // The history insert binds the file's name and checksum: the log shows placeholders.
        #expect(statements.contains { $0.contains("INSERT INTO bbmigrate.schema_migrations") && $0.contains("$1") })
        #expect(statements.allSatisfy { $0.contains("db.query.parameter_count=") })
        #expect(debug.stderr.contains("postgres: connected"))

        let environment = try await bbmigrate("status", "--url", loud.connectionString, "--dir", folder.path, environment: ["BB_LOG_LEVEL": "debug"])
        #expect(environment.stderr.contains("postgres: statement "))
    }

    /// The embedded cluster's own connections (creating the database) do not print: stdout is
    /// the result alone, and stderr has no connection chatter at the default level.
    @Test func embeddedCommandsPrintTheirResultOnly() async throws {
        let folder = URL(fileURLWithPath: "/tmp/bbm-quiet-\(UUID().uuidString.prefix(6))")
        // The folder goes once the cluster is removed (a server still running recreates it).
        defer {
            Task {
                _ = try? await bbmigrate("embedded", "remove", "--data-dir", folder.appendingPathComponent(".bbdata").path)
                _ = try? FileManager.default.removeItem(at: folder)
            }
        }
        let started = try await bbmigrate("embedded", "start", "--data-dir", folder.appendingPathComponent(".bbdata").path, "--json")
        #expect(started.status == 0, "\(started.stderr)")
        let output = try #require(try JSONSerialization.jsonObject(with: Data(started.stdout.utf8)) as? [String: Any], "stdout: \(started.stdout)")
        #expect((output["url"] as? String)?.hasPrefix("postgresql://") == true)
        #expect(!started.stderr.contains("postgres: connected") && !started.stderr.contains("connection closed"), "\(started.stderr)")
        let stopped = try await bbmigrate("embedded", "stop", "--data-dir", folder.appendingPathComponent(".bbdata").path)
        #expect(stopped.status == 0)
    }

    @Test func anUnknownLogLevelIsAUsageErrorThatNamesTheChoices() async throws {
        let result = try await bbmigrate("up", "--log-level", "loud", "--url", "postgresql://127.0.0.1:1/x", "--dir", repositoryMigrations.path)
        #expect(result.status == 2)
        #expect(result.stderr.contains("unknown log level \"loud\""))
        #expect(result.stderr.contains("trace, debug, info"))
    }
}
