public import EmbeddedPostgres
public import Foundation
import CLibPQ
#if canImport(Glibc)
import Glibc
#endif

/// A real PgBouncer (Debian's `pgbouncer` package) in front of an embedded cluster, for tests
/// of what a connection pooler does to a client: transaction pooling hands each transaction to
/// any server connection, so session state (advisory locks, `SET`, prepared statements,
/// `LISTEN`) does not survive between transactions.
///
/// It listens on 127.0.0.1 on a free port and asks clients for the cluster's superuser
/// password (SCRAM; `connectionString` points libpq at the cluster's passfile); it reaches the
/// cluster over its Unix socket as the superuser, and stops when `stop()` is called or this
/// process ends.
///
/// ```swift
/// let bouncer = try PgBouncer.start(in: cluster, mode: .transaction)
/// let url = bouncer.connectionString(database: "babybasics")
/// defer { bouncer.stop() }
/// ```
public struct PgBouncer: Sendable {
    /// PgBouncer's `pool_mode`.
    public enum PoolMode: String, Sendable {
        case session, transaction, statement
    }

    public let directory: URL
    public let port: Int
    public let mode: PoolMode
    /// The cluster's passfile, which holds the password PgBouncer asks for.
    public let passFile: URL

    /// `postgresql://postgres@127.0.0.1:PORT/database?passfile=…`.
    public func connectionString(database: String) -> String {
        let passfile = passFile.path.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? passFile.path
        return "postgresql://\(EmbeddedPostgres.superuser)@127.0.0.1:\(port)/\(database)?passfile=\(passfile)"
    }

    /// Finds `pgbouncer`: `BB_PGBOUNCER`, `/usr/sbin/pgbouncer`, then `PATH`.
    public static func locate() throws -> String {
        var candidates: [String] = []
        if let override = ProcessInfo.processInfo.environment["BB_PGBOUNCER"], !override.isEmpty { candidates.append(override) }
        candidates += ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer", "/usr/local/bin/pgbouncer", "/opt/homebrew/bin/pgbouncer"]
        candidates += (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map { "\($0)/pgbouncer" }
        guard let found = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw EmbeddedPostgresError("pgbouncer is not installed", fix: "apt-get install pgbouncer (make test installs it), or set BB_PGBOUNCER to its path")
        }
        return found
    }

    /// Starts a PgBouncer for `cluster` (which must be running) in pool mode `mode`.
    /// `connectQuery` runs on each server connection PgBouncer opens, before any client uses
    /// it (PgBouncer's `connect_query`), e.g. `SET ROLE babybasics_app` to serve clients as a
    /// least-privilege role.
    /// It waits until PgBouncer accepts connections, on a thread of its own (never on Swift's
    /// cooperative threads, which a test suite needs for everything else).
    public static func start(in cluster: EmbeddedPostgres, mode: PoolMode, poolSize: Int = 20, connectQuery: String? = nil) async throws -> PgBouncer {
        try await runOnDedicatedThread { try startBlocking(in: cluster, mode: mode, poolSize: poolSize, connectQuery: connectQuery) }
    }

