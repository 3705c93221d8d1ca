public import Foundation

/// Finds PostgreSQL's server programs (`initdb`, `pg_ctl`, `postgres`).
///
/// Debian keeps them in `/usr/lib/postgresql/<major>/bin`, off the `PATH`; Homebrew and
/// others put them on it. `BB_PG_BINDIR` overrides the search.
///
/// ```swift
/// let bin = try ServerBinaries.locate()
/// print(bin.directory)   // /usr/lib/postgresql/15/bin
/// ```
public struct ServerBinaries: Sendable {
    /// The folder holding `initdb`, `pg_ctl` and `postgres`.
    public let directory: String

    public var initdb: String { directory + "/initdb" }
    public var pgCtl: String { directory + "/pg_ctl" }

    public init(directory: String) { self.directory = directory }

    /// Searches `BB_PG_BINDIR`, `/usr/lib/postgresql/*/bin` (newest first), Homebrew, then `PATH`.
    public static func locate(environment: [String: String] = ProcessInfo.processInfo.environment) throws -> ServerBinaries {
        let fileManager = FileManager.default
        var candidates: [String] = []
        if let override = environment["BB_PG_BINDIR"], !override.isEmpty {
            // Named on purpose: never fall back to another server without saying so.
            guard fileManager.isExecutableFile(atPath: override + "/initdb"), fileManager.isExecutableFile(atPath: override + "/pg_ctl") else {
                throw EmbeddedPostgresError(
                    "BB_PG_BINDIR is \(override), but initdb and pg_ctl are not there",
                    fix: "point BB_PG_BINDIR at the bin folder of a PostgreSQL installation (the one holding initdb), or unset it")
            }
            candidates.append(override)
        }
        let debianRoot = "/usr/lib/postgresql"
        if let versions = try? fileManager.contentsOfDirectory(atPath: debianRoot) {
            let sorted = versions.sorted { (Int($0) ?? 0) > (Int($1) ?? 0) }
            candidates += sorted.map { "\(debianRoot)/\($0)/bin" }
        }
        for brew in ["/opt/homebrew/bin", "/usr/local/bin", "/opt/homebrew/opt/postgresql/bin"] {
            candidates.append(brew)
        }
        let path = environment["PATH"] ?? ""
        candidates += path.split(separator: ":").map(String.init)
        for directory in candidates where fileManager.isExecutableFile(atPath: directory + "/initdb")
            && fileManager.isExecutableFile(atPath: directory + "/pg_ctl") {
            return ServerBinaries(directory: directory)
        }
        throw EmbeddedPostgresError(
            "PostgreSQL's server programs (initdb, pg_ctl) were not found",
            fix: "install them (Debian/Ubuntu: sudo apt-get install postgresql; macOS: brew install postgresql@15), or set BB_PG_BINDIR to their folder")
    }
}

extension ServerBinaries {
    /// As root, the server programs run as the `postgres` account: throws, naming the fix,
    /// when that account cannot run them (an installation inside `/root`, mode 0700, such as
    /// a Python virtual environment there). Does nothing for any other account.
    ///
    /// ```swift
    /// try ServerBinaries.locate().checkServerAccountCanRun()
    /// ```
    public func checkServerAccountCanRun() throws {
        guard ProcessRunner.isRoot else { return }
        let probe = try ProcessRunner.run("/usr/bin/test", ["-x", initdb, "-a", "-x", directory + "/postgres"])
        guard probe.status == 0 else {
            throw EmbeddedPostgresError(
                "the '\(ProcessRunner.serverAccount)' account cannot run the server programs in \(directory) (as root, PostgreSQL runs as that account, and a folder above them is closed to it)",
                fix: "copy that installation to a folder every account can enter (for .venv-pg18: BB_PG_BINDIR=$(scripts/pg18-bindir.sh)), or install PostgreSQL with apt-get install postgresql")
        }
    }
}

/// Something went wrong starting, stopping or reaching the embedded cluster.
///
/// The message says what happened; `fix` says what to do.
///
/// ```swift
/// do { try cluster.start() } catch let error as EmbeddedPostgresError { print(error) }
/// ```
public struct EmbeddedPostgresError: Error, Sendable, CustomStringConvertible {
    public var message: String
    public var fix: String?
    /// The last lines of the server or tool output, when there are some.
    public var output: String?

    public init(_ message: String, fix: String? = nil, output: String? = nil) {
        self.message = message
        self.fix = fix
        self.output = output
    }

    public var description: String {
        var text = message
        if let output, !output.isEmpty { text += "\n" + output.split(separator: "\n").suffix(15).map { "  | " + $0 }.joined(separator: "\n") }
        if let fix { text += "\nWhat to do: " + fix }
        return text
    }
}
