public import Metrics
import Foundation
public import Logging
public import Tracing

/// Where and how to connect. libpq itself parses every form, exactly as `psql` does.
///
/// - A URL: `postgresql://user:secret@db.example.com:5432/babybasics?sslmode=require`
/// - A conninfo string: `host=/run/postgresql dbname=babybasics`
/// - Nothing: libpq's defaults, `PGHOST`, `PGPORT`, `PGDATABASE`, `PGUSER`, `PGPASSWORD`,
///   `PGSERVICE` (service files), `~/.pgpass`, `PGSSLMODE`, …
///
/// ```swift
/// var config = PostgresConfiguration("postgresql://app@localhost/babybasics")
/// config.connectTimeout = 5
/// let connection = try await PostgresConnection.connect(config)
/// ```
public struct PostgresConfiguration: Sendable {
    /// The URL or conninfo string; `nil` for libpq's environment defaults.
    public var connectionString: String?
    /// Seconds to wait for the connection. `nil` takes `connect_timeout` from the string or
    /// `PGCONNECT_TIMEOUT`, else 10 seconds: a connection attempt never waits forever.
    public var connectTimeout: Int?
    /// How long any statement may run unless the call gives its own deadline; past it the
    /// statement is cancelled on the server and the call throws `.timeout`. `nil`: no limit.
    ///
    /// ```swift
    /// config.queryTimeout = .seconds(5)
    /// ```
    public var queryTimeout: Duration?
    /// TCP keepalives and `tcp_user_timeout`, unless the string sets them: a peer that went
    /// silent (a dropped network path, a frozen host) is noticed within about a minute even on
    /// an idle connection. Unix sockets ignore them.
    public var keepalives = Keepalives()

    /// TCP keepalive settings (libpq's `keepalives_idle`, `keepalives_interval`,
    /// `keepalives_count`, `tcp_user_timeout`).
    ///
    /// ```swift
    /// config.keepalives = .init(idle: .seconds(10), interval: .seconds(5), count: 3, userTimeout: .seconds(20))
    /// ```
    public struct Keepalives: Sendable {
        public var idle: Duration
        public var interval: Duration
        public var count: Int
        /// How long sent data may stay unacknowledged before the connection is dropped (Linux).
        public var userTimeout: Duration

        public init(idle: Duration = .seconds(30), interval: Duration = .seconds(10), count: Int = 3, userTimeout: Duration = .seconds(30)) {
            self.idle = idle
            self.interval = interval
            self.count = count
            self.userTimeout = userTimeout
        }
    }

    /// Seconds until the connect deadline.
    var effectiveConnectTimeout: Int {
        if let connectTimeout { return max(1, connectTimeout) }
        if let value = conninfoValue("connect_timeout").flatMap({ Int($0) }), value > 0 { return value }
        if let value = ProcessInfo.processInfo.environment["PGCONNECT_TIMEOUT"].flatMap({ Int($0) }), value > 0 { return value }
        return 10
    }
    /// Reported in `pg_stat_activity.application_name`. `nil` keeps the string's value.
    public var applicationName: String?
    /// Connects to this database instead of the one the string names (same server, user and
    /// options).
    public var database: String?
    /// How many prepared statements each connection keeps (0 disables the cache, for
    /// PgBouncer in transaction mode).
    public var statementCacheCapacity: Int = 256
    /// What sits between this client and PostgreSQL. The default, ``Pooler/detect``, finds a
    /// pooler when the connection opens; see ``Pooler``.
    ///
    /// ```swift
    /// var config = PostgresConfiguration("postgresql://app@pgbouncer:6432/babybasics")
    /// config.pooler = .transaction
    /// ```
    public var pooler: Pooler = .detect

    /// A connection pooler between the client and the server, and what the connection does
    /// about it.
    ///
    /// Behind a transaction pooler (PgBouncer's `pool_mode = transaction`) each transaction may
    /// run on another server session, so the connection keeps nothing in the session: every
    /// statement is one unnamed Parse/Bind/Describe/Execute/Sync exchange (no statement
    /// cache), nothing is `SET` for the session, and `listen` refuses (notifications would go
    /// to whichever client holds the server session next, or nowhere).
    ///
    /// ```swift
    /// config.pooler = .none   // a direct connection, or a pooler in session mode: keep the cache
    /// ```
    public enum Pooler: Sendable, Hashable {
        /// Find out when the connection opens: a pooler answers with a backend process id
        /// of its own (the cancel key it hands out), which differs from the server's
        /// `pg_backend_pid()`. Found, the connection behaves as for ``transaction`` (the safe
        /// choice; a pooler in session mode should say ``none``). Costs one round trip at
        /// connect.
        case detect
        /// A direct connection, or a pooler in session mode: the session is the client's own.
        case none
        /// A transaction pooler: nothing may rely on the session. ``PostgresConfiguration/serverSettings``
        /// must be empty (PgBouncer refuses startup options); set them on the role instead
        /// (`ALTER ROLE app SET …`).
        case transaction
    }

