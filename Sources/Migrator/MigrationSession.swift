import Foundation
public import Logging
public import Postgres

/// The one server session a bbmigrate run works on, and the migration lock it holds.
///
/// The lock is a session-level advisory lock taken *on this working session*, by polling
/// `pg_try_advisory_lock` (a waiting runner never sits inside a statement, so it cannot deadlock
/// with `CREATE INDEX CONCURRENTLY`, which waits for open transactions). Holding it here rather
/// than on a second, idle connection means:
/// - an idle-session killer (`idle_session_timeout`) cannot take it away mid-run: the session
///   sets that timeout to 0 for itself and is busy anyway;
/// - a run killed mid-statement keeps the lock until the server has rolled its statement back,
///   so the next run cannot start on top of it.
/// After every file the session checks that it still holds the lock and stops if not.
///
/// Between files the session is reset to what a fresh session of the migration user would be
/// (`SET SESSION AUTHORIZATION DEFAULT`, `RESET ALL`, temp tables, cursors, listeners,
/// prepared statements), so nothing one file sets leaks into the next.
///
/// A transaction pooler (PgBouncer with `pool_mode = transaction`) hands each transaction to
/// any server connection, which breaks the lock and no-transaction files. It is detected when
/// the session opens and refused with a one-line fix.
///
/// ```swift
/// let session = try await MigrationSession.open(configuration, target: "the database", detectPooler: true)
/// try await session.acquireLock(timeout: .seconds(60), logger: Logger(label: "bbmigrate"))
/// defer { Task { await session.close() } }
/// ```
public struct MigrationSession: Sendable {
    /// The working connection.
    public let connection: PostgresConnection
    let configuration: PostgresConfiguration
    let target: String
    /// The advisory lock key: from the database name and the history table, so two databases on
    /// one server never block each other.
    public let lockKey: Int64

    static let keySQL: SQL = "SELECT hashtextextended(current_database() || '/bbmigrate.schema_migrations', 0)"

    /// Connects (without a statement cache: nothing here is hot, and unnamed statements are
    /// what a pooler would need), refuses a transaction pooler, and prepares the session.
    public static func open(_ configuration: PostgresConfiguration, target: String, detectPooler: Bool = true) async throws -> MigrationSession {
        var configuration = configuration
        configuration.statementCacheCapacity = 0
        configuration.applicationName = configuration.applicationName ?? "bbmigrate"
        var attempt = 1
        while true {
            let connection: PostgresConnection
            do {
                connection = try await PostgresConnection.connect(configuration)
            } catch let error as PostgresError where Self.endedBeforeItsSettings(error) && attempt < 5 {
                attempt += 1
                continue
            } catch {
                throw MigratorError.classify(error, target: target)
            }
            do {
                try await connection.executeUnsafeRawSQL(prepareSQL)
            } catch let error as PostgresError where Self.endedBeforeItsSettings(error) && attempt < 5 {
                await connection.close()
                attempt += 1
                continue
            } catch {
                await connection.close()
                throw MigratorError.classify(error, target: target)
            }
            return try await finishOpening(connection, configuration: configuration, target: target, detectPooler: detectPooler)
        }
    }

    /// Whether a new session ended before its settings (`idle_session_timeout = 0` among them)
    /// arrived, with nothing done in it: a server with a short `idle_session_timeout` ends a
    /// session whose client was too slow to use it (a busy machine), during the connection's
    /// own start-up or before `prepareSQL`. A fresh one is tried, four times at most. A server
    /// that refuses or cannot be reached is not this: it fails at once.
    static func endedBeforeItsSettings(_ error: PostgresError) -> Bool {
        error.kind == .adminShutdown || (error.kind == .connectionFailure && error.lostConnectionOutcome != nil)
    }

