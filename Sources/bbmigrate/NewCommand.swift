import ArgumentParser
import Foundation
import Migrator

/// `bbmigrate new NAME`: write the next migration file.
struct NewCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "new", abstract: "Write the next NNNN_name.sql file, with a header comment, and print its path.")

    @Argument(help: "snake_case name, for example add_growth_table.") var name: String
    @Option(name: .customLong("dir"), help: "Folder of migration files.") var directory = "Migrations"
    @Flag(help: "Print the result as JSON on stdout.") var json = false

    func validate() throws {
        guard name.wholeMatch(of: /[a-z0-9]+(_[a-z0-9]+)*/) != nil else {
            throw ValidationError("NAME must be snake_case (lower-case letters, digits, underscores), for example add_growth_table")
        }
    }

    struct Output: Encodable {
        var ok = true
        var file: String
    }

    func run() throws {
        let folder = URL(fileURLWithPath: directory)
        do {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            let next = (try MigrationFile.load(from: folder).map(\.version).max() ?? 0) + 1
            let fileName = "\(MigrationFile.format(next))_\(name).sql"
            let header = """
                -- \(fileName)
                --
                -- What this migration changes, and why.
                --
                -- bbmigrate runs this file in one transaction together with its history row: if any
                -- statement fails, nothing of it is applied. Do not add BEGIN/COMMIT (they are refused).
                -- For CREATE INDEX CONCURRENTLY (which cannot run in a transaction), put only such
                -- statements in a file that starts with the line: -- bbmigrate:no-transaction


                """
            let url = folder.appendingPathComponent(fileName)
            try Data(header.utf8).write(to: url, options: .withoutOverwriting)
            if json {
                printJSON(Output(file: url.path))
            } else {
                print(url.path)
            }
        } catch {
            let failure = (error as? MigratorError) ?? .configuration("could not write the file: \(error.localizedDescription)", fix: "check that \(directory) is writable")
            printError("bbmigrate: error: \(failure)")
            if json { printJSON(FailureOutput(exitCode: failure.exitCode.rawValue, error: failure.message, fix: failure.fix)) }
            throw ExitCode(failure.exitCode.rawValue)
        }
    }
}