    /// Server settings sent in the connection's startup packet (libpq's `options`, as
    /// `-c name=value`), so they hold from the first moment of the session and `RESET ALL`
    /// returns to them. They come after any `options` the connection string or `PGOPTIONS`
    /// already gives, and win over them.
    ///
    /// ```swift
    /// config.serverSettings["idle_session_timeout"] = "0"
    /// ```
    public var serverSettings: [String: String] = [:]
    /// Receives server notices (`RAISE NOTICE`, warnings). `nil` drops them.
    public var noticeHandler: (@Sendable (PostgresNotice) -> Void)?

    // MARK: Observability (see README, "Operating it")

    /// Where the connections log. The default, `Logger(label: "postgres")`, goes wherever the
    /// service's `LoggingSystem.bootstrap` sends logs. At `info`: connections opened, closed or
    /// refused. At `debug`: every statement with its SQL text (placeholders, never values),
    /// its parameter count and duration. At `warning`: statements slower than
    /// `slowQueryThreshold`, an exhausted pool, broken connections replaced.
    ///
    /// ```swift
    /// var logger = Logger(label: "db")
    /// logger.logLevel = .debug
    /// config.logger = logger
    /// ```
    public var logger = Logger(label: "postgres")
    /// A statement that takes at least this long is logged at `warning`; `nil` never.
    ///
    /// ```swift
    /// config.slowQueryThreshold = .milliseconds(200)
    /// ```
    public var slowQueryThreshold: Duration? = .seconds(1)
    /// Where metrics go; `nil` (the default) uses `MetricsSystem.factory`, the backend the
    /// service bootstrapped. No metric is recorded while that is the no-op backend.
    ///
    /// ```swift
    /// config.metricsFactory = PrometheusMetricsFactory(registry: registry)
    /// ```
    public var metricsFactory: (any MetricsFactory)?
    /// Where spans go; `nil` (the default) uses `InstrumentationSystem.tracer`. No span is
    /// started while that is the no-op tracer.
    ///
    /// ```swift
    /// config.tracer = myOTelTracer
    /// ```
    public var tracer: (any Tracer)?

    /// The tracer to use, or nil when it is the no-op tracer.
    var activeTracer: (any Tracer)? {
        let tracer = tracer ?? InstrumentationSystem.tracer
        return tracer is NoOpTracer ? nil : tracer
    }

    /// Neither a tracer nor a metrics backend listens (logging is the logger's level).
    var observesNothing: Bool { activeTracer == nil && activeMetricsFactory == nil }

    /// The metrics backend to use, or nil when it is the no-op one.
    var activeMetricsFactory: (any MetricsFactory)? {
        let factory = metricsFactory ?? MetricsSystem.factory
        return factory is NOOPMetricsHandler ? nil : factory
    }

    /// A URL (`postgres://` or `postgresql://`) or a conninfo string.
    public init(_ connectionString: String) {
        self.connectionString = connectionString
    }

    /// libpq's defaults from the environment.
    public static func environment() -> PostgresConfiguration {
        var configuration = PostgresConfiguration("")
        configuration.connectionString = nil
        return configuration
    }

    /// The keyword/value pairs for `PQconnectStartParams` (the first `dbname` is expanded as a
    /// URL or conninfo string, exactly as psql does).
    func connectionParameters() -> ([String], [String]) {
        var keywords: [String] = []
        var values: [String] = []
        func add(_ keyword: String, _ value: String) {
            keywords.append(keyword)
            values.append(value)
        }
        if let string = connectionString, !string.isEmpty { add("dbname", string) }
        add("connect_timeout", String(effectiveConnectTimeout))
        if let applicationName { add("application_name", applicationName) }
        // Only the first dbname is expanded as a URL/conninfo; this one is a plain name.
        if let database { add("dbname", database) }
        add("fallback_application_name", "babybasics")
        add("client_encoding", "UTF8")
        if let options = startupOptions { add("options", options) }
        // Keepalives, unless the string or the environment chose.
        if conninfoValue("keepalives") == nil {
            add("keepalives", "1")
            if conninfoValue("keepalives_idle") == nil { add("keepalives_idle", String(keepalives.idle.components.seconds)) }
            if conninfoValue("keepalives_interval") == nil { add("keepalives_interval", String(keepalives.interval.components.seconds)) }
            if conninfoValue("keepalives_count") == nil { add("keepalives_count", String(keepalives.count)) }
        }
        if conninfoValue("tcp_user_timeout") == nil {
            add("tcp_user_timeout", String(keepalives.userTimeout.components.seconds * 1000))
        }
        return (keywords, values)
    }