    /// The rest of `open` once the session has its settings.
    private static func finishOpening(_ connection: PostgresConnection, configuration: PostgresConfiguration, target: String, detectPooler: Bool) async throws -> MigrationSession {
        do {
            guard let key = try await connection.fetchValue(Int64.self, keySQL) else {
                throw MigratorError.migrationFailed("could not compute the migration lock key", fix: nil)
            }
            let session = MigrationSession(connection: connection, configuration: configuration, target: target, lockKey: key)
            if detectPooler, try await session.sitsBehindTransactionPooler() {
                throw MigratorError.configuration(
                    "\(target) is reached through a transaction pooler (PgBouncer pool_mode = transaction or statement): two client sessions shared one server session, so bbmigrate's migration lock and no-transaction files would not hold",
                    fix: "point --url (or DATABASE_URL) for bbmigrate at the PostgreSQL server itself, or at a PgBouncer pool in session mode; keep the pooled URL for the app")
            }
            guard await connection.parameterStatus("standard_conforming_strings") == "on" else {
                throw MigratorError.configuration(
                    "\(target) has standard_conforming_strings = off; bbmigrate (like psql) reads '…' strings the standard way",
                    fix: "ALTER DATABASE … SET standard_conforming_strings = on (the default since PostgreSQL 9.1)")
            }
            return session
        } catch {
            await connection.close()
            throw MigratorError.classify(error, target: target)
        }
    }

    /// Session settings of a migration run, sent as the session's first statement (not as
    /// startup options, which PgBouncer refuses): no idle-session killer may end it, and a
    /// killed client's statement stops within a second. Sent again with every reset, in the
    /// same round trip, so the session is never idle without them.
    static let prepareSQL = """
        SELECT set_config('idle_in_transaction_session_timeout', '0', false),
               set_config('client_connection_check_interval', '1000', false),
               set_config('idle_session_timeout', '0', false)
        """

    /// Proof of a transaction pooler: a second client session is given the same server
    /// process as this one (PgBouncer hands out the most recently released server
    /// connection), or this session's server process changes while the other holds its own.
    /// A direct connection or a session pooler never does either.
    func sitsBehindTransactionPooler() async throws -> Bool {
        let pidSQL: SQL = "SELECT pg_backend_pid()"
        guard let first = try await connection.fetchValue(Int32.self, pidSQL) else { return false }
        let configuration = self.configuration
        let connection = self.connection
        // The probe must not hang on a session pooler whose pool is full: it gets 5 seconds,
        // and is abandoned (not awaited) after that.
        let answer: Bool? = await firstOf(timeout: .seconds(5)) {
            let other = try await PostgresConnection.connect(configuration)
            defer { Task { await other.close() } }
            return try await other.transaction { other in
                let second = try await other.fetchValue(Int32.self, pidSQL)
                if second == first { return true }
                let again = try await connection.fetchValue(Int32.self, pidSQL)
                return again != first
            }
        } onError: { error in
            // Statement pooling refuses transaction blocks outright.
            guard let error = error as? PostgresError else { return false }
            return error.message.contains("pooling mode")
        }
        return answer ?? false
    }

    // MARK: The lock

    /// Polls for the migration lock until `timeout`; `logger` hears who holds it meanwhile.
    /// `purpose` names the waiting command in the timeout message ("verify", "up").
    public func acquireLock(timeout: Duration, purpose: String = "up", logger: Logger) async throws {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        var lastHolder: Int32?
        while true {
            if try await connection.fetchValue(Bool.self, "SELECT pg_try_advisory_lock(\(lockKey))") == true { return }
            let holder = try await holder()
            if let holder, holder.pid != lastHolder {
                logger.info("waiting for the migration lock, held by server process \(holder.pid)\(holder.description)")
                lastHolder = holder.pid
            }
            if clock.now >= deadline {
                let who = holder.map { "server process \($0.pid)\($0.description)" } ?? "another session"
                let what = purpose == "up" ? "" : " (another bbmigrate run is migrating \(target); \(purpose) would see its half-done work)"
                throw MigratorError.lockTimeout(
                    "gave up after \(timeout) waiting for the migration lock, held by \(who)\(what)",
                    fix: holder.map { "wait for that run to finish and run \(purpose) again; if it is stuck, end it with SELECT pg_terminate_backend(\($0.pid)); or raise --lock-timeout" }
                        ?? "wait for the other run to finish, or raise --lock-timeout")
            }
            try await Task.sleep(for: .milliseconds(200))
        }
    }

    struct Holder {
        var pid: Int32
        var description: String
    }