    private static func startBlocking(in cluster: EmbeddedPostgres, mode: PoolMode, poolSize: Int, connectQuery: String?) throws -> PgBouncer {
        let binary = try locate()
        let clusterPort = try cluster.port()
        let directory = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("bbbouncer-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try ProcessRunner.handOver(directory.path)
        let port = try EmbeddedPostgres.freePort()
        let password = try cluster.superuserPassword()
        let configuration = """
            [databases]
            * = host=\(cluster.directory.path) port=\(clusterPort) user=\(EmbeddedPostgres.superuser) password=\(password)\(connectQuery.map { " connect_query='" + $0.replacingOccurrences(of: "'", with: "''") + "'" } ?? "")

            [pgbouncer]
            listen_addr = 127.0.0.1
            listen_port = \(port)
            unix_socket_dir =
            auth_type = scram-sha-256
            auth_file = \(directory.path)/userlist.txt
            pool_mode = \(mode.rawValue)
            admin_users = \(EmbeddedPostgres.superuser)
            default_pool_size = \(poolSize)
            max_client_conn = 1000
            logfile = \(directory.path)/pgbouncer.log
            pidfile = \(directory.path)/pgbouncer.pid

            """
        let configFile = directory.appendingPathComponent("pgbouncer.ini")
        try Data(configuration.utf8).write(to: configFile)
        try Data("\"\(EmbeddedPostgres.superuser)\" \"\(password)\"\n".utf8).write(to: directory.appendingPathComponent("userlist.txt"))
        chmod(directory.path, 0o700)
        for file in ["pgbouncer.ini", "userlist.txt"] {
            try ProcessRunner.handOver(directory.appendingPathComponent(file).path)
            chmod(directory.appendingPathComponent(file).path, 0o600)
        }

        // A detached shell runs pgbouncer (as the server account when root) and stops it when
        // this process ends; stop() ends it sooner.
        let quote = { (text: String) in "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'" }
        var run = "\(quote(binary)) \(quote(configFile.path))"
        if ProcessRunner.isRoot { run = "runuser -u \(ProcessRunner.serverAccount) -- " + run }
        // pgbouncer is stopped through its pid file: `pkill -f <config path>` also matched this
        // shell's own command line and killed it before the `rm -rf`, leaving a folder behind.
        let pidFile = quote(directory.appendingPathComponent("pgbouncer.pid").path)
        let script = "\(run) >/dev/null 2>&1 & child=$!; while kill -0 \(getpid()) 2>/dev/null && kill -0 $child 2>/dev/null; do sleep 0.3; done; "
            + "kill $child 2>/dev/null; [ -s \(pidFile) ] && kill $(cat \(pidFile)) 2>/dev/null; rm -rf \(quote(directory.path))"
        _ = try ChildProcess.spawn(["/usr/bin/setsid", "/bin/sh", "-c", script], environment: ProcessInfo.processInfo.environment)

        let bouncer = PgBouncer(directory: directory, port: port, mode: mode, passFile: cluster.passFile)
        for _ in 0..<100 {
            if bouncer.accepts() { return bouncer }
            usleep(50_000)
        }
        let log = (try? String(contentsOf: directory.appendingPathComponent("pgbouncer.log"), encoding: .utf8)) ?? ""
        throw EmbeddedPostgresError("pgbouncer did not start on port \(port)", output: log)
    }

    /// Whether something accepts TCP connections on the port.
    func accepts() -> Bool {
        let socketFD = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socketFD >= 0 else { return false }
        defer { close(socketFD) }
        return EmbeddedPostgres.onLoopback(port: port) { connect(socketFD, $0, $1) } == 0
    }

    /// The process ids of the server connections PgBouncer holds for `database` (its admin
    /// console's `SHOW SERVERS`). A backend that ended is listed until PgBouncer has read its
    /// end: a test that terminates backends waits for them to leave this list, rather than
    /// racing PgBouncer to them.
    ///
    /// ```swift
    /// try await waitUntil { try await bouncer.serverProcessIDs(database: name).isDisjoint(with: terminated) }
    /// ```
    public func serverProcessIDs(database: String) async throws -> Set<Int32> {
        // The console speaks only the simple protocol and is not PostgreSQL (no
        // pg_backend_pid(), nothing the wrapper checks at connect): plain libpq, on a thread of
        // its own.
        let url = connectionString(database: "pgbouncer")
        return try await runOnDedicatedThread {
            guard let connection = PQconnectdb(url) else { throw EmbeddedPostgresError("could not allocate a libpq connection") }
            defer { PQfinish(connection) }
            guard PQstatus(connection) == CONNECTION_OK else {
                throw EmbeddedPostgresError("could not reach PgBouncer's admin console: " + String(cString: PQerrorMessage(connection)))
            }
            guard let result = PQexec(connection, "SHOW SERVERS") else { throw EmbeddedPostgresError("PgBouncer's admin console did not answer SHOW SERVERS") }
            defer { PQclear(result) }
            guard PQresultStatus(result) == PGRES_TUPLES_OK else {
                throw EmbeddedPostgresError("SHOW SERVERS failed: " + String(cString: PQresultErrorMessage(result)))
            }
            let databaseColumn = PQfnumber(result, "database"), pidColumn = PQfnumber(result, "remote_pid")
            guard databaseColumn >= 0, pidColumn >= 0 else { throw EmbeddedPostgresError("SHOW SERVERS has no database or remote_pid column") }
            var pids: Set<Int32> = []
            for row in 0..<PQntuples(result) where String(cString: PQgetvalue(result, row, databaseColumn)) == database {
                if let pid = Int32(String(cString: PQgetvalue(result, row, pidColumn))) { pids.insert(pid) }
            }
            return pids
        }
    }

    /// Stops pgbouncer (its watcher then removes the folder).
    public func stop() {
        guard let text = try? String(contentsOf: directory.appendingPathComponent("pgbouncer.pid"), encoding: .utf8),
              let pid = pid_t(text.trimmingCharacters(in: .whitespacesAndNewlines)) else { return }
        kill(pid, SIGTERM)
    }
}