    /// What this configuration gives libpq for `keyword`: the value this library adds (a
    /// default connect timeout, keepalives, the client encoding…) or else the connection
    /// string's; nil if neither sets it (libpq's own default or PG* variables then apply).
    ///
    /// ```swift
    /// PostgresConfiguration("postgresql://db/x").connectionParameterValue("connect_timeout")   // "10"
    /// ```
    public func connectionParameterValue(_ keyword: String) -> String? {
        let (keywords, values) = connectionParameters()
        if let index = keywords.lastIndex(of: keyword), keyword != "dbname" { return values[index] }
        return conninfoValue(keyword)
    }

    /// `host db.example.com port 5432 database babybasics`, for messages (never the password).
    var redactedTarget: String {
        let environment = ProcessInfo.processInfo.environment
        let host = conninfoValue("host") ?? conninfoValue("hostaddr") ?? environment["PGHOST"] ?? "the default host"
        let port = conninfoValue("port") ?? environment["PGPORT"] ?? "5432"
        let name = database ?? conninfoValue("dbname") ?? environment["PGDATABASE"] ?? "the default database"
        return "host \(host) port \(port) database \(name)"
    }

    /// libpq's `options` value: the string's (or `PGOPTIONS`') own, then `serverSettings`; nil
    /// when there is nothing to add.
    var startupOptions: String? {
        guard !serverSettings.isEmpty else { return nil }
        let ours = serverSettings.sorted { $0.key < $1.key }.map { "-c " + Self.escapeOption("\($0.key)=\($0.value)") }
        let existing = conninfoValue("options") ?? ProcessInfo.processInfo.environment["PGOPTIONS"] ?? ""
        return ([existing].filter { !$0.isEmpty } + ours).joined(separator: " ")
    }

    /// In libpq's `options`, a space or backslash inside a value is escaped with a backslash.
    static func escapeOption(_ text: String) -> String {
        text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: " ", with: "\\ ")
    }

    /// The value the connection string gives `keyword`, if any.
    func conninfoValue(_ keyword: String) -> String? {
        guard let connectionString, !connectionString.isEmpty, case .success(let options) = Conninfo.parse(connectionString) else { return nil }
        return options.first { $0.keyword == keyword }?.value
    }

    /// The password the string carries, if any, so messages can hide it.
    var secrets: [String] {
        var found: [String] = []
        if let environmentPassword = ProcessInfo.processInfo.environment["PGPASSWORD"], !environmentPassword.isEmpty {
            found.append(environmentPassword)
        }
        guard let connectionString, !connectionString.isEmpty, case .success(let options) = Conninfo.parse(connectionString) else { return found }
        for option in options where option.keyword == "password" {
            guard let password = option.value, !password.isEmpty else { continue }
            found.append(password)
            if let encoded = password.addingPercentEncoding(withAllowedCharacters: .alphanumerics), encoded != password {
                found.append(encoded)
            }
        }
        return found
    }

    /// Validates the string with libpq (no network), so a typo fails before connecting.
    func validate() throws(PostgresError) {
        if pooler == .transaction && !serverSettings.isEmpty {
            throw PostgresError(
                kind: .invalidConfiguration,
                message: "serverSettings (\(serverSettings.keys.sorted().joined(separator: ", "))) cannot be sent through a transaction pooler: PgBouncer refuses startup options, and a SET would reach another client's session. Set them on the role instead (ALTER ROLE app SET name = value), or leave serverSettings empty")
        }
        guard let connectionString, !connectionString.isEmpty else { return }
        let looksLikeURL = connectionString.hasPrefix("postgres://") || connectionString.hasPrefix("postgresql://")
        guard looksLikeURL || connectionString.contains("=") else {
            throw PostgresError(
                kind: .invalidConfiguration,
                message: "the connection string is neither a postgresql:// URL nor key=value settings; example: postgresql://user@localhost:5432/babybasics")
        }
        if case .failure(let failure) = Conninfo.parse(connectionString) {
            throw PostgresError(
                kind: .invalidConfiguration,
                message: "the connection string is invalid: " + Redaction.hideQuoted(Redaction.redact(failure.message, secrets: secrets)).trimmingCharacters(in: .whitespacesAndNewlines))
        }
    }
}

/// A notice or warning the server sent (not an error).
///
/// ```swift
/// config.noticeHandler = { notice in logger.info("\(notice)") }
/// ```
public struct PostgresNotice: Sendable, CustomStringConvertible {
    /// `NOTICE`, `WARNING`, `INFO`, `DEBUG`, `LOG`.
    public var severity: String
    public var sqlState: String
    public var message: String
    public var description: String { "\(severity): \(message)" }
}

enum Redaction {
    /// Replaces every secret in `text` with `********`.
    static func redact(_ text: String, secrets: [String]) -> String {
        secrets.reduce(text) { $0.replacingOccurrences(of: $1, with: "********") }
    }

    /// libpq quotes the fragment of the input it choked on; that fragment may be a password.
    static func hideQuoted(_ text: String) -> String {
        var result = ""
        var inQuote = false
        for character in text {
            if character == "\"" {
                result.append(character)
                if !inQuote { result += "…" }
                inQuote.toggle()
            } else if !inQuote {
                result.append(character)
            }
        }
        return result
    }
}
