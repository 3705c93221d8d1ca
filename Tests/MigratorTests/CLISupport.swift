import EmbeddedPostgres
import PostgresTestKit
import Foundation
import Postgres
import Testing
#if canImport(Glibc)
import Glibc
#endif

let repositoryMigrations = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("Migrations")

/// How many migration files the repository has.
let repositoryMigrationCount: Int = (try? FileManager.default.contentsOfDirectory(atPath: repositoryMigrations.path).filter { $0.hasSuffix(".sql") }.count) ?? 0

/// The bbmigrate executable built next to the test binary.
let bbmigratePath: String = {
    let besideTests = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("bbmigrate").path
    if FileManager.default.isExecutableFile(atPath: besideTests) { return besideTests }
    return repositoryMigrations.deletingLastPathComponent().appendingPathComponent(".build/debug/bbmigrate").path
}()

typealias CLIResult = ChildProcess.Result

/// A running bbmigrate process (posix_spawn; Foundation's Process loses children on Linux).
struct CLIProcess: Sendable {
    let child: ChildProcess

    init(_ arguments: [String], environment: [String: String] = [:], directory: URL? = nil) throws {
        var env = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("PG") && $0.key != "DATABASE_URL" && $0.key != "BB_DATA_DIR" }
        env.merge(environment) { $1 }
        child = try ChildProcess.spawn([bbmigratePath] + arguments, environment: env, directory: directory?.path)
    }

    var pid: Int32 { child.pid }

    func wait() async throws -> CLIResult { try await child.result() }
}

/// Runs bbmigrate to completion.
func bbmigrate(_ arguments: String..., environment: [String: String] = [:], directory: URL? = nil) async throws -> CLIResult {
    try await CLIProcess(arguments, environment: environment, directory: directory).wait()
}

/// One folder per test process holds every `MigrationFolder`; it is removed when the process
/// exits, so a run leaves nothing in the temporary directory (a crash leaves one folder).
let migrationFoldersRoot: URL = {
    let root = FileManager.default.temporaryDirectory.appendingPathComponent("bbmigrate-tests-\(getpid())")
    try? FileManager.default.removeItem(at: root)
    atexit { try? FileManager.default.removeItem(at: migrationFoldersRoot) }
    return root
}()

/// A temporary folder of migration files.
struct MigrationFolder {
    let url: URL

    init(copyingRepository: Bool = false) throws {
        url = migrationFoldersRoot.appendingPathComponent("\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        if copyingRepository {
            for name in try FileManager.default.contentsOfDirectory(atPath: repositoryMigrations.path) where name.hasSuffix(".sql") {
                try FileManager.default.copyItem(at: repositoryMigrations.appendingPathComponent(name), to: url.appendingPathComponent(name))
            }
        }
    }

    func write(_ name: String, _ sql: String) throws {
        try Data(sql.utf8).write(to: url.appendingPathComponent(name))
    }

    func read(_ name: String) throws -> String { try String(contentsOf: url.appendingPathComponent(name), encoding: .utf8) }

    var path: String { url.path }
}

/// An empty database and its URL.
func emptyDatabase() async throws -> (TestDatabase, PostgresConnection) {
    let database = try await TestPostgres.shared.makeDatabase()
    return (database, try await database.connect())
}

/// Creates a login role `prefix_<random>` with `attributes` and a random password (the
/// embedded server asks every connection for one); returns its name and `database`'s URL as
/// that role. The server quotes the name and password itself (`format` with %I and %L).
func loginRole(_ prefix: String, _ attributes: String, on connection: PostgresConnection, database: TestDatabase) async throws -> (name: String, url: String) {
    let name = "\(prefix)_\(UInt32.random(in: 0...UInt32.max))"
    let password = "pw\(UInt64.random(in: 0...UInt64.max))"
    let statement = try #require(try await connection.fetchValue(String.self, "SELECT format('CREATE ROLE %I LOGIN PASSWORD %L ', \(name)::text, \(password)::text) || \(attributes)::text"))
    try await connection.executeUnsafeRawSQL(statement)
    let url = database.connectionString.replacingOccurrences(of: "postgresql://postgres@", with: "postgresql://\(name):\(password)@")
    return (name, url)
}
