import ArgumentParser
import EmbeddedPostgres
import Foundation
import Logging
import Migrator
import Postgres

/// Options every database command shares: which database, which files, output format.
struct TargetOptions: ParsableArguments {
    @Option(help: "Database URL or conninfo. Default: $DATABASE_URL, then PG* variables, then the embedded .bbdata cluster.")
    var url: String?

    @Option(name: .customLong("dir"), help: "Folder of NNNN_name.sql migration files.")
    var directory = "Migrations"

    @Option(name: .customLong("data-dir"), help: "Folder of the embedded cluster (default: $BB_DATA_DIR or .bbdata).")
    var dataDirectory: String?

    @Flag(help: "Print the result as JSON on stdout.")
    var json = false

    @Option(name: .customLong("lock-timeout"), help: "Seconds to wait for another run's migration lock.")
    var lockTimeout = 60

    @Option(name: .customLong("ddl-lock-timeout"), help: "Seconds a migration statement may wait for a table lock before giving up (lock_timeout).")
    var ddlLockTimeout = 10

    @Option(name: .customLong("log-level"), help: "trace, debug (every SQL statement, without values), info (progress, the default), warning, error. Default: $BB_LOG_LEVEL or info.")
    var logLevel: String?

    /// Resolves the database, first match wins. Says on stderr when the embedded one is used.
    /// A `--url` or `DATABASE_URL` that is set but empty (an unset variable in a deploy script)
    /// is a usage error, never a silent fall-back to another database.
    func target() async throws -> (PostgresConfiguration, String) {
        let environment = ProcessInfo.processInfo.environment
        if let url {
            guard !url.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else {
                throw MigratorError.configuration("--url is empty", fix: "pass the database URL, or leave --url out")
            }
            return (PostgresConfiguration(url), "the --url database")
        }
        if let url = environment["DATABASE_URL"] {
            guard !url.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else {
                throw MigratorError.configuration(
                    "DATABASE_URL is set but empty (an unset variable in a deploy script?); bbmigrate will not guess another database",
                    fix: "set DATABASE_URL to the database's URL, or unset it (unset DATABASE_URL) to use PG* variables or the embedded database")
            }
            return (PostgresConfiguration(url), "the DATABASE_URL database")
        }
        if ["PGHOST", "PGDATABASE", "PGSERVICE"].contains(where: { !(environment[$0] ?? "").isEmpty }) {
            return (.environment(), "the database named by the PG* variables")
        }
        let path = dataDirectory ?? environment["BB_DATA_DIR"] ?? ".bbdata"
        let cluster: EmbeddedPostgres
        do {
            cluster = try EmbeddedPostgres.development(at: path)
        } catch {
            throw MigratorError.connection("cannot use the embedded PostgreSQL in \(path): \(error)", fix: "pass --url or set DATABASE_URL to use another server")
        }
        do {
            try await runOnDedicatedThread { _ = try cluster.start() }
            if !(try await cluster.databaseExists("babybasics")) { try await cluster.createDatabase("babybasics") }
            printError("bbmigrate: no --url, DATABASE_URL or PG* variables: using the embedded PostgreSQL in \(cluster.place) (database babybasics)")
            var configuration = PostgresConfiguration(try cluster.connectionString(database: "babybasics"))
            configuration.applicationName = "bbmigrate"
            return (configuration, "the embedded database in \(cluster.directory.path)")
        } catch {
            throw MigratorError.connection("cannot start the embedded PostgreSQL in \(cluster.place): \(error)", fix: "pass --url or set DATABASE_URL to use another server")
        }
    }

    func migrator(allowOutOfOrder: Bool = false) async throws -> Migrator {
        guard (0...604_800).contains(lockTimeout), (1...2_147_483).contains(ddlLockTimeout) else {
            throw MigratorError.configuration(
                "--lock-timeout must be 0 to 604800 seconds and --ddl-lock-timeout 1 to 2147483 seconds (PostgreSQL's lock_timeout limit)",
                fix: "pass a number of seconds in range, for example --lock-timeout 60 --ddl-lock-timeout 10")
        }
        let loggers: (migrator: Logger, connections: Logger)
        do {
            loggers = try CommandLogging.loggers(level: logLevel)
        } catch {
            throw MigratorError.configuration("\(error)", fix: "pass --log-level info (or unset BB_LOG_LEVEL)")
        }
        var (configuration, description) = try await target()
        configuration.logger = loggers.connections
        // Migrations are slow by nature; each file's time is in the output already.
        configuration.slowQueryThreshold = nil
        let options = Migrator.Options(
            directory: URL(fileURLWithPath: directory), lockTimeout: .seconds(lockTimeout), ddlLockTimeout: .seconds(ddlLockTimeout),
            allowOutOfOrder: allowOutOfOrder, logger: loggers.migrator)
        return Migrator(configuration: configuration, options: options, targetDescription: description)
    }

    /// Runs `body`; reports any failure on stderr (and as JSON with --json, with `extra`'s
    /// fields, such as what was applied before the failure) and exits with its code.
    func run(extra: @Sendable () -> [AppliedMigration]? = { nil }, _ body: () async throws -> Void) async throws {
        do {
            try await body()
        } catch {
            let failure = MigratorError.classify(error)
            printError("bbmigrate: error: \(failure.description)")
            if json {
                printJSON(FailureOutput(exitCode: failure.exitCode.rawValue, error: failure.message, fix: failure.fix, applied: extra()))
            }
            throw ExitCode(failure.exitCode.rawValue)
        }
    }
}

/// `--json` output of any failure.
struct FailureOutput: Encodable {
    var ok = false
    var exitCode: Int32
    var error: String
    var fix: String?
    /// For `up`: the files applied before the failure (they stay applied).
    var applied: [AppliedMigration]?
}

/// Logs and progress go to stderr.
func printError(_ message: String) {
    FileHandle.standardError.write(Data((message + "\n").utf8))
}

/// Results go to stdout.
func printJSON<T: Encodable>(_ value: T) {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
    encoder.dateEncodingStrategy = .iso8601
    encoder.keyEncodingStrategy = .convertToSnakeCase
    if let data = try? encoder.encode(value) { print(String(decoding: data, as: UTF8.self)) }
}

func milliseconds(_ duration: Duration) -> Int {
    Int(duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000)
}

/// Collects what `up` applied, for the failure report.
final class AppliedLog: @unchecked Sendable {
    private let lock = NSLock()
    private var entries: [AppliedMigration] = []
    func append(_ entry: AppliedMigration) { lock.withLock { entries.append(entry) } }
    var all: [AppliedMigration] { lock.withLock { entries } }
}
