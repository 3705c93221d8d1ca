import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Runs PostgreSQL's tools, as the unprivileged `postgres` account when we are root
/// (`initdb` and `postgres` refuse to run as root).
package struct ProcessRunner: Sendable {
    package struct Outcome {
        package var status: Int32
        package var output: String
    }

    /// Whether this process is root.
    package static var isRoot: Bool { geteuid() == 0 }

    /// The account the server runs as when we are root.
    package static let serverAccount = "postgres"

    /// Runs `executable` with `arguments`, waiting for it, capturing stdout and stderr (as the
    /// server account when we are root).
    package static func run(_ executable: String, _ arguments: [String], asServerAccount: Bool = true) throws -> Outcome {
        var argv = [executable] + arguments
        if asServerAccount && isRoot {
            let runuser = ["/usr/sbin/runuser", "/sbin/runuser", "/usr/bin/runuser"].first {
                FileManager.default.isExecutableFile(atPath: $0)
            }
            guard let runuser else {
                throw EmbeddedPostgresError("running as root needs runuser (util-linux) to start PostgreSQL as '\(serverAccount)'", fix: "apt-get install util-linux, or run as a normal user")
            }
            argv = [runuser, "-u", serverAccount, "--"] + argv
        }
        var environment = ProcessInfo.processInfo.environment
        environment["LC_MESSAGES"] = "C"
        let result = try ChildProcess.spawn(argv, environment: environment).waitBlocking()
        return Outcome(status: result.status, output: result.stdout + result.stderr)
    }

    /// Gives `path` to the server account (when root) so it can own the cluster files.
    package static func handOver(_ path: String) throws {
        guard isRoot else { return }
        guard let account = getpwnam(serverAccount) else {
            throw EmbeddedPostgresError(
                "running as root, but there is no '\(serverAccount)' account to run PostgreSQL as (initdb and postgres refuse to run as root)",
                fix: "install the postgresql package (it creates the account), or run as a normal user")
        }
        guard chown(path, account.pointee.pw_uid, account.pointee.pw_gid) == 0 else {
            throw EmbeddedPostgresError("could not give \(path) to the '\(serverAccount)' account: \(String(cString: strerror(errno)))")
        }
    }
}

/// Calls `body` with a NULL-terminated, mutable C string vector (for posix_spawn).
func withCStringVector<R>(_ strings: [String], _ body: ([UnsafeMutablePointer<CChar>?]) -> R) -> R {
    let duplicates = strings.map { strdup($0) }
    defer { duplicates.forEach { free($0) } }
    return body(duplicates + [nil])
}
