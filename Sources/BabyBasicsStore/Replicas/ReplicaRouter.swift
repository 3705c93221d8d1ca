import Foundation
import Logging
import Metrics
import Postgres
import Synchronization

/// How the store uses a streaming replica (PostgreSQL's physical replication) for reads.
///
/// ```swift
/// var options = ReplicaOptions()
/// options.maximumLag = .seconds(2)
/// let store = Store(pool: primary, replica: replica, replicaOptions: options)
/// ```
public struct ReplicaOptions: Sendable {
    /// A replica further behind the primary than this is skipped: reads go to the primary
    /// until it catches up. The lag is measured against the primary's WAL position, sampled
    /// every `healthCheckInterval` (so it is known to within that interval), which also sees a
    /// replica whose WAL receiver went silent.
    public var maximumLag: Duration
    /// How long a read waits for the replica to replay the acting user's last write before
    /// it goes to the primary instead.
    public var readYourWritesWait: Duration
    /// How often the replica's replay position and the primary's WAL position are compared.
    public var healthCheckInterval: Duration
    /// At most this many users' last-write positions are kept; past it, all are folded into
    /// one position every read must see (correct, and more reads wait or go to the primary).
    public var trackedUsers: Int

    public init(maximumLag: Duration = .seconds(5), readYourWritesWait: Duration = .milliseconds(100),
                healthCheckInterval: Duration = .seconds(1), trackedUsers: Int = 100_000) {
        self.maximumLag = maximumLag
        self.readYourWritesWait = readYourWritesWait
        self.healthCheckInterval = healthCheckInterval
        self.trackedUsers = trackedUsers
    }
}

/// A position in the primary's write-ahead log (`pg_lsn`): "a read must see everything up to
/// here". Written as PostgreSQL writes an LSN (`16/B374D848`), so it fits in a cookie or a
/// header between the instances of a service.
///
/// ```swift
/// if let position = store.lastWritePosition(of: userID) { response.headers["BB-Read-After"] = position.description }
/// ```
public struct WALPosition: Sendable, Hashable, Comparable, CustomStringConvertible {
    public let value: UInt64

    public init(_ value: UInt64) { self.value = value }

    /// Parses `16/B374D848`; nil for anything else.
    public init?(_ text: String) {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, (1...8).contains(parts[0].count), (1...8).contains(parts[1].count),
              let high = UInt64(parts[0], radix: 16), let low = UInt64(parts[1], radix: 16) else { return nil }
        value = high << 32 | low
    }

    public var description: String {
        String(value >> 32, radix: 16, uppercase: true) + "/" + String(value & 0xFFFF_FFFF, radix: 16, uppercase: true)
    }

    public static func < (lhs: WALPosition, rhs: WALPosition) -> Bool { lhs.value < rhs.value }
}

/// What the store knows of its replica, for dashboards and tests.
///
/// ```swift
/// let status = await store.replicaStatus()
/// print(status?.usable, status?.lag)
/// ```
public struct ReplicaStatus: Sendable, Equatable {
    /// Reads may go to the replica.
    public var usable: Bool
    /// Why not, when not usable ("down: …", "lagging: …", "not a standby", "not checked yet").
    public var reason: String?
    /// The replay lag as last measured (nil: unknown).
    public var lag: Duration?
    /// The last WAL position the replica was seen to have replayed.
    public var replayedPosition: UInt64
    /// Where reads went since the store started (also the `babybasics.store.reads` counter).
    public var reads: ReadCounts
}

/// How many reads went where, and why.
///
/// ```swift
/// let reads = await store.replicaStatus()?.reads
/// print(reads?.replica, reads?.primaryBecauseBehindUser)
/// ```
public struct ReadCounts: Sendable, Equatable {
    /// On the replica at once.
    public var replica = 0
    /// On the replica after waiting for it to replay the user's last write.
    public var replicaAfterWait = 0
    /// On the primary: the replica was down, lagging or not a standby.
    public var primaryBecauseUnusable = 0
    /// On the primary: the replica had not replayed the user's last write in time.
    public var primaryBecauseBehindUser = 0
    /// On the primary after the read failed on the replica.
    public var primaryAfterReplicaFailed = 0

    public init() {}
}

