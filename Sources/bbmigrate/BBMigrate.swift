import ArgumentParser

/// `bbmigrate`: applies and verifies Baby Basics' SQL migrations.
@main
struct BBMigrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bbmigrate",
        abstract: "Apply and verify the Baby Basics database migrations.",
        discussion: """
            Exit codes: 0 ok, 1 verification failed, 2 usage or configuration error, \
            3 cannot connect, 4 lock timeout, 5 a migration failed.
            """,
        subcommands: [EmbeddedCommand.self]
    )
}

/// Exit codes, documented in the README; CI relies on them.
enum ExitCode32: Int32 {
    case ok = 0
    case verificationFailed = 1
    case usage = 2
    case cannotConnect = 3
    case lockTimeout = 4
    case migrationFailed = 5
}
