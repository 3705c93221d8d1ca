import Foundation
import Postgres

/// The one advisory lock that serializes migration runs on a database.
///
/// Its key comes from the database name and the history table, so two databases on one
/// server never block each other. It is taken by polling `pg_try_advisory_lock` on a
/// dedicated connection: a waiting runner never sits inside a statement, so it can never
/// deadlock with `CREATE INDEX CONCURRENTLY` (which waits for every open transaction).
///
/// ```swift
/// let lock = try await MigrationLock.acquire(on: lockConnection, timeout: .seconds(60)) { print($0) }
/// defer { Task { try? await lock.release() } }
/// ```
public struct MigrationLock: Sendable {
    public let key: Int64
    let connection: PostgresConnection

    static let keySQL: SQL = "SELECT hashtextextended(current_database() || '/bbmigrate.schema_migrations', 0)"

    /// Polls until the lock is ours or `timeout` passes; `log` hears who holds it meanwhile.
    public static func acquire(
        on connection: PostgresConnection, timeout: Duration, log: @Sendable (String) -> Void
    ) async throws -> MigrationLock {
        guard let key = try await connection.fetchValue(Int64.self, keySQL) else {
            throw MigratorError.migrationFailed("could not compute the migration lock key", fix: nil)
        }
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        var lastHolder: Int32?
        while true {
            if try await connection.fetchValue(Bool.self, "SELECT pg_try_advisory_lock(\(key))") == true {
                return MigrationLock(key: key, connection: connection)
            }
            let holder = try await holder(of: key, on: connection)
            if let holder, holder.pid != lastHolder {
                log("waiting for the migration lock, held by server process \(holder.pid)\(holder.description)")
                lastHolder = holder.pid
            }
            if clock.now >= deadline {
                let who = holder.map { "server process \($0.pid)\($0.description)" } ?? "another session"
                throw MigratorError.lockTimeout(
                    "gave up after \(timeout) waiting for the migration lock, held by \(who)",
                    fix: holder.map { "wait for that run to finish; if it is stuck, end it with SELECT pg_terminate_backend(\($0.pid)); or raise --lock-timeout" }
                        ?? "wait for the other run to finish, or raise --lock-timeout")
            }
            try await Task.sleep(for: .milliseconds(200))
        }
    }

    struct Holder {
        var pid: Int32
        var description: String
    }

    static func holder(of key: Int64, on connection: PostgresConnection) async throws -> Holder? {
        let rows = try await connection.query("""
            SELECT l.pid, coalesce(a.application_name, ''), coalesce(a.client_addr::text, 'local'), a.backend_start
            FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
            WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
              AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
              AND ((l.classid::bigint << 32) | l.objid::bigint) = \(key)
            """)
        guard let row = rows.first else { return nil }
        let (pid, application, client, started) = try row.decode((Int32, String, String, Date?).self)
        var details: [String] = []
        if !application.isEmpty { details.append(application) }
        details.append("from \(client)")
        if let started { details.append("connected at \(started.formatted(.iso8601))") }
        return Holder(pid: pid, description: " (" + details.joined(separator: ", ") + ")")
    }

    /// Releases the lock (closing the connection releases it too).
    public func release() async throws {
        _ = try await connection.fetchValue(Bool.self, "SELECT pg_advisory_unlock(\(key))")
    }
}