/// Sends reads to a replica when that cannot show a caregiver less than they wrote, else to
/// the primary.
///
/// Read-your-writes: after each write the store asks the primary for its WAL insert position
/// (`pg_current_wal_insert_lsn()`, at or after the write's commit record) and keeps it for the
/// acting user. A read by that user goes to the replica only once the replica has replayed
/// that position (`pg_last_wal_replay_lsn()`); it waits up to `readYourWritesWait`, polling,
/// then reads from the primary. A replica that is down, not in recovery, or lagging more than
/// `maximumLag` is skipped; each change of state is logged and counted.
final class ReplicaRouter: Sendable {
    let primary: PostgresPool
    let replica: PostgresPool
    let options: ReplicaOptions
    private let state: Mutex<State>
    private let logger: Logger
    private let reads: (replica: Counter, waited: Counter, primaryUnusable: Counter, primaryBehind: Counter, failedOver: Counter)
    private let waitTimer: Metrics.Timer
    private let lagGauge: Gauge

    private struct State {
        /// Per user: the WAL position of their last write and when it was recorded.
        var lastWrite: [UUID: (position: UInt64, at: ContinuousClock.Instant)] = [:]
        /// Every read must see this (users folded when `trackedUsers` was reached).
        var floor: UInt64 = 0
        var replayed: UInt64 = 0
        var usable = false
        var reason: String? = "not checked yet"
        var lag: Duration?
        var checkedAt: ContinuousClock.Instant?
        var checking = false
        /// When a read last found the replica failing: a health check that started earlier
        /// must not mark it usable again.
        var failedAt: ContinuousClock.Instant?
        /// The primary's WAL position over time, to measure the lag.
        var samples: [(at: ContinuousClock.Instant, position: UInt64)] = []
        var counts = ReadCounts()
    }

    init(primary: PostgresPool, replica: PostgresPool, options: ReplicaOptions) {
        self.primary = primary
        self.replica = replica
        self.options = options
        state = Mutex(State())
        logger = primary.logger
        let name = replica.options.name
        // The primary's configured backend, else the one the service bootstrapped.
        let factory = primary.configuration.metricsFactory ?? MetricsSystem.factory
        func counter(_ dimensions: [(String, String)]) -> Counter {
            Counter(label: "babybasics.store.reads", dimensions: dimensions + [("replica", name)], factory: factory)
        }
        reads = (
            counter([("target", "replica")]),
            counter([("target", "replica_after_wait")]),
            counter([("target", "primary"), ("reason", "replica_unusable")]),
            counter([("target", "primary"), ("reason", "replica_behind_user")]),
            counter([("target", "primary"), ("reason", "replica_failed")]))
        let waitLabel = "babybasics.store.read_your_writes_wait"
        waitTimer = Metrics.Timer(label: waitLabel, dimensions: [("replica", name)],
                                  handler: factory.makeTimer(label: waitLabel, dimensions: [("replica", name)]), factory: factory)
        lagGauge = Gauge(label: "babybasics.store.replica_lag_seconds", dimensions: [("replica", name)], factory: factory)
    }

    /// The end of the WAL written so far. `pg_current_wal_insert_lsn()` stands just after a
    /// page header when the last record filled its page or a segment was switched: no record
    /// follows the header yet, and a standby's replay position stops before it. Offsets 24 (a
    /// page's header) and 40 (a segment's first page) within a page of `wal_block_size` can
    /// only mean that (a record ends at least 24 bytes after a header), so they count as the
    /// page's start. Without this an idle primary looked like a replica lagging forever, and a
    /// read waited for bytes that never come.
    static let positionSQL: SQL = """
        SELECT CASE WHEN w.p % w.b IN (24, 40) THEN w.p - w.p % w.b ELSE w.p END
        FROM (SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint AS p, current_setting('wal_block_size')::bigint AS b) AS w
        """

    static let replicaSQL: SQL = "SELECT pg_is_in_recovery(), (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint"
    static let replaySQL: SQL = "SELECT (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint"

    var status: ReplicaStatus {
        state.withLock { ReplicaStatus(usable: $0.usable, reason: $0.reason, lag: $0.lag, replayedPosition: $0.replayed, reads: $0.counts) }
    }

    // MARK: Writes

