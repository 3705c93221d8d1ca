import ArgumentParser
import EmbeddedPostgres
import Foundation
import Migrator

/// `bbmigrate embedded start|status|url|stop|remove`: the development cluster in `.bbdata/`
/// (relocated, with `.bbdata` a link to it, when its server cannot use that folder).
struct EmbeddedCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "embedded",
        abstract: "Manage the local development PostgreSQL kept in .bbdata/.",
        discussion: """
            The cluster is used when no --url, DATABASE_URL or PG* variable names a database. Run as root in a folder \
            the 'postgres' account cannot enter (a clone under /root), or in a path too long for a Unix socket, it lives \
            in /var/tmp/babybasics*/ and .bbdata links to it; status says where, remove deletes both.
            """,
        subcommands: [Start.self, Status.self, URLCommand.self, Stop.self, Remove.self]
    )

    struct Location: ParsableArguments {
        @Option(name: .customLong("data-dir"), help: "The cluster's folder (default: $BB_DATA_DIR or .bbdata).")
        var dataDirectory: String?
        @Flag(help: "Print the result as JSON on stdout.")
        var json = false

        /// The cluster (relocated when the server account cannot enter its folder). Only
        /// `start` (`creating`) makes the link to a relocated folder; the other commands find
        /// nothing where nothing was made.
        func cluster(creating: Bool = false) throws -> EmbeddedPostgres {
            let path = dataDirectory ?? ProcessInfo.processInfo.environment["BB_DATA_DIR"] ?? ".bbdata"
            let isLink = (try? FileManager.default.destinationOfSymbolicLink(atPath: path)) != nil
            if !creating && !isLink && !FileManager.default.fileExists(atPath: path) {
                return EmbeddedPostgres(directory: URL(fileURLWithPath: path))
            }
            do { return try EmbeddedPostgres.development(at: path) } catch { throw fail(error) }
        }
    }

    /// `--json` output of the embedded commands.
    struct Output: Encodable {
        var ok = true
        var folder: String
        /// The link to `folder` when the cluster was relocated (run as root in a folder the
        /// `postgres` account cannot enter).
        var linkedFrom: String?
        var status: String
        var url: String?

        init(ok: Bool = true, _ cluster: EmbeddedPostgres, status: String, url: String? = nil) {
            self.ok = ok
            folder = cluster.directory.path
            linkedFrom = cluster.linkedFrom?.path
            self.status = status
            self.url = url
        }
    }

    struct Start: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create the cluster if needed, start it, and create the babybasics database.")
        @OptionGroup var location: Location
        @Option(help: "Database to create if missing.") var database = "babybasics"

        func run() async throws {
            let cluster = try location.cluster(creating: true)
            do {
                let status = try await runOnDedicatedThread { try cluster.start() }
                if !(try await cluster.databaseExists(database)) {
                    try await cluster.createDatabase(database)
                }
                printError("embedded PostgreSQL in \(cluster.place): \(status)")
                let url = try cluster.connectionString(database: database)
                if location.json { printJSON(Output(cluster, status: "\(status)", url: url)) } else { print(url) }
            } catch {
                throw location.fail(error)
            }
        }
    }

    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Say whether the cluster exists and runs (exit 0 when running, 3 otherwise).")
        @OptionGroup var location: Location

        func run() async throws {
            let cluster = try location.cluster()
            let status: EmbeddedPostgres.Status
            do { status = try cluster.status() } catch { throw location.fail(error) }
            var running = false
            if case .running = status { running = true }
            if location.json {
                printJSON(Output(ok: running, cluster, status: "\(status)", url: running ? try? cluster.connectionString(database: "babybasics") : nil))
            } else {
                print("\(cluster.place): \(status)")
            }
            if !running { throw ExitCode(MigrationExitCode.cannotConnect.rawValue) }
        }
    }

    struct URLCommand: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "url", abstract: "Print a connection URL for psql or DATABASE_URL.")
        @OptionGroup var location: Location
        @Option(help: "Database name.") var database = "babybasics"

        func run() async throws {
            let cluster = try location.cluster()
            do {
                let url = try cluster.connectionString(database: database)
                if location.json { printJSON(Output(cluster, status: "running", url: url)) } else { print(url) }
            } catch {
                throw location.fail(error)
            }
        }
    }

    struct Stop: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Stop the cluster (its data stays in the folder).")
        @OptionGroup var location: Location

        func run() async throws {
            let cluster = try location.cluster()
            let before: EmbeddedPostgres.Status
            do {
                before = try cluster.status()
                try await runOnDedicatedThread { try cluster.stop() }
            } catch {
                throw location.fail(error)
            }
            if before == .notInitialized {
                printError("embedded PostgreSQL in \(cluster.place): not created, nothing to stop")
            } else {
                printError("embedded PostgreSQL in \(cluster.place): stopped")
                let links = cluster.linkedFrom.map { " (\($0.path) links to it)" } ?? ""
                printError("its data stays in \(cluster.directory.path)\(links); bbmigrate embedded remove (or make clean) deletes it")
            }
            if location.json { printJSON(Output(cluster, status: before == .notInitialized ? "\(before)" : "stopped")) }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Stop the cluster and delete its data (and the link to it, when it was relocated).")
        @OptionGroup var location: Location

        func run() async throws {
            let cluster = try location.cluster()
            do { try await runOnDedicatedThread { try cluster.remove() } } catch { throw location.fail(error) }
            printError("embedded PostgreSQL in \(cluster.place): removed")
            if location.json { printJSON(Output(cluster, status: "removed")) }
        }
    }
}

extension EmbeddedPostgres {
    /// `/var/tmp/babybasics/bbdata-1a2b3c4d (linked from /root/app/.bbdata)`, or the folder.
    var place: String {
        linkedFrom.map { "\(directory.path) (linked from \($0.path))" } ?? directory.path
    }
}

extension EmbeddedCommand.Location {
    /// Reports `error` (stderr, and JSON with --json) as "cannot connect" (exit 3).
    func fail(_ error: any Error) -> ExitCode {
        printError("bbmigrate: error: \(error)")
        if json {
            printJSON(FailureOutput(exitCode: MigrationExitCode.cannotConnect.rawValue, error: "\(error)", fix: "read the message above; bbmigrate embedded start creates and starts the cluster"))
        }
        return ExitCode(MigrationExitCode.cannotConnect.rawValue)
    }
}
