import ArgumentParser
import Foundation
import Migrator

/// `bbmigrate dump`: the live schema as stable, reviewable SQL.
struct DumpCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dump",
        abstract: "Write the live schema as stable SQL, one block per object in a fixed order (like dbmate's schema.sql).",
        discussion: """
            Commit the file and review its diff with each migration; bbmigrate verify --schema-file FILE compares \
            a database with it. Extension members, temp tables and bbmigrate's own tables are left out.
            """)

    @OptionGroup var target: TargetOptions
    @Option(name: .customLong("output"), help: "Write to this file instead of stdout.") var output: String?
    @OptionGroup var ignore: IgnoreOptions

    struct Output: Encodable {
        var ok = true
        var file: String?
        var objects: Int
        var schema: String?
    }

    func run() async throws {
        try await target.run {
            let text = try await target.migrator().dump(ignoring: ignore.value)
            let objects = text.split(separator: "\n").filter { $0.hasPrefix("-- [") }.count
            if let output {
                do {
                    try Data(text.utf8).write(to: URL(fileURLWithPath: output), options: .atomic)
                } catch {
                    throw MigratorError.configuration("cannot write \(output): \(error.localizedDescription)", fix: "check the folder exists and is writable")
                }
                if target.json { printJSON(Output(file: output, objects: objects)) } else { printError("bbmigrate: wrote \(objects) objects to \(output)") }
            } else if target.json {
                printJSON(Output(objects: objects, schema: text))
            } else {
                print(text, terminator: "")
            }
        }
    }
}
