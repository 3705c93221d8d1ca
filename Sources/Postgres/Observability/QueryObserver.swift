import Logging
import Metrics
import Tracing

/// Logs, metrics and a span for every statement a connection runs, and its open and close.
///
/// What it records never holds a parameter value (they are families' data): the SQL text with
/// its `$n` placeholders, the number of parameters, the duration, and for an error its SQLSTATE
/// and the names of the constraint, table and column involved (not the server's message, which
/// can quote a value).
///
/// Costs almost nothing when nothing listens: no span is started while the tracer is the
/// no-op tracer, no metric is touched while the metrics backend is the no-op one, and log
/// messages are built only at the level the logger lets through.
final class QueryObserver: Sendable {
    let logger: Logger
    let slowQueryThreshold: Duration?
    let tracer: (any Tracer)?
    let metricsFactory: (any MetricsFactory)?
    private let queryDuration: Metrics.Timer?

    init(configuration: PostgresConfiguration, connectionID: Int) {
        var logger = configuration.logger
        logger[metadataKey: "postgres.connection.id"] = "\(connectionID)"
        self.logger = logger
        slowQueryThreshold = configuration.slowQueryThreshold
        tracer = configuration.activeTracer
        metricsFactory = configuration.activeMetricsFactory
        queryDuration = metricsFactory.map { Metrics.Timer(label: PostgresMetricName.queryDuration, factory: $0) }
    }

    /// Runs `body` (one statement, script, pipeline or COPY) under a span, then logs and
    /// records it.
    func observe<T>(
        _ statement: ObservedStatement, server: ServerIdentity,
        isolation: isolated (any Actor)? = #isolation, _ body: () async throws -> T
    ) async throws -> T {
        let start = ContinuousClock.now
        let span = tracer.map { startSpan($0, statement, server) }
        do {
            let value = try await body()
            finish(statement, start: start, error: nil, span: span)
            return value
        } catch {
            finish(statement, start: start, error: error, span: span)
            throw error
        }
    }

    private func startSpan(_ tracer: any Tracer, _ statement: ObservedStatement, _ server: ServerIdentity) -> any Span {
        let operation = statement.operationName
        let span = tracer.startSpan(operation, ofKind: .client)
        span.updateAttributes { attributes in
            // OpenTelemetry's database conventions (both the stable and the older system name).
            attributes["db.system.name"] = "postgresql"
            attributes["db.system"] = "postgresql"
            attributes["db.namespace"] = server.database
            attributes["db.operation.name"] = operation
            attributes["db.query.text"] = statement.text
            attributes["server.address"] = server.address
            if let port = server.port { attributes["server.port"] = port }
            if statement.batchSize > 1 { attributes["db.operation.batch.size"] = statement.batchSize }
        }
        return span
    }

    private func finish(_ statement: ObservedStatement, start: ContinuousClock.Instant, error: (any Error)?, span: (any Span)?) {
        let duration = start.duration(to: .now)
        queryDuration?.recordNanoseconds(duration.nanoseconds)
        if let error {
            let errorClass = Self.errorClass(error)
            if let metricsFactory {
                Counter(label: PostgresMetricName.errors, dimensions: [("sqlstate_class", errorClass)], factory: metricsFactory).increment()
            }
            if let span {
                let code = (error as? PostgresError)?.sqlState ?? errorClass
                span.updateAttributes { attributes in
                    attributes["db.response.status_code"] = code
                    attributes["error.type"] = code
                }
                span.recordError(RedactedError(error))
                span.setStatus(SpanStatus(code: .error))
            }
            logger.debug("statement failed", metadata: Self.metadata(statement, duration, error: error))
        } else if let slowQueryThreshold, duration >= slowQueryThreshold {
            logger.warning("slow statement", metadata: Self.metadata(statement, duration, error: nil))
        } else {
            logger.debug("statement", metadata: Self.metadata(statement, duration, error: nil))
        }
        span?.end()
    }

    private static func metadata(_ statement: ObservedStatement, _ duration: Duration, error: (any Error)?) -> Logger.Metadata {
        var metadata: Logger.Metadata = [
            "db.query.text": "\(statement.text)",
            "db.query.parameter_count": "\(statement.parameterCount)",
            "duration_ms": "\(duration.milliseconds)",
        ]
        if statement.batchSize > 1 { metadata["db.operation.batch.size"] = "\(statement.batchSize)" }
        if let error {
            metadata["error.class"] = "\(errorClass(error))"
            if let error = error as? PostgresError {
                metadata["error.kind"] = "\(error.kind.rawValue)"
                if let sqlState = error.sqlState { metadata["db.response.status_code"] = "\(sqlState)" }
                // As declared: on Citus the shard's copy, or only the message, names it.
                if let constraint = error.declaredConstraint { metadata["error.constraint"] = "\(constraint)" }
                if let table = error.table { metadata["error.table"] = "\(table)" }
                if let column = error.column { metadata["error.column"] = "\(column)" }
            } else if let error = error as? PostgresDecodingError {
                metadata["error.kind"] = "decoding"
                metadata["error.column"] = "\(error.column)"
            }
        }
        return metadata
    }

