public import Foundation

/// Where a client is in the sync feed: opaque to the client, a short URL-safe token on the wire.
///
/// It holds, for every child the user saw at the last page, the sync stamp
/// it has read up to, plus the database's sync epoch and the user it belongs to. A client
/// stores `page.next.description` after applying a page and sends it back as it is.
///
/// ```swift
/// var cursor = SyncCursor.start
/// let page = try await store.events.changes(for: userID, after: cursor, limit: 500)
/// apply(page); cursor = page.next
/// let token = cursor.description                   // store it, send it back
/// cursor = try SyncCursor(validating: token)       // StoreError.invalid(field: "cursor") if damaged
/// ```
public struct SyncCursor: Sendable, Equatable, Hashable, Codable, CustomStringConvertible {
    /// The epoch of the database the positions come from (`sync_state.epoch`); `nil` at the start.
    public internal(set) var epoch: UUID?
    /// The user the cursor belongs to; `nil` at the start.
    public internal(set) var user: UUID?
    /// Per child: every change with a stamp up to this value has been delivered.
    public internal(set) var positions: [UUID: Int64]
    /// Per child new to the client: the stamp of the child record it was given ahead of its
    /// position (a child's record comes before its rows, so the record is not sent again
    /// when the position passes that stamp). Only entries above the position are kept.
    var recordsAhead: [UUID: Int64] = [:]

    /// Nothing seen yet: the first page delivers every child's whole state.
    public static let start = SyncCursor(epoch: nil, user: nil, positions: [:])

    /// The most children a cursor may name (a token stays a few kilobytes at most).
    static let maximumChildren = 1_000
    private static let version = "2"

    init(epoch: UUID?, user: UUID?, positions: [UUID: Int64], recordsAhead: [UUID: Int64] = [:]) {
        self.epoch = epoch
        self.user = user
        self.positions = positions
        self.recordsAhead = recordsAhead.filter { child, record in positions[child].map { record > $0 } ?? false }
    }

    /// Parses a token; `nil` for anything that is not exactly a token this library wrote.
    public init?(_ token: String) {
        if token == "0" {
            self = .start
            return
        }
        guard token.utf8.count <= 64 * 1024, token.hasPrefix(Self.version + "."),
              let data = Data(base64URL: String(token.dropFirst(2))),
              let payload = String(data: data, encoding: .utf8)
        else { return nil }
        let fields = payload.split(separator: "|", omittingEmptySubsequences: false)
        guard fields.count == 3, let epoch = UUID(uuidString: String(fields[0])),
              let user = UUID(uuidString: String(fields[1]))
        else { return nil }
        var positions: [UUID: Int64] = [:]
        var recordsAhead: [UUID: Int64] = [:]
        if !fields[2].isEmpty {
            // "child:position", or "child:position:record" with record > position.
            for entry in fields[2].split(separator: ",", omittingEmptySubsequences: false) {
                let parts = entry.split(separator: ":", omittingEmptySubsequences: false)
                guard parts.count == 2 || parts.count == 3, let child = UUID(uuidString: String(parts[0])),
                      let position = Int64(parts[1]), position >= 0,
                      positions.updateValue(position, forKey: child) == nil,
                      positions.count <= Self.maximumChildren
                else { return nil }
                if parts.count == 3 {
                    guard let record = Int64(parts[2]), record > position else { return nil }
                    recordsAhead[child] = record
                }
            }
        }
        self.init(epoch: epoch, user: user, positions: positions, recordsAhead: recordsAhead)
    }

    /// Parses a token a client sent, or throws `StoreError.invalid(field: "cursor")`.
    public init(validating token: String) throws {
        guard let cursor = SyncCursor(token) else {
            throw StoreError.invalid(field: "cursor", reason: "is not a sync cursor this server wrote; start again from SyncCursor.start")
        }
        self = cursor
    }

    /// The token: `"0"` at the start, else `"2."` and the URL-safe base64 of the positions.
    public var description: String {
        guard let epoch, let user else { return "0" }
        let entries = positions.sorted { $0.key.uuidString < $1.key.uuidString }
            .map { child, position in
                recordsAhead[child].map { "\(child.uuidString):\(position):\($0)" } ?? "\(child.uuidString):\(position)"
            }
            .joined(separator: ",")
        return Self.version + "." + Data("\(epoch.uuidString)|\(user.uuidString)|\(entries)".utf8).base64URLEncoded()
    }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let cursor = SyncCursor(text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not a sync cursor"))
        }
        self = cursor
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}

extension Data {
    /// RFC 4648 §5 without padding.
    fileprivate func base64URLEncoded() -> String {
        base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    fileprivate init?(base64URL text: String) {
        guard text.utf8.allSatisfy({ $0.isASCIIAlphanumeric || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") }) else { return nil }
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        self.init(base64Encoded: base64)
    }
}

extension UInt8 {
    fileprivate var isASCIIAlphanumeric: Bool {
        (0x30...0x39).contains(self) || (0x41...0x5A).contains(self) || (0x61...0x7A).contains(self)
    }
}
