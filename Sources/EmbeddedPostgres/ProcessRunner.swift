import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Runs PostgreSQL's tools, as the unprivileged `postgres` account when we are root
/// (`initdb` and `postgres` refuse to run as root).
struct ProcessRunner: Sendable {
    struct Outcome {
        var status: Int32
        var output: String
    }

    /// Whether this process is root.
    static var isRoot: Bool { geteuid() == 0 }

    /// The account the server runs as when we are root.
    static let serverAccount = "postgres"

    /// Runs `executable` with `arguments`, waiting for it, capturing stdout and stderr.
    ///
    /// Uses `posix_spawn` and `waitpid`: Foundation's `Process.waitUntilExit` can hang on Linux
    /// when the child leaves a daemon behind (as `pg_ctl start` does).
    static func run(_ executable: String, _ arguments: [String], asServerAccount: Bool = true) throws -> Outcome {
        var argv: [String]
        if asServerAccount && isRoot {
            let runuser = ["/usr/sbin/runuser", "/sbin/runuser", "/usr/bin/runuser"].first {
                FileManager.default.isExecutableFile(atPath: $0)
            }
            guard let runuser else {
                throw EmbeddedPostgresError("running as root needs runuser (util-linux) to start PostgreSQL as '\(serverAccount)'", fix: "apt-get install util-linux, or run as a normal user")
            }
            argv = [runuser, "-u", serverAccount, "--", executable] + arguments
        } else {
            argv = [executable] + arguments
        }
        // A file, not a pipe: a server started by pg_ctl must not hold our pipe open.
        let outputPath = FileManager.default.temporaryDirectory.appendingPathComponent("bb-embedded-\(UUID().uuidString).out").path
        defer { unlink(outputPath) }

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)

        var environment = ProcessInfo.processInfo.environment
        environment["LC_MESSAGES"] = "C"
        let environmentStrings = environment.map { "\($0.key)=\($0.value)" }

        var pid: pid_t = 0
        let spawned = withCStringVector(argv) { argvPointers in
            withCStringVector(environmentStrings) { environmentPointers in
                posix_spawn(&pid, argv[0], &actions, nil, argvPointers, environmentPointers)
            }
        }
        guard spawned == 0 else {
            throw EmbeddedPostgresError("could not run \(argv[0]): \(String(cString: strerror(spawned)))")
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 {
            guard errno == EINTR else { throw EmbeddedPostgresError("lost track of \(executable)") }
        }
        let output = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
        let exitCode: Int32 = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        return Outcome(status: exitCode, output: output)
    }

    /// Gives `path` to the server account (when root) so it can own the cluster files.
    static func handOver(_ path: String) throws {
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