    /// The first two characters of the SQLSTATE (`23` integrity, `40` transaction rollback,
    /// `57` operator intervention…); for errors that have none, a word: `08` for a lost or
    /// refused connection, `pool` for a pool timeout, `client` for misuse and values that
    /// cannot be sent, `decoding` for a value that cannot be read.
    static func errorClass(_ error: any Error) -> String {
        guard let error = error as? PostgresError else {
            return error is PostgresDecodingError ? "decoding" : "other"
        }
        if let sqlState = error.sqlState, sqlState.count == 5 { return String(sqlState.prefix(2)) }
        switch error.kind {
        case .connectionFailure, .adminShutdown: return "08"
        case .queryCanceled, .timeout: return "57"
        case .poolTimeout, .poolClosed: return "pool"
        case .invalidConfiguration, .invalidParameter, .misuse: return "client"
        default: return "other"
        }
    }

    // MARK: Connections

    func connected(_ server: ServerIdentity, backendPID: Int32, serverVersion: Int, duration: Duration) {
        logger.info("connected", metadata: [
            "server.address": "\(server.address)", "server.port": "\(server.port.map(String.init) ?? "")",
            "db.namespace": "\(server.database)", "postgres.backend_pid": "\(backendPID)",
            "postgres.server_version": "\(serverVersion)", "duration_ms": "\(duration.milliseconds)",
        ])
    }

    func connectFailed(target: String, error: any Error) {
        metricsFactory.map { Counter(label: PostgresMetricName.errors, dimensions: [("sqlstate_class", Self.errorClass(error))], factory: $0).increment() }
        // The message is libpq's or the server's, already free of the password.
        logger.info("could not connect", metadata: ["postgres.target": "\(target)", "error": "\(error)"])
    }

    func closed(backendPID: Int32) {
        logger.info("connection closed", metadata: ["postgres.backend_pid": "\(backendPID)"])
    }
}

/// What a log record or span says about one statement.
struct ObservedStatement {
    /// The SQL with `$n` placeholders (values are bound, never in the text).
    var text: String
    var parameterCount: Int
    /// Statements sent together (a pipeline); 1 otherwise.
    var batchSize = 1

    /// The first keyword, upper-cased (`SELECT`, `INSERT`, `WITH`, `BEGIN`…), OpenTelemetry's
    /// `db.operation.name`; `BATCH` for a pipeline.
    var operationName: String {
        if batchSize > 1 { return "BATCH" }
        var keyword = ""
        for character in text.unicodeScalars {
            if keyword.isEmpty && (character.properties.isWhitespace || character == "(") { continue }
            guard character.properties.isAlphabetic, keyword.count < 32 else { break }
            keyword.unicodeScalars.append(character)
        }
        return keyword.isEmpty ? "postgresql" : keyword.uppercased()
    }
}

/// Where a connection is, for spans and logs.
struct ServerIdentity: Sendable {
    var address: String
    var port: Int?
    var database: String
}

/// An error recorded on a span: its type and kind, without the message (which may quote a value).
struct RedactedError: Error, CustomStringConvertible {
    let description: String

    init(_ error: any Error) {
        if let error = error as? PostgresError {
            description = "PostgresError.\(error.kind.rawValue)" + (error.sqlState.map { " (SQLSTATE \($0))" } ?? "")
                + (error.constraint.map { " constraint \($0)" } ?? "")
        } else {
            description = String(describing: type(of: error))
        }
    }
}

/// The names of the metrics this library emits (see README, "Operating it").
public enum PostgresMetricName {
    /// Timer: how long each statement (or script, pipeline, COPY) took, from send to last row.
    public static let queryDuration = "postgres.query.duration"
    /// Counter, dimension `sqlstate_class`: failed statements and connection attempts.
    public static let errors = "postgres.errors"
    /// Gauge: the pool's open connections (idle, lent, or being opened).
    public static let poolOpen = "postgres.pool.connections.open"
    /// Gauge: the pool's idle connections.
    public static let poolIdle = "postgres.pool.connections.idle"
    /// Gauge: the pool's connections lent to callers.
    public static let poolLeased = "postgres.pool.connections.leased"
    /// Gauge: callers waiting for a connection.
    public static let poolWaiting = "postgres.pool.waiting"
    /// Timer: how long each acquire took (waiting, connecting, the health check).
    public static let acquireWait = "postgres.pool.acquire.wait"
}

extension Duration {
    var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds.multipliedReportingOverflow(by: 1_000_000_000).partialValue &+ attoseconds / 1_000_000_000
    }

    /// Milliseconds with three decimals, for logs.
    var milliseconds: Double { Double(nanoseconds) / 1_000_000 }
}
