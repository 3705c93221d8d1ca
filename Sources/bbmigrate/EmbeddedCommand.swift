import ArgumentParser
import EmbeddedPostgres
import Foundation

/// `bbmigrate embedded start|status|url|stop`: the development cluster in `.bbdata/`.
struct EmbeddedCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "embedded",
        abstract: "Manage the local development PostgreSQL kept in .bbdata/.",
        discussion: "The cluster is used when no --url, DATABASE_URL or PG* variable names a database.",
        subcommands: [Start.self, Status.self, URLCommand.self, Stop.self]
    )

    struct Location: ParsableArguments {
        @Option(name: .customLong("data-dir"), help: "The cluster's folder (default: $BB_DATA_DIR or .bbdata).")
        var dataDirectory: String?

        var cluster: EmbeddedPostgres {
            let path = dataDirectory ?? ProcessInfo.processInfo.environment["BB_DATA_DIR"] ?? ".bbdata"
            return EmbeddedPostgres(directory: URL(fileURLWithPath: path))
        }
    }

    struct Start: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create the cluster if needed, start it, and create the babybasics database.")
        @OptionGroup var location: Location
        @Option(help: "Database to create if missing.") var database = "babybasics"

        func run() async throws {
            let cluster = location.cluster
            do {
                let status = try await runOnDedicatedThread { try cluster.start() }
                if !(try await cluster.databaseExists(database)) {
                    try await cluster.createDatabase(database)
                }
                printError("embedded PostgreSQL in \(cluster.directory.path): \(status)")
                print(try cluster.connectionString(database: database))
            } catch {
                printError("error: \(error)")
                throw ExitCode(ExitStatus.cannotConnect.rawValue)
            }
        }
    }

    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Say whether the cluster exists and runs (exit 0 when running, 3 otherwise).")
        @OptionGroup var location: Location

        func run() async throws {
            let cluster = location.cluster
            let status = try cluster.status()
            print("\(cluster.directory.path): \(status)")
            if case .running = status { return }
            throw ExitCode(ExitStatus.cannotConnect.rawValue)
        }
    }

    struct URLCommand: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "url", abstract: "Print a connection URL for psql or DATABASE_URL.")
        @OptionGroup var location: Location
        @Option(help: "Database name.") var database = "babybasics"

        func run() async throws {
            do {
                print(try location.cluster.connectionString(database: database))
            } catch {
                printError("error: \(error)")
                throw ExitCode(ExitStatus.cannotConnect.rawValue)
            }
        }
    }

    struct Stop: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Stop the cluster (its data stays in the folder).")
        @OptionGroup var location: Location

        func run() async throws {
            let cluster = location.cluster
            try await runOnDedicatedThread { try cluster.stop() }
            printError("embedded PostgreSQL in \(cluster.directory.path): stopped")
        }
    }
}