    /// Records that `user` wrote: their reads must see the primary's present WAL position.
    /// If the primary cannot say, their reads go to the primary for a while.
    func noteWrite(by user: UUID) async {
        let position: UInt64
        do {
            guard let answer = try await primary.fetchValue(Int64.self, Self.positionSQL) else { throw CancellationError() }
            position = UInt64(clamping: answer)
        } catch {
            position = .max
        }
        let now = ContinuousClock.now
        state.withLock { state in
            if state.lastWrite.count >= options.trackedUsers, state.lastWrite[user] == nil {
                // Fold the known positions into the floor; users whose position is unknown
                // stay (their reads go to the primary until it is pruned).
                let highest = state.lastWrite.values.map(\.position).filter { $0 != .max }.max() ?? 0
                state.floor = max(state.floor, highest)
                state.lastWrite = state.lastWrite.filter { $0.value.position == .max }
            }
            let previous = state.lastWrite[user]?.position ?? 0
            state.lastWrite[user] = (max(previous, position), now)
        }
    }

    /// The position `user`'s reads must see (their last write here, or one carried in);
    /// `.max` when unknown (read the primary).
    func position(of user: UUID) -> UInt64? {
        state.withLock { state in state.lastWrite[user]?.position }
    }

    /// `user`'s reads must see `position` too (a write made through another instance).
    func require(_ position: UInt64, for user: UUID) {
        let now = ContinuousClock.now
        state.withLock { state in
            guard position > state.replayed else { return }
            let previous = state.lastWrite[user]?.position ?? 0
            state.lastWrite[user] = (max(previous, position), now)
        }
    }

    // MARK: Reads

    enum Route { case replica, primary }

    /// Where a read by `user` goes now; may wait up to `readYourWritesWait` for replay.
    func route(for user: UUID) async -> Route {
        checkHealthIfDue()
        let (usable, needed, replayed) = state.withLock { state in
            (state.usable, max(state.floor, state.lastWrite[user]?.position ?? 0), state.replayed)
        }
        guard usable else {
            count(\.primaryBecauseUnusable)
            return .primary
        }
        if needed <= replayed {
            count(\.replica)
            return .replica
        }
        guard needed != .max else {
            count(\.primaryBecauseBehindUser)
            return .primary
        }
        let start = ContinuousClock.now
        let deadline = start + options.readYourWritesWait
        while ContinuousClock.now < deadline, !Task.isCancelled {
            let remaining = ContinuousClock.now.duration(to: deadline)
            if let position = try? await replica.fetchValue(Int64.self, Self.replaySQL, timeout: max(remaining, .milliseconds(1))) {
                let now = UInt64(clamping: position)
                state.withLock { $0.replayed = max($0.replayed, now) }
                if now >= needed {
                    waitTimer.recordNanoseconds(start.duration(to: .now).nanoseconds)
                    count(\.replicaAfterWait)
                    return .replica
                }
            } else {
                break
            }
            try? await Task.sleep(for: .milliseconds(2))
        }
        waitTimer.recordNanoseconds(start.duration(to: .now).nanoseconds)
        count(\.primaryBecauseBehindUser)
        return .primary
    }

    /// A read on the replica failed for a reason of the replica's own (lost, unreachable, its
    /// pool closed): it is skipped until the next health check finds it well.
    func replicaFailed(_ error: PostgresError) {
        count(\.primaryAfterReplicaFailed)
        markUnusable("down: \(error.kind.rawValue)")
        state.withLock { $0.checkedAt = .now; $0.failedAt = .now }
    }

    /// Whether a replica read failed for a reason of the replica (so the primary may answer).
    static func isReplicaFailure(_ error: PostgresError) -> Bool {
        switch error.kind {
        case .connectionFailure, .adminShutdown, .poolClosed, .poolTimeout, .timeout: true
        default: error.sqlState == "57P04" || error.sqlState == "57P03" // cannot connect now, database dropped
        }
    }

    private func count(_ field: WritableKeyPath<ReadCounts, Int>) {
        state.withLock { $0.counts[keyPath: field] += 1 }
        switch field {
        case \.replica: reads.replica.increment()
        case \.replicaAfterWait: reads.waited.increment()
        case \.primaryBecauseUnusable: reads.primaryUnusable.increment()
        case \.primaryBecauseBehindUser: reads.primaryBehind.increment()
        default: reads.failedOver.increment()
        }
    }