    func holder() async throws -> Holder? {
        let rows = try await connection.query("""
            SELECT l.pid, coalesce(a.application_name, ''), coalesce(a.client_addr::text, 'local'), a.backend_start
            FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
            WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
              AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
              AND ((l.classid::bigint << 32) | l.objid::bigint) = \(lockKey)
            """)
        guard let row = rows.first else { return nil }
        let (pid, application, client, started) = try row.decode((Int32, String, String, Date?).self)
        var details: [String] = []
        if !application.isEmpty { details.append(application) }
        details.append("from \(client)")
        if let started { details.append("connected at \(started.formatted(.iso8601))") }
        return Holder(pid: pid, description: " (" + details.joined(separator: ", ") + ")")
    }

    /// Whether this session still holds the lock. False after `pg_advisory_unlock_all()`, or
    /// when a pooler moved the session to another server process.
    func holdsLock() async throws -> Bool {
        try await connection.fetchValue(Bool.self, """
            SELECT EXISTS (SELECT FROM pg_locks
                           WHERE locktype = 'advisory' AND granted AND objsubid = 1 AND pid = pg_backend_pid()
                             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                             AND ((classid::bigint << 32) | objid::bigint) = \(lockKey))
            """) == true
    }

    /// Throws a lock error unless the lock is still held.
    func ensureLockHeld(after what: String) async throws {
        guard try await holdsLock() else {
            throw MigratorError.lockTimeout(
                "the migration lock was lost after \(what) (a statement released it, for example pg_advisory_unlock_all(), or the server session changed); bbmigrate stopped so that no other run can interleave",
                fix: "run bbmigrate up again; what was applied is recorded")
        }
    }

    /// Gives up the lock (closing the session does too).
    public func releaseLock() async {
        _ = try? await connection.fetchValue(Bool.self, "SELECT pg_advisory_unlock(\(lockKey))")
    }

    // MARK: Between files

    /// Back to a fresh session of the migration user: a file's `SET ROLE`, `SET SESSION
    /// AUTHORIZATION`, settings and `search_path`, temp tables, open cursors, `LISTEN`s and
    /// prepared statements end here. The advisory lock stays.
    func resetState() async throws {
        // One round trip: the session is never idle with the database's idle timeouts.
        try await connection.executeUnsafeRawSQL(Self.resetSQL + "; " + Self.prepareSQL)
    }

    static let resetSQL = "SET SESSION AUTHORIZATION DEFAULT; RESET ALL; CLOSE ALL; UNLISTEN *; DISCARD TEMP; DEALLOCATE ALL"

    public func close() async { await connection.close() }
}

/// Runs `body` in its own task and returns its answer, `onError`'s answer if it throws, or nil
/// if neither comes within `timeout` (the task is then cancelled and left to end on its own).
func firstOf<T: Sendable>(
    timeout: Duration, _ body: @escaping @Sendable () async throws -> T, onError: @escaping @Sendable (any Error) -> T?
) async -> T? {
    let once = OnceContinuation<T?>()
    return await withCheckedContinuation { continuation in
        once.set(continuation)
        let work = Task {
            do { once.resume(try await body()) } catch { once.resume(onError(error)) }
        }
        Task {
            try? await Task.sleep(for: timeout)
            work.cancel()
            once.resume(nil)
        }
    }
}

/// A continuation resumed by whichever caller comes first; later calls do nothing.
final class OnceContinuation<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var continuation: CheckedContinuation<Value, Never>?
    /// The first value, when it came before the continuation was set.
    private var pending: [Value] = []
    private var finished = false

    func set(_ continuation: CheckedContinuation<Value, Never>) {
        lock.lock()
        if let value = pending.first {
            lock.unlock()
            continuation.resume(returning: value)
            return
        }
        self.continuation = continuation
        lock.unlock()
    }

    func resume(_ value: Value) {
        lock.lock()
        guard !finished else {
            lock.unlock()
            return
        }
        finished = true
        guard let continuation else {
            pending = [value]
            lock.unlock()
            return
        }
        self.continuation = nil
        lock.unlock()
        continuation.resume(returning: value)
    }
}
