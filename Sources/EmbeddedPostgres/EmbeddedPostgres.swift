public import Foundation
import Postgres
#if canImport(Glibc)
import Glibc
#endif

/// A PostgreSQL cluster that lives in one folder: created with `initdb`, started on a free
/// port with its Unix socket inside the folder, stopped with `pg_ctl`.
///
/// For development (`.bbdata/`), for this package's tests, and for backend services' own tests.
/// As root, the server runs as the `postgres` account, which is given the folder.
///
/// Locked down: the folder is 0700 (only the account running the server, and root, may enter
/// it, so only they reach the Unix socket); every connection, local or TCP, authenticates with
/// SCRAM using a generated password kept in the folder (0600), which the connection URLs name
/// as their `passfile`, so no secret appears in a URL; TCP (127.0.0.1) only when asked for.
///
/// Layout: `data/` (the cluster), `server.log`, `superuser.password`, `pgpass` (the same
/// password in libpq's passfile format), and the socket `.s.PGSQL.<port>`.
///
/// ```swift
/// let cluster = EmbeddedPostgres(directory: URL(fileURLWithPath: ".bbdata"))
/// try cluster.start()
/// try await cluster.createDatabase("babybasics")
/// let connection = try await PostgresConnection.connect(try cluster.connectionString(database: "babybasics"))
/// ```
public struct EmbeddedPostgres: Sendable {
    /// Server settings.
    ///
    /// ```swift
    /// let cluster = EmbeddedPostgres(directory: dir, options: .init(durable: false, maxConnections: 50))
    /// ```
    public struct Options: Sendable {
        /// `false` turns off fsync and friends: much faster, and fine for throw-away clusters.
        public var durable: Bool
        /// `max_connections`.
        public var maxConnections: Int
        /// Extra `postgresql.conf` lines (`name = value`).
        public var settings: [String: String]
        /// Also listen on 127.0.0.1 (password required); otherwise the Unix socket only.
        public var tcp: Bool
        /// The superuser's password when the cluster is created (`nil`: a random one). The
        /// nodes of one Citus cluster share one, so that each can log in to the others.
        public var superuserPassword: String?

        public init(durable: Bool = true, maxConnections: Int = 200, settings: [String: String] = [:], tcp: Bool = false, superuserPassword: String? = nil) {
            self.durable = durable
            self.maxConnections = maxConnections
            self.settings = settings
            self.tcp = tcp
            self.superuserPassword = superuserPassword
        }
    }

    /// Whether the cluster exists and runs.
    ///
    /// ```swift
    /// if case .running(let port, _) = try cluster.status() { print(port) }
    /// ```
    public enum Status: Sendable, Equatable, CustomStringConvertible {
        case notInitialized
        case stopped
        case running(port: Int, pid: Int)

        public var description: String {
            switch self {
            case .notInitialized: "not created"
            case .stopped: "stopped"
            case .running(let port, let pid): "running (port \(port), pid \(pid))"
            }
        }
    }

    /// The cluster's folder (absolute).
    public let directory: URL
    public let options: Options
    /// The link that leads to ``directory`` when the cluster was relocated (see
    /// ``development(at:options:)``); nil when it lives where it was asked for.
    public let linkedFrom: URL?

    /// The superuser (its password is in the folder; connection URLs point libpq at it).
    public static let superuser = "postgres"

    public init(directory: URL, options: Options = Options()) {
        self.init(directory: directory, options: options, linkedFrom: nil)
    }

    init(directory: URL, options: Options, linkedFrom: URL?) {
        self.directory = directory.standardizedFileURL.absoluteURL
        self.options = options
        self.linkedFrom = linkedFrom
    }

    public var dataDirectory: URL { directory.appendingPathComponent("data") }
    public var logFile: URL { directory.appendingPathComponent("server.log") }
    var passwordFile: URL { directory.appendingPathComponent("superuser.password") }
    /// libpq's password file for this cluster (`passfile=` in every URL this type gives out).
    public var passFile: URL { directory.appendingPathComponent("pgpass") }
    /// The port of the last start, tried first on the next one, so that a URL printed before a
    /// stop (`make up`'s psql line) still connects after the next start.
    var portFile: URL { directory.appendingPathComponent("port") }

