public import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A child process started with `posix_spawn`, its output captured in files, awaited with
/// `waitpid`.
///
/// Foundation's `Process` can lose track of children on Linux (its `waitUntilExit` spins when
/// a child leaves a daemon behind, as `pg_ctl start` does, or under Swift concurrency), so the
/// cluster code and the CLI tests use this instead.
///
/// ```swift
/// let child = try ChildProcess.spawn(["/usr/bin/psql", "-Atc", "SELECT 1", url])
/// let result = try await child.result()
/// print(result.status, result.stdout)
/// ```
public final class ChildProcess: @unchecked Sendable {
    /// How a child ended.
    ///
    /// ```swift
    /// let result = try await ChildProcess.spawn(["/usr/bin/true"]).result()   // result.status == 0
    /// ```
    public struct Result: Sendable {
        /// The exit code, or 128 + signal number when a signal ended it.
        public var status: Int32
        public var stdout: String
        public var stderr: String
    }

    /// The child's process id.
    public let pid: pid_t
    private let stdoutPath: String
    private let stderrPath: String
    private let lock = NSLock()
    private var finished: Result?

    private init(pid: pid_t, stdoutPath: String, stderrPath: String) {
        self.pid = pid
        self.stdoutPath = stdoutPath
        self.stderrPath = stderrPath
    }

    deinit {
        unlink(stdoutPath)
        unlink(stderrPath)
    }

    /// Starts `arguments[0]` (an absolute path) with `arguments`, in `directory` if given, with
    /// `environment` (default: this process's).
    public static func spawn(_ arguments: [String], environment: [String: String]? = nil, directory: String? = nil) throws -> ChildProcess {
        guard let executable = arguments.first else { throw EmbeddedPostgresError("nothing to run") }
        var argv = arguments
        if let directory {
            // posix_spawn has no portable chdir: let a shell change directory, then exec.
            argv = ["/bin/sh", "-c", "cd \"$0\" && exec \"$@\"", directory] + arguments
        }
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("bb-child-\(UUID().uuidString)").path
        let stdoutPath = base + ".out"
        let stderrPath = base + ".err"

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, stdoutPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_addopen(&actions, 2, stderrPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)

        // The child starts with no signal blocked and every signal at its default: a thread of
        // this process may block some (the runtime does), and a child that inherits a blocked
        // SIGALRM or SIGTERM never ends (pgbench -T waits for SIGALRM).
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t()
        sigemptyset(&none)
        var all = sigset_t()
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        let environmentStrings = (environment ?? ProcessInfo.processInfo.environment).map { "\($0.key)=\($0.value)" }
        var pid: pid_t = 0
        let spawned = withCStringVector(argv) { argvPointers in
            withCStringVector(environmentStrings) { environmentPointers in
                posix_spawn(&pid, argv[0], &actions, &attributes, argvPointers, environmentPointers)
            }
        }
        guard spawned == 0 else {
            throw EmbeddedPostgresError("could not run \(executable): \(String(cString: strerror(spawned)))")
        }
        return ChildProcess(pid: pid, stdoutPath: stdoutPath, stderrPath: stderrPath)
    }

    /// Blocks until the child ends (call it off the cooperative pool, or use `result()`).
    public func waitBlocking() throws -> Result {
        if let finished = lock.withLock({ finished }) { return finished }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 {
            guard errno == EINTR else { throw EmbeddedPostgresError("lost track of process \(pid): \(String(cString: strerror(errno)))") }
        }
        let code: Int32 = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        let result = Result(
            status: code,
            stdout: (try? String(contentsOfFile: stdoutPath, encoding: .utf8)) ?? "",
            stderr: (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? "")
        lock.withLock { finished = result }
        return result
    }

    /// Waits for the child on a dedicated thread.
    public func result() async throws -> Result {
        try await runOnDedicatedThread { try self.waitBlocking() }
    }

    /// Sends `signal` (for example `SIGKILL`).
    public func send(_ signal: Int32) {
        kill(pid, signal)
    }
}
