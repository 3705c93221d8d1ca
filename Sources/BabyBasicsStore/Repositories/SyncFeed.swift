import Foundation
import Postgres

/// A position in the change feed: opaque to clients, `"<xid>:<seq>"` on the wire.
///
/// ```swift
/// var cursor = SyncCursor.start
/// let page = try await store.events.changes(for: userID, after: cursor, limit: 500)
/// cursor = page.next
/// ```
public struct SyncCursor: Sendable, Equatable, Hashable, Codable, CustomStringConvertible {
    /// The writing transaction (`xid8`) of the last change seen.
    public var transaction: UInt64
    /// Its sequence number inside that transaction.
    public var sequence: Int64

    public static let start = SyncCursor(transaction: 0, sequence: 0)

    public init(transaction: UInt64, sequence: Int64) {
        self.transaction = transaction
        self.sequence = sequence
    }

    /// Parses `"<xid>:<seq>"`; `nil` for anything else.
    public init?(_ text: String) {
        let parts = text.split(separator: ":")
        guard parts.count == 2, let transaction = UInt64(parts[0]), let sequence = Int64(parts[1]), sequence >= 0 else { return nil }
        self.init(transaction: transaction, sequence: sequence)
    }

    public var description: String { "\(transaction):\(sequence)" }

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

/// One page of the change feed.
///
/// ```swift
/// let page = try await store.events.changes(for: userID, after: cursor)
/// apply(page.events); cursor = page.next
/// ```
public struct ChangePage: Sendable, Equatable {
    /// Inserted, updated and soft-deleted events (tombstones have `deletedAt`), in feed order.
    public var events: [Event]
    /// Where the next page starts (the same cursor when nothing new was committed).
    public var next: SyncCursor
    /// Whether `limit` cut the page (fetch again right away).
    public var hasMore: Bool
}

extension EventRepository {
    /// Changes to the events of all the user's children (or of one child) after `cursor`.
    ///
    /// Only changes of transactions older than the oldest still running one are returned, so
    /// a writer that commits late is delivered late, never skipped; and every change has a
    /// distinct position, so none is delivered twice. Hard deletions (a deleted child, the
    /// 30-day purge) are not in the feed: a client whose cursor is older than 30 days, or that
    /// joins an existing child, fetches that child from `SyncCursor.start`.
    public func changes(for actingUser: UUID, child childID: UUID? = nil, after cursor: SyncCursor, limit: Int = 500) async throws -> ChangePage {
        guard (1...10_000).contains(limit) else { throw StoreError.invalid(field: "limit", reason: "must be between 1 and 10000") }
        let children: SQL = childID.map { "AND child_id = \($0)" } ?? ""
        return try await mappingErrors {
            // One range scan of idx_events_child_change per child (each stops after `limit` rows),
            // merged: the cost follows the page size, not the history. The horizon is read once.
            let rows = try await pool.query("""
                WITH horizon AS (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS xmin),
                mine AS (SELECT child_id FROM caregivers WHERE user_id = \(actingUser) \(children))
                SELECT page.* FROM mine CROSS JOIN horizon
                CROSS JOIN LATERAL (
                    SELECT \(Event.columns), e.change_xid::text AS change_xid, e.change_xid AS position_xid, e.change_seq
                    FROM events e
                    WHERE e.child_id = mine.child_id
                      AND (e.change_xid, e.change_seq) > (\(String(cursor.transaction))::xid8, \(cursor.sequence))
                      AND e.change_xid < horizon.xmin
                    ORDER BY e.change_xid, e.change_seq
                    LIMIT \(limit)
                ) AS page
                ORDER BY page.position_xid, page.change_seq
                LIMIT \(limit)
                """)
            var next = cursor
            var events: [Event] = []
            events.reserveCapacity(rows.count)
            for row in rows {
                events.append(try row.decode(as: Event.Row.self).event())
                guard let transaction = UInt64(try row.decode(String.self, column: "change_xid")) else {
                    throw StoreError.stateConflict(reason: "unreadable change position")
                }
                next = SyncCursor(transaction: transaction, sequence: try row.decode(Int64.self, column: "change_seq"))
            }
            return ChangePage(events: events, next: next, hasMore: rows.count == limit)
        }
    }
}