    /// The port to start on: the last one, unless TCP is on and something else listens there.
    func portForStart() throws -> Int {
        if let text = try? String(contentsOf: portFile, encoding: .utf8),
           let last = Int(text.trimmingCharacters(in: .whitespacesAndNewlines)), (1024...65535).contains(last),
           !options.tcp || Self.isFree(last) {
            return last
        }
        return try Self.freePort()
    }

    /// The superuser's generated password (for tools that cannot read a passfile, such as a
    /// pooler's configuration).
    public func superuserPassword() throws -> String {
        try String(contentsOf: passwordFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    // MARK: Status

    /// Reads `postmaster.pid` and checks that its process lives. Spawns nothing, so it is cheap
    /// enough to call before every connection.
    public func status() throws -> Status {
        let fileManager = FileManager.default
        guard fileManager.fileExists(atPath: dataDirectory.appendingPathComponent("PG_VERSION").path) else {
            return .notInitialized
        }
        guard let pidFile = try? String(contentsOf: dataDirectory.appendingPathComponent("postmaster.pid"), encoding: .utf8) else {
            return .stopped
        }
        let lines = pidFile.split(separator: "\n", omittingEmptySubsequences: false)
        guard lines.count >= 8, let pid = Int32(lines[0].trimmingCharacters(in: .whitespaces)),
              let port = Int(lines[3].trimmingCharacters(in: .whitespaces)), pid > 0 else { return .stopped }
        // Line 8 is the server state; "ready" once it accepts connections.
        guard lines[7].trimmingCharacters(in: .whitespaces) == "ready" else { return .stopped }
        guard kill(pid, 0) == 0 || errno == EPERM else { return .stopped }
        #if os(Linux)
        // A stale pid file whose number now belongs to another program.
        if let command = try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8), !command.hasPrefix("postgres") {
            return .stopped
        }
        #endif
        return .running(port: port, pid: Int(pid))
    }

    /// The port of the running server.
    public func port() throws -> Int {
        guard case .running(let port, _) = try status() else {
            throw EmbeddedPostgresError("the embedded PostgreSQL in \(directory.path) is not running", fix: "start it (bbmigrate embedded start)")
        }
        return port
    }

    /// A URL for `database` over the Unix socket, as the superuser; libpq reads the password
    /// from the cluster's `pgpass` file, so the URL holds no secret:
    /// `postgresql://postgres@/babybasics?host=/path/.bbdata&port=54321&passfile=/path/.bbdata/pgpass`.
    /// psql accepts it.
    public func connectionString(database: String = "postgres") throws -> String {
        let port = try port()
        let host = directory.path.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? directory.path
        let passfile = passFile.path.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? passFile.path
        let name = database.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? database
        return "postgresql://\(Self.superuser)@/\(name)?host=\(host)&port=\(port)&passfile=\(passfile)"
    }

    /// A TCP URL (127.0.0.1) for `database`, with the superuser password in it. Only for a
    /// cluster created with `Options(tcp: true)`.
    public func tcpConnectionString(database: String = "postgres") throws -> String {
        guard options.tcp else {
            throw EmbeddedPostgresError("this embedded PostgreSQL listens on its Unix socket only", fix: "create it with EmbeddedPostgres.Options(tcp: true), or use connectionString(database:)")
        }
        let port = try port()
        return "postgresql://\(Self.superuser):\(try superuserPassword())@127.0.0.1:\(port)/\(database)"
    }

    // MARK: Start and stop

    /// Creates the cluster if needed and starts it if it is not running. Returns the status.
    @discardableResult
    public func start() throws -> Status {
        let current = try status()
        if case .running = current { return current }
        let binaries = try ServerBinaries.locate()
        try binaries.checkServerAccountCanRun()
        try prepareDirectory()
        if current == .notInitialized { try initialize(binaries) }
        try lockDown()
        var lastError: EmbeddedPostgresError?
        for attempt in 0..<3 {
            let port = attempt == 0 ? try portForStart() : try Self.freePort()
            let listen = options.tcp ? "127.0.0.1" : "''"
            let outcome = try ProcessRunner.run(binaries.pgCtl, [
                "start", "-D", dataDirectory.path, "-l", logFile.path, "-w", "-t", "60", "-o", "-p \(port) -c listen_addresses=\(listen)",
            ])
            if outcome.status == 0, case .running = try status() {
                try? Data("\(port)\n".utf8).write(to: portFile)
                return try status()
            }
            let log = (try? String(contentsOf: logFile, encoding: .utf8)) ?? ""
            lastError = EmbeddedPostgresError(
                "PostgreSQL in \(directory.path) did not start",
                fix: "read \(logFile.path); if the folder is damaged, stop any server using it and delete the folder",
                output: outcome.output + "\n" + log.split(separator: "\n").suffix(10).joined(separator: "\n"))
            if !log.contains("Address already in use") { break }
        }
        throw lastError ?? EmbeddedPostgresError("PostgreSQL did not start")
    }

    /// Stops the server (fast shutdown: running transactions roll back). Does nothing if it
    /// is not running.
    public func stop(immediate: Bool = false) throws {
        guard case .running = try status() else { return }
        let binaries = try ServerBinaries.locate()
        let outcome = try ProcessRunner.run(binaries.pgCtl, ["stop", "-D", dataDirectory.path, "-w", "-m", immediate ? "immediate" : "fast"])
        guard outcome.status == 0 else {
            throw EmbeddedPostgresError("PostgreSQL in \(directory.path) did not stop", output: outcome.output)
        }
    }

    /// Creates `name` (optionally as a copy of `template`), as the superuser.
    ///
    /// ```swift
    /// try await cluster.createDatabase("test_42", template: "migrated_template")
    /// ```
    public func createDatabase(_ name: String, template: String? = nil) async throws {
        let connection = try await PostgresConnection.connect(try connectionString(database: "postgres"))
        defer { Task { await connection.close() } }
        if let template {
            try await connection.execute("CREATE DATABASE \(identifier: name) TEMPLATE \(identifier: template)")
        } else {
            try await connection.execute("CREATE DATABASE \(identifier: name)")
        }
    }

    /// Whether database `name` exists.
    public func databaseExists(_ name: String) async throws -> Bool {
        let connection = try await PostgresConnection.connect(try connectionString(database: "postgres"))
        defer { Task { await connection.close() } }
        return try await connection.fetchValue(Bool.self, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = \(name))") ?? false
    }

    // MARK: Standby

    /// Creates (first time) and starts a streaming standby of this cluster, which must be
    /// running, in `directory`: `pg_basebackup -R` copies the cluster and writes the
    /// replication settings, and the standby runs read-only with its own port and socket, the
    /// same superuser and password, replaying this cluster's WAL as it comes. For tests of
    /// replicas (a backend's own included): pause replay with `SELECT pg_wal_replay_pause()`
    /// on the standby, resume with `pg_wal_replay_resume()`.
    ///
    /// ```swift
    /// let standby = try primary.startStandby(at: URL(fileURLWithPath: "/tmp/bb-standby"))
    /// let replicaURL = try standby.connectionString(database: "babybasics")
    /// ```
    @discardableResult
    public func startStandby(at directory: URL, options: Options? = nil) throws -> EmbeddedPostgres {
        let standby = EmbeddedPostgres(directory: directory, options: options ?? self.options)
        if try standby.status() == .notInitialized {
            let port = try port()
            let binaries = try ServerBinaries.locate()
            try standby.prepareDirectory()
            try Data((try superuserPassword() + "\n").utf8).write(to: standby.passwordFile, options: .atomic)
            try ProcessRunner.handOver(standby.passwordFile.path)
            chmod(standby.passwordFile.path, 0o600)
            // The primary's passfile (its folder is the server account's, like the standby's).
            let quote = { (value: String) in "'" + value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "'", with: "\\'") + "'" }
            let source = "host=\(quote(self.directory.path)) port=\(port) user=\(Self.superuser) passfile=\(quote(passFile.path))"
            let outcome = try ProcessRunner.run(binaries.directory + "/pg_basebackup", [
                "-D", standby.dataDirectory.path, "-R", "-X", "stream", "-c", "fast", "--no-sync", "-d", source,
            ])
            guard outcome.status == 0 else {
                try? FileManager.default.removeItem(at: standby.dataDirectory)
                throw EmbeddedPostgresError(
                    "pg_basebackup could not copy \(self.directory.path) to \(standby.dataDirectory.path)",
                    fix: "the primary must be running and allow replication connections (restart it once so its pg_hba.conf, rewritten on start, takes effect)",
                    output: outcome.output)
            }
            // The copied configuration names the primary's socket folder: the standby has its own.
            let configuration = "\n# Written by EmbeddedPostgres.startStandby\nunix_socket_directories = '\(standby.directory.path.replacingOccurrences(of: "'", with: "''"))'\nhot_standby = on\n"
            let handle = try FileHandle(forWritingTo: standby.dataDirectory.appendingPathComponent("postgresql.conf"))
            defer { try? handle.close() }
            try handle.seekToEnd()
            try handle.write(contentsOf: Data(configuration.utf8))
        }
        try standby.start()
        return standby
    }