    // MARK: Health

    /// Starts a health check (in the background) when the last one is older than the interval.
    private func checkHealthIfDue() {
        let start = state.withLock { state -> Bool in
            guard !state.checking else { return false }
            if let checkedAt = state.checkedAt, checkedAt.duration(to: .now) < options.healthCheckInterval { return false }
            state.checking = true
            return true
        }
        if start { Task { await self.checkHealth() } }
    }

    /// Compares the replica's replay position with the primary's WAL position and decides
    /// whether the replica may serve reads. Runs at most once at a time.
    func checkHealth() async {
        let started = ContinuousClock.now
        defer { state.withLock { $0.checking = false; $0.checkedAt = .now } }
        let deadline = max(options.healthCheckInterval, .milliseconds(500))
        let primaryPosition = try? await primary.fetchValue(Int64.self, Self.positionSQL, timeout: deadline)
        let sampledAt = ContinuousClock.now
        let answer: (Bool, Int64?)
        do {
            guard let row = try await replica.query(Self.replicaSQL, timeout: deadline).first else {
                markUnusable("down: no answer")
                return
            }
            answer = try row.decode((Bool, Int64?).self)
        } catch let error as PostgresError {
            markUnusable("down: \(error.kind.rawValue)")
            return
        } catch {
            markUnusable("down: \(error)")
            return
        }
        guard answer.0, let replayedNow = answer.1 else {
            markUnusable(answer.0
                ? "not replaying yet (pg_last_wal_replay_lsn() is NULL: the standby is still starting)"
                : "not a standby (pg_is_in_recovery() is false): it may have been promoted")
            return
        }
        let replayed = UInt64(clamping: replayedNow)
        let now = ContinuousClock.now
        let lag: Duration? = state.withLock { state in
            state.replayed = max(state.replayed, replayed)
            if let primaryPosition {
                state.samples.append((sampledAt, UInt64(clamping: primaryPosition)))
                if state.samples.count > 256 { state.samples.removeFirst(state.samples.count - 256) }
            }
            // Write positions the replica has replayed no longer need remembering, nor ones
            // older than the lag a usable replica may have: it has replayed those (and an
            // unusable one serves nobody). An unknown (.max) or made-up position thus sends
            // its user to the primary for a few seconds, not for good.
            let horizon = (options.maximumLag + options.healthCheckInterval) * 2
            state.lastWrite = state.lastWrite.filter { $0.value.position > state.replayed && $0.value.at.duration(to: now) < horizon }
            // The lag: how long ago the primary was at a position the replica has replayed.
            guard let newest = state.samples.last else { return nil }
            if state.replayed >= newest.position { return .zero }
            if let caughtUp = state.samples.last(where: { $0.position <= state.replayed }) { return caughtUp.at.duration(to: now) }
            return state.samples.first.map { $0.at.duration(to: now) }
        }
        lagGauge.record(lag.map { Double($0.components.seconds) + Double($0.components.attoseconds) / 1e18 } ?? -1)
        if let lag, lag > options.maximumLag {
            markUnusable("lagging: \(lag) behind the primary (maximumLag \(options.maximumLag))", lag: lag)
            return
        }
        let recovered = state.withLock { state -> String? in
            if let failedAt = state.failedAt, failedAt > started { return nil } // a read saw it fail meanwhile
            let was = state.usable ? nil : state.reason
            state.usable = true
            state.reason = nil
            state.lag = lag
            return was
        }
        if let recovered, recovered != "not checked yet" {
            logger.info("replica usable again; reads go to it", metadata: ["replica": "\(replica.options.name)", "was": "\(recovered)"])
        }
    }

    private func markUnusable(_ reason: String, lag: Duration? = nil) {
        let changed = state.withLock { state -> Bool in
            let changed = state.usable || state.reason == "not checked yet"
            state.usable = false
            state.reason = reason
            state.lag = lag
            return changed
        }
        if changed {
            logger.warning("replica skipped; reads go to the primary until it recovers", metadata: ["replica": "\(replica.options.name)", "reason": "\(reason)"])
        }
    }
}

extension Duration {
    var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}
