public import EmbeddedPostgres
import Foundation
public import Postgres
#if canImport(Glibc)
import Glibc
#endif

/// A primary and its streaming standby, once per test process, for tests of replicas.
///
/// Apart from the shared `TestPostgres` cluster (a base backup copies a whole cluster, and a
/// paused replay stops every database on it), small and quick: durability off, except that
/// commits wait for their WAL to be written, so a standby sees a commit as soon as the primary
/// confirms it. Tests that pause replay must not run at the same time as each other
/// (`.serialized`). Both clusters are stopped and removed when the test process ends.
///
/// ```swift
/// let pair = try await TestReplication.shared.pair()
/// let database = try await TestReplication.shared.makeDatabase(template: "replica_template") { try await migrate($0) }
/// ```
public actor TestReplication {
    public static let shared = TestReplication()

    private var startTask: Task<(primary: EmbeddedPostgres, standby: EmbeddedPostgres), any Error>?
    private var templates: [String: Task<Void, any Error>] = [:]
    private var counter = 0

    /// The running primary and standby (started on first call).
    public func pair() async throws -> (primary: EmbeddedPostgres, standby: EmbeddedPostgres) {
        if let startTask { return try await startTask.value }
        let task = Task { try await runOnDedicatedThread { try Self.startPair() } }
        startTask = task
        return try await task.value
    }

    private static func startPair() throws -> (primary: EmbeddedPostgres, standby: EmbeddedPostgres) {
        let base = ProcessInfo.processInfo.environment["BB_TEST_TMPDIR"] ?? "/tmp"
        let stem = "bbrepl-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let options = EmbeddedPostgres.Options(durable: false, maxConnections: 100, settings: ["synchronous_commit": "on"], tcp: true)
        let primary = EmbeddedPostgres(directory: URL(fileURLWithPath: base).appendingPathComponent(stem + "-p"), options: options)
        try primary.start()
        try TestPostgres.startWatchdog(for: primary)
        let standby = try primary.startStandby(at: URL(fileURLWithPath: base).appendingPathComponent(stem + "-s"))
        try TestPostgres.startWatchdog(for: standby)
        return (primary, standby)
    }

    /// A new database on the primary, cloned from template `templateName` (built once with
    /// `setup`), and waited for on the standby.
    public func makeDatabase(template templateName: String, setup: @escaping @Sendable (PostgresConnection) async throws -> Void) async throws -> (primary: TestDatabase, standby: TestDatabase) {
        let (primary, standby) = try await pair()
        if templates[templateName] == nil {
            templates[templateName] = Task {
                try await primary.createDatabase(templateName)
                let connection = try await PostgresConnection.connect(try primary.connectionString(database: templateName))
                defer { Task { await connection.close() } }
                try await setup(connection)
            }
        }
        try await templates[templateName]?.value
        counter += 1
        let name = "replicated_\(counter)_\(UInt16.random(in: 0...UInt16.max))"
        try await primary.createDatabase(name, template: templateName)
        // The standby has the database once it replayed the primary's present position.
        let admin = try await PostgresConnection.connect(try primary.connectionString(database: name))
        let position = try await admin.fetchValue(String.self, "SELECT pg_current_wal_insert_lsn()::text") ?? "0/0"
        await admin.close()
        let replica = try await PostgresConnection.connect(try standby.connectionString(database: "postgres"))
        defer { Task { await replica.close() } }
        for _ in 0..<600 {
            if try await replica.fetchValue(Bool.self, "SELECT pg_last_wal_replay_lsn() >= \(position)::pg_lsn") == true { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        return (TestDatabase(name: name, connectionString: try primary.connectionString(database: name), cluster: primary),
                TestDatabase(name: name, connectionString: try standby.connectionString(database: name), cluster: standby))
    }
}