    // MARK: Internals

    func prepareDirectory() throws {
        // The socket path (folder + "/.s.PGSQL.NNNNN") must fit in sockaddr_un (107 bytes).
        guard Self.socketFolderFits(directory.path) else {
            throw EmbeddedPostgresError(
                "the folder path \(directory.path) is too long to hold PostgreSQL's Unix socket (at most \(Self.maximumSocketFolderLength) bytes)",
                fix: "use a shorter folder, for example under /tmp (EmbeddedPostgres.development(at:) moves one itself)")
        }
        let fileManager = FileManager.default
        try fileManager.createDirectory(at: directory, withIntermediateDirectories: true)
        try ProcessRunner.handOver(directory.path)
        if ProcessRunner.isRoot {
            let probe = try ProcessRunner.run("/usr/bin/test", ["-w", directory.path, "-a", "-x", directory.path])
            guard probe.status == 0 else {
                throw EmbeddedPostgresError(
                    "the '\(ProcessRunner.serverAccount)' account cannot use \(directory.path) (PostgreSQL refuses to run as root, so it runs as that account)",
                    fix: "make every parent folder searchable (chmod o+x) or choose a folder under /tmp")
            }
        }
    }

    private func initialize(_ binaries: ServerBinaries) throws {
        let password = options.superuserPassword ?? Self.randomPassword()
        try Data((password + "\n").utf8).write(to: passwordFile, options: .atomic)
        try ProcessRunner.handOver(passwordFile.path)
        chmod(passwordFile.path, 0o600)
        #if os(Linux)
        let locale = "C.UTF-8"
        #else
        let locale = "en_US.UTF-8"
        #endif
        let outcome = try ProcessRunner.run(binaries.initdb, [
            "-D", dataDirectory.path, "-U", Self.superuser, "--encoding=UTF8", "--locale=\(locale)",
            "--auth-local=scram-sha-256", "--auth-host=scram-sha-256", "--pwfile=\(passwordFile.path)", "--no-sync",
        ])
        guard outcome.status == 0 else {
            throw EmbeddedPostgresError("initdb failed in \(dataDirectory.path)", fix: "read the output above", output: outcome.output)
        }
        var settings: [(String, String)] = [
            ("password_encryption", "'scram-sha-256'"),
            ("unix_socket_directories", "'\(directory.path.replacingOccurrences(of: "'", with: "''"))'"),
            ("max_connections", String(options.maxConnections)),
            ("timezone", "'UTC'"),
            ("log_timezone", "'UTC'"),
        ]
        if !options.durable {
            settings += [("fsync", "off"), ("synchronous_commit", "off"), ("full_page_writes", "off")]
        }
        settings += options.settings.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
        let config = "\n# Written by EmbeddedPostgres\n" + settings.map { "\($0.0) = \($0.1)" }.joined(separator: "\n") + "\n"
        let configURL = dataDirectory.appendingPathComponent("postgresql.conf")
        let handle = try FileHandle(forWritingTo: configURL)
        defer { try? handle.close() }
        try handle.seekToEnd()
        try handle.write(contentsOf: Data(config.utf8))
    }

    /// The rules every start enforces, also on a cluster created by an older version (which
    /// trusted local connections and left the folder open): the folder 0700, `pg_hba.conf`
    /// allowing SCRAM only, the password files 0600.
    private func lockDown() throws {
        guard chmod(directory.path, 0o700) == 0 else {
            throw EmbeddedPostgresError("could not make \(directory.path) private (chmod 0700): \(String(cString: strerror(errno)))")
        }
        let password = try superuserPassword()
        let passLine = "*:*:*:\(Self.superuser):" + password.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: ":", with: "\\:") + "\n"
        if (try? String(contentsOf: passFile, encoding: .utf8)) != passLine {
            try Data(passLine.utf8).write(to: passFile, options: .atomic)
        }
        let hba = """
            # Written by EmbeddedPostgres: a password (SCRAM) for every connection; rewritten
            # on every start. The Unix socket's folder is private to the server's account.
            local   all           all                  scram-sha-256
            host    all           all   127.0.0.1/32   scram-sha-256
            host    all           all   ::1/128        scram-sha-256
            local   replication   all                  scram-sha-256
            host    replication   all   127.0.0.1/32   scram-sha-256

            """
        let hbaFile = dataDirectory.appendingPathComponent("pg_hba.conf")
        if (try? String(contentsOf: hbaFile, encoding: .utf8)) != hba {
            try Data(hba.utf8).write(to: hbaFile, options: .atomic)
        }
        for file in [passwordFile, passFile, hbaFile] {
            try ProcessRunner.handOver(file.path)
            chmod(file.path, 0o600)
        }
    }

