import Foundation

/// The service's settings, read from the environment and checked before anything starts: a
/// wrong one stops the service with a message naming the variable and what it needs (exit 2),
/// never a silent default.
///
/// | Variable | Default | Meaning |
/// | --- | --- | --- |
/// | `HOST` | `127.0.0.1` | The address to listen on: an IPv4 or IPv6 address, or a host name. |
/// | `PORT` | `8080` | The port, 1–65535 (0: any free port). |
/// | `BB_JWT_SECRET` | — | The HS256 key: at least 32 bytes, at least 10 different characters. |
/// | `BB_JWT_ISSUER` | none | When set, tokens must carry this `iss`. |
/// | `BB_JWT_AUDIENCE` | none | When set, tokens must carry this `aud`. |
/// | `BB_JWT_MAX_LIFETIME` | `2592000` (30 days) | The most seconds a token may be valid for. |
///
/// ```swift
/// let settings = try ServiceSettings(environment: ProcessInfo.processInfo.environment)
/// ```
public struct ServiceSettings: Sendable, Equatable {
    public var host: String
    public var port: Int
    public var secret: String
    public var issuer: String?
    public var audience: String?
    public var maximumTokenLifetime: Duration

    /// What is wrong with a setting, said as the fix.
    public struct Invalid: Error, CustomStringConvertible, Equatable {
        public var variable: String
        public var message: String
        public var description: String { "\(variable) \(message)" }
    }

    /// Reads the settings; `secretRequired: false` leaves an empty secret for the caller to
    /// make up (`bb-service --embedded`).
    public init(environment: [String: String], secretRequired: Bool = true) throws(Invalid) {
        host = environment["HOST"].map { $0.trimmingCharacters(in: .whitespaces) } ?? "127.0.0.1"
        guard Self.isHost(host) else {
            throw Invalid(variable: "HOST", message: "is \"\(host)\": give an IPv4 or IPv6 address (127.0.0.1, 0.0.0.0, ::) or a host name")
        }
        if let text = environment["PORT"] {
            guard let port = Int(text.trimmingCharacters(in: .whitespaces)), (0...65_535).contains(port) else {
                throw Invalid(variable: "PORT", message: "is \"\(text)\": give a port number from 1 to 65535 (0 picks a free one)")
            }
            self.port = port
        } else {
            port = 8080
        }
        secret = environment["BB_JWT_SECRET"] ?? ""
        if secretRequired || !secret.isEmpty {
            if let problem = TokenAuthority.weakness(of: secret) { throw Invalid(variable: "BB_JWT_SECRET", message: problem) }
        }
        issuer = environment["BB_JWT_ISSUER"].flatMap { $0.isEmpty ? nil : $0 }
        audience = environment["BB_JWT_AUDIENCE"].flatMap { $0.isEmpty ? nil : $0 }
        if let text = environment["BB_JWT_MAX_LIFETIME"] {
            guard let seconds = Int(text), seconds > 0, seconds <= 366 * 86_400 else {
                throw Invalid(variable: "BB_JWT_MAX_LIFETIME", message: "is \"\(text)\": give the most seconds a token may be valid for, 1 to 31622400 (a year)")
            }
            maximumTokenLifetime = .seconds(seconds)
        } else {
            maximumTokenLifetime = .seconds(30 * 86_400)
        }
    }

    /// An IPv4 or IPv6 literal, or a host name of letters, digits, hyphens and dots.
    static func isHost(_ text: String) -> Bool {
        guard !text.isEmpty, text.utf8.count <= 253 else { return false }
        var ipv4 = in_addr()
        var ipv6 = in6_addr()
        if inet_pton(AF_INET, text, &ipv4) == 1 || inet_pton(AF_INET6, text, &ipv6) == 1 { return true }
        let labels = text.split(separator: ".", omittingEmptySubsequences: false)
        return labels.allSatisfy { label in
            !label.isEmpty && label.count <= 63 && !label.hasPrefix("-") && !label.hasSuffix("-")
                && label.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") }
        } && !(labels.last?.allSatisfy(\.isNumber) ?? true)
    }
}
