import CLibPQ
import Foundation

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
    /// Seconds to wait for the connection (libpq's `connect_timeout`; libpq rounds values
    /// below 2 up to 2). `nil` keeps whatever the string or `PGCONNECT_TIMEOUT` says.
    public var connectTimeout: Int?
    /// Reported in `pg_stat_activity.application_name`. `nil` keeps the string's value.
    public var applicationName: String?
    /// Connects to this database instead of the one the string names (same server, user and
    /// options).
    public var database: String?
    /// How many prepared statements each connection keeps (0 disables the cache, for
    /// PgBouncer in transaction mode).
    public var statementCacheCapacity: Int = 256
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
        guard let connectionString, !connectionString.isEmpty else { return nil }
        var error: UnsafeMutablePointer<CChar>?
        guard let options = PQconninfoParse(connectionString, &error) else {
            if let error { PQfreemem(error) }
            return nil
        }
        defer { PQconninfoFree(options) }
        var option = options
        while let name = option.pointee.keyword {
            if String(cString: name) == keyword { return option.pointee.val.map { String(cString: $0) } }
            option += 1
        }
        return nil
    }

    /// The password the string carries, if any, so messages can hide it.
    var secrets: [String] {
        var found: [String] = []
        if let environmentPassword = ProcessInfo.processInfo.environment["PGPASSWORD"], !environmentPassword.isEmpty {
            found.append(environmentPassword)
        }
        guard let connectionString, !connectionString.isEmpty else { return found }
        var error: UnsafeMutablePointer<CChar>?
        if let options = PQconninfoParse(connectionString, &error) {
            defer { PQconninfoFree(options) }
            var option = options
            while let keyword = option.pointee.keyword {
                if String(cString: keyword) == "password", let value = option.pointee.val {
                    let password = String(cString: value)
                    if !password.isEmpty {
                        found.append(password)
                        if let encoded = password.addingPercentEncoding(withAllowedCharacters: .alphanumerics), encoded != password {
                            found.append(encoded)
                        }
                    }
                }
                option += 1
            }
        }
        if let error { PQfreemem(error) }
        return found
    }

    /// Validates the string with libpq (no network), so a typo fails before connecting.
    func validate() throws(PostgresError) {
        guard let connectionString, !connectionString.isEmpty else { return }
        let looksLikeURL = connectionString.hasPrefix("postgres://") || connectionString.hasPrefix("postgresql://")
        guard looksLikeURL || connectionString.contains("=") else {
            throw PostgresError(
                kind: .invalidConfiguration,
                message: "the connection string is neither a postgresql:// URL nor key=value settings; example: postgresql://user@localhost:5432/babybasics")
        }
        var error: UnsafeMutablePointer<CChar>?
        guard let options = PQconninfoParse(connectionString, &error) else {
            let detail = error.map { String(cString: $0) } ?? "unknown error"
            if let error { PQfreemem(error) }
            throw PostgresError(
                kind: .invalidConfiguration,
                message: "the connection string is invalid: " + Redaction.hideQuoted(Redaction.redact(detail, secrets: secrets)).trimmingCharacters(in: .whitespacesAndNewlines))
        }
        PQconninfoFree(options)
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