    /// A random password of 24 letters and digits (none that look alike).
    ///
    /// ```swift
    /// let shared = EmbeddedPostgres.randomPassword()
    /// ```
    public static func randomPassword() -> String {
        let alphabet = Array("abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789")
        var generator = SystemRandomNumberGenerator()
        return String((0..<24).map { _ in alphabet[Int(generator.next(upperBound: UInt(alphabet.count)))] })
    }

    /// A TCP port that is free right now on 127.0.0.1.
    ///
    /// ```swift
    /// let nobodyListens = try EmbeddedPostgres.freePort()
    /// ```
    public static func freePort() throws -> Int {
        let socketFD = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socketFD >= 0 else { throw EmbeddedPostgresError("could not open a socket to find a free port") }
        defer { close(socketFD) }
        guard let port = bindLoopback(socketFD) else { throw EmbeddedPostgresError("could not find a free port") }
        return port
    }

    /// Whether nothing listens on 127.0.0.1 at `port` right now.
    static func isFree(_ port: Int) -> Bool {
        let socketFD = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socketFD >= 0 else { return false }
        defer { close(socketFD) }
        // As PostgreSQL binds: connections of the last run lingering in TIME_WAIT do not make
        // the port busy.
        var reuse: Int32 = 1
        setsockopt(socketFD, SOL_SOCKET, SO_REUSEADDR, &reuse, socklen_t(MemoryLayout<Int32>.size))
        return onLoopback(port: port) { bind(socketFD, $0, $1) } == 0
    }

    /// Calls `body` (`bind` or `connect`) with the address 127.0.0.1:`port` and its length.
    package static func onLoopback(port: Int, _ body: (UnsafePointer<sockaddr>, socklen_t) -> Int32) -> Int32 {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(clamping: port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
    }

    /// Binds `socketFD` to 127.0.0.1 on a port the kernel picks; that port, or nil.
    package static func bindLoopback(_ socketFD: Int32) -> Int? {
        guard onLoopback(port: 0, { bind(socketFD, $0, $1) }) == 0 else { return nil }
        var address = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(socketFD, $0, &length) }
        }
        guard named == 0 else { return nil }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
