import Logging
import Metrics
import Synchronization

/// The pool's gauges, its acquire timer and its own log records (exhaustion, broken
/// connections replaced, shutdown).
///
/// Gauges are published after every change of the pool's counts, and only while a metrics
/// backend listens (the no-op backend costs one check per change).
final class PoolObserver: Sendable {
    struct Counts: Equatable {
        /// Open or being opened.
        var open: Int
        var idle: Int
        var leased: Int
        var waiting: Int
        /// Counted in `open` but neither idle nor lent yet: being opened.
        var opening: Int { max(0, open - idle - leased) }
    }

    private let logger: Logger
    private let maximumConnections: Int
    /// Warnings an overloaded pool repeats (exhausted, timed out) go out at most once per
    /// `reportInterval`, each saying how often it happened meanwhile.
    private let reportInterval: Duration
    private let lastReports = Mutex<[String: (at: ContinuousClock.Instant, suppressed: Int)]>([:])
    private let gauges: (open: Gauge, idle: Gauge, leased: Gauge, waiting: Gauge)?
    private let acquireWait: Metrics.Timer?

    init(configuration: PostgresConfiguration, options: PoolOptions, reportInterval: Duration = .seconds(10)) {
        self.reportInterval = reportInterval
        var logger = configuration.logger
        logger[metadataKey: "postgres.pool"] = "\(options.name)"
        self.logger = logger
        maximumConnections = options.maximumConnections
        if let factory = configuration.activeMetricsFactory {
            let dimensions = [("pool", options.name)]
            gauges = (
                Gauge(label: PostgresMetricName.poolOpen, dimensions: dimensions, factory: factory),
                Gauge(label: PostgresMetricName.poolIdle, dimensions: dimensions, factory: factory),
                Gauge(label: PostgresMetricName.poolLeased, dimensions: dimensions, factory: factory),
                Gauge(label: PostgresMetricName.poolWaiting, dimensions: dimensions, factory: factory))
            acquireWait = Metrics.Timer(label: PostgresMetricName.acquireWait, dimensions: dimensions, factory: factory)
        } else {
            gauges = nil
            acquireWait = nil
        }
    }

    var publishesGauges: Bool { gauges != nil }

    func publish(_ counts: Counts) {
        guard let gauges else { return }
        gauges.open.record(counts.open)
        gauges.idle.record(counts.idle)
        gauges.leased.record(counts.leased)
        gauges.waiting.record(counts.waiting)
    }

    func acquired(after start: ContinuousClock.Instant) {
        acquireWait?.recordNanoseconds(start.duration(to: .now).nanoseconds)
    }

    /// Every connection is lent and the pool is at its maximum: callers now wait. The pool
    /// reports it once until a connection is idle again, and this at most once per
    /// `reportInterval` (an overloaded pool goes idle and exhausted many times a second).
    func exhausted(_ counts: Counts) {
        guard let suppressed = due("exhausted") else { return }
        let why = counts.opening > 0 && counts.leased == 0
            ? "connections are still being opened (the pool is starting or replacing them) and callers wait; if this lasts, check that the server accepts connections quickly"
            : "every connection is lent or being opened and callers wait; raise maximumConnections or look for slow statements"
        logger.warning("connection pool exhausted: \(why)", metadata: [
            "postgres.pool.max": "\(maximumConnections)", "postgres.pool.open": "\(counts.open)",
            "postgres.pool.leased": "\(counts.leased)", "postgres.pool.opening": "\(counts.opening)", "postgres.pool.waiting": "\(counts.waiting)",
            "postgres.pool.times_since_last_report": "\(suppressed + 1)",
        ])
    }

    /// nil while a warning of this kind went out less than `reportInterval` ago (it is
    /// counted); else how many were held back since the last one.
    private func due(_ kind: String) -> Int? {
        let now = ContinuousClock.now
        return lastReports.withLock { reports in
            if let last = reports[kind], last.at.duration(to: now) < reportInterval {
                reports[kind] = (last.at, last.suppressed + 1)
                return nil
            }
            let suppressed = reports[kind]?.suppressed ?? 0
            reports[kind] = (now, 0)
            return suppressed
        }
    }

    func timedOut(_ count: Int) {
        guard let suppressed = due("timedOut") else { return }
        logger.warning("callers gave up waiting for a database connection (acquireTimeout)", metadata: [
            "postgres.pool.max": "\(maximumConnections)", "postgres.pool.timed_out": "\(count)",
            "postgres.pool.times_since_last_report": "\(suppressed + 1)",
        ])
    }

    func replacingBroken(_ connection: PostgresConnection) {
        logger.warning("replacing a broken database connection (the server ended it or the network dropped it)", metadata: [
            "postgres.connection.id": "\(connection.id)",
        ])
    }

    func closingUnusable(_ connection: PostgresConnection) {
        logger.warning("closing a connection that could not be reset or failed its health check; a new one replaces it", metadata: [
            "postgres.connection.id": "\(connection.id)",
        ])
    }

    func failedHealthCheck(_ connection: PostgresConnection) {
        logger.info("an idle connection failed its health check", metadata: ["postgres.connection.id": "\(connection.id)"])
    }

    func droppedBroken(_ count: Int) {
        logger.warning("dropped broken idle connections (the server ended them or the network dropped them)", metadata: [
            "postgres.pool.dropped": "\(count)",
        ])
    }

    func closing(_ counts: Counts, gracePeriod: Duration?) {
        logger.info("connection pool shutting down: no new leases", metadata: [
            "postgres.pool.leased": "\(counts.leased)",
            "postgres.pool.grace_period": "\(gracePeriod.map { "\($0)" } ?? "none")",
        ])
    }

    func forcedClose(_ count: Int) {
        logger.warning("connections still lent at the end of the shutdown grace period were closed; their statements failed", metadata: [
            "postgres.pool.closed_under_borrowers": "\(count)",
        ])
    }

    func closed() {
        logger.info("connection pool closed")
    }
}
