public import EmbeddedPostgres
import Foundation
public import Postgres
#if canImport(Glibc)
import Glibc
#endif

/// One throw-away cluster per test process, and a fresh database per test.
///
/// The cluster starts on first use in a new folder under the temporary directory, with
/// durability off. A watchdog process stops it and deletes the folder when the test process
/// exits, even if it crashes. Databases are cloned from templates, which are built once.
///
/// ```swift
/// @Test func storesAUser() async throws {
///     let database = try await TestPostgres.shared.makeDatabase(template: "migrated") { connection in
///         try await connection.executeUnsafeRawSQL(schemaSQL)
///     }
///     let connection = try await database.connect()
///     ...
/// }
/// ```
public actor TestPostgres {
    /// The process-wide instance.
    /// The process-wide instance (its first use applies `BB_TEST_LOG_LEVEL`, see TestLogging).
    public static let shared: TestPostgres = {
        TestLogging.bootstrapped
        return TestPostgres()
    }()

    private var startTask: Task<EmbeddedPostgres, any Error>?
    private var templates: [String: Task<Void, any Error>] = [:]
    private var citusSetups: [String: @Sendable (PostgresConnection) async throws -> Void] = [:]
    private var citusQueue: Task<Void, any Error>?
    private var counter = 0
    private var creations = 0
    private var creationWaiters: [CheckedContinuation<Void, Never>] = []

    /// How many `CREATE DATABASE` statements run at once, at most (see `creatingDatabase`).
    public static let creationLimit = 4

    /// The most `CREATE DATABASE` statements this process has run at once.
    ///
    /// ```swift
    /// #expect(await TestPostgres.shared.peakCreations <= TestPostgres.creationLimit)
    /// ```
    public private(set) var peakCreations = 0

    /// The running cluster (started on first call).
    public func cluster() async throws -> EmbeddedPostgres {
        if let startTask { return try await startTask.value }
        // initdb and pg_ctl block for seconds: keep them off Swift's cooperative threads.
        let task = Task {
            guard let citus = TestCitus.fromEnvironment() else { return try await runOnDedicatedThread { try Self.startCluster() } }
            return try await citus.start()
        }
        startTask = task
        return try await task.value
    }

    static func startCluster(name: String = "bbtest", settings extra: [String: String] = [:], superuserPassword: String? = nil) throws -> EmbeddedPostgres {
        let base = ProcessInfo.processInfo.environment["BB_TEST_TMPDIR"] ?? "/tmp"
        let directory = URL(fileURLWithPath: base).appendingPathComponent("\(name)-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        let settings = ["shared_buffers": "256MB", "max_locks_per_transaction": "256"].merging(extra) { $1 }
        let cluster = EmbeddedPostgres(
            directory: directory,
            options: .init(durable: false, maxConnections: 400, settings: settings, tcp: true, superuserPassword: superuserPassword))
        try cluster.start()
        try startWatchdog(for: cluster)
        // Which server this run tests against, in the test output (make test runs two).
        let binaries = try ServerBinaries.locate()
        let version = (try? ProcessRunner.run(binaries.directory + "/postgres", ["--version"], asServerAccount: false).output)?
            .trimmingCharacters(in: .whitespacesAndNewlines) ?? "PostgreSQL"
        FileHandle.standardError.write(Data("TestPostgres: \(version) from \(binaries.directory), cluster in \(cluster.directory.path)\n".utf8))
        return cluster
    }

    /// A detached shell that waits for this process to end, then stops the cluster and removes it.
    static func startWatchdog(for cluster: EmbeddedPostgres) throws {
        let binaries = try ServerBinaries.locate()
        let quote = { (text: String) in "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'" }
        var stop = "\(quote(binaries.pgCtl)) stop -D \(quote(cluster.dataDirectory.path)) -m immediate -w"
        if ProcessRunner.isRoot { stop = "runuser -u \(ProcessRunner.serverAccount) -- " + stop }
        // BB_TEST_SERVER_LOG_DIR (make test sets it): the server's log is kept there, so a failure
        // the server saw (a FATAL, a crash, a timeout) can still be read after the run.
        var keepLog = ""
        if let logs = ProcessInfo.processInfo.environment["BB_TEST_SERVER_LOG_DIR"], !logs.isEmpty {
            keepLog = "mkdir -p \(quote(logs)) && cp \(quote(cluster.logFile.path)) \(quote(logs + "/\(cluster.directory.lastPathComponent).log")); "
        }
        let script = "while kill -0 \(getpid()) 2>/dev/null; do sleep 0.3; done; \(stop) >/dev/null 2>&1; \(keepLog)rm -rf \(quote(cluster.directory.path))"
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/setsid")
        if !FileManager.default.isExecutableFile(atPath: "/usr/bin/setsid") {
            process.executableURL = URL(fileURLWithPath: "/bin/sh")
            process.arguments = ["-c", script]
        } else {
            process.arguments = ["/bin/sh", "-c", script]
        }
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
    }

    /// Builds template database `name` once per process with `setup`; later calls wait for it.
    public func ensureTemplate(_ name: String, setup: @escaping @Sendable (PostgresConnection) async throws -> Void) async throws {
        if TestCitus.fromEnvironment() != nil {
            // A distributed database cannot be cloned (its shards live on the workers): each
            // database runs the setup itself (see TestCitus).
            citusSetups[name] = setup
            return
        }
        if let existing = templates[name] { return try await existing.value }
        // Recorded before any suspension, so concurrent callers share one build.
        let task = Task {
            let cluster = try await self.cluster()
            try await self.creatingDatabase { try await cluster.createDatabase(name) }
            let connection = try await PostgresConnection.connect(try cluster.connectionString(database: name))
            do {
                try await setup(connection)
                await connection.close()
            } catch {
                await connection.close()
                throw error
            }
        }
        templates[name] = task
        try await task.value
    }

    /// A new, empty database (a copy of `template`, or of `template1`).
    public func makeDatabase(template: String? = nil) async throws -> TestDatabase {
        let cluster = try await cluster()
        counter += 1
        let name = "test_\(counter)_\(UInt16.random(in: 0...UInt16.max))"
        if let citus = TestCitus.fromEnvironment() {
            // One at a time: roles are the whole cluster's, and two databases' migrations
            // creating (or Citus propagating) the same role at once collide on pg_authid.
            let setup = template.flatMap { citusSetups[$0] }
            let previous = citusQueue
            let creation = Task {
                _ = await previous?.result
                try await citus.createDatabase(name, coordinator: cluster, setup: setup)
            }
            citusQueue = creation
            try await creation.value
            return TestDatabase(name: name, connectionString: try cluster.connectionString(database: name), cluster: cluster)
        }
        try await creatingDatabase { try await cluster.createDatabase(name, template: template) }
        return TestDatabase(name: name, connectionString: try cluster.connectionString(database: name), cluster: cluster)
    }

    /// Runs `create` once fewer than `creationLimit` databases are being created; the others
    /// wait their turn here, before their tests start. Each CREATE DATABASE writes a copy of its
    /// template through the WAL: a whole suite started at once (a plain `swift test` runs every
    /// test together) sent some two hundred of them at a time, which kept a 2-core machine's
    /// disk so busy that new connections timed out (45 s) and a hundred tests failed.
    private func creatingDatabase(_ create: () async throws -> Void) async throws {
        while creations >= Self.creationLimit {
            await withCheckedContinuation { creationWaiters.append($0) }
        }
        creations += 1
        peakCreations = max(peakCreations, creations)
        defer {
            creations -= 1
            if !creationWaiters.isEmpty { creationWaiters.removeFirst().resume() }
        }
        try await create()
    }

    /// A new database cloned from template `templateName`, built once with `setup`.
    public func makeDatabase(template templateName: String, setup: @escaping @Sendable (PostgresConnection) async throws -> Void) async throws -> TestDatabase {
        try await ensureTemplate(templateName, setup: setup)
        return try await makeDatabase(template: templateName)
    }
}

/// A database created for one test.
///
/// ```swift
/// let connection = try await database.connect()
/// ```
public struct TestDatabase: Sendable {
    public let name: String
    /// A Unix-socket URL for the superuser.
    public let connectionString: String
    public let cluster: EmbeddedPostgres

    /// Opens a new connection to this database.
    public func connect() async throws -> PostgresConnection {
        try await PostgresConnection.connect(connectionString)
    }

    /// The configuration for this database (for pools).
    public var configuration: PostgresConfiguration { PostgresConfiguration(connectionString) }
}
