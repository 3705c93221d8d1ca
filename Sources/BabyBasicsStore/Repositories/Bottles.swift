public import Foundation
import Postgres

/// Where a prepared bottle is in its life (PRD §4.2).
///
/// ```swift
/// if bottle.state == .expired { showDiscardPrompt() }
/// ```
public enum BottleState: String, Sendable, Codable {
    /// Made, not yet fed: expires `preparedMinutes` after preparation (default 2 h).
    case prepared
    /// Being fed: expires `feedingMinutes` after the first sip (default 1 h).
    case feeding
    /// Finished or discarded.
    case finished
    /// Past its expiry without being finished: waste.
    case expired
}

/// A bottle with its state and expiry, computed from the child's settings.
///
/// ```swift
/// for bottle in try await store.events.activeBottles(for: child.id, as: userID) {
///     print(bottle.state, bottle.expiresAt as Any)
/// }
/// ```
public struct BottleStatus: Sendable, Equatable {
    public var event: Event
    public var state: BottleState
    /// When it expires; `nil` once finished.
    public var expiresAt: Date?
    public var preparedMl: Double

    /// The state of a prepared-bottle event at `now`, or `nil` for any other event.
    public static func of(_ event: Event, settings: ChildSettings, now: Date) -> BottleStatus? {
        guard case .feeding(.bottle(_, let prepared?, _, let feedingStartedAt, let refrigerated)) = event.payload else { return nil }
        if event.end != nil {
            return BottleStatus(event: event, state: .finished, expiresAt: nil, preparedMl: prepared)
        }
        // Whichever comes first (PRD §5): the limit from preparation, and, once fed, one hour
        // from the first sip. A first sip at 1 h 55 m does not stretch a 2 h bottle to 2 h 55 m.
        let limit = refrigerated ? settings.bottleExpiry.refrigeratedMinutes : settings.bottleExpiry.preparedMinutes
        var expiry = event.start.utc.addingTimeInterval(TimeInterval(limit * 60))
        if let feedingStartedAt {
            expiry = min(expiry, feedingStartedAt.addingTimeInterval(TimeInterval(settings.bottleExpiry.feedingMinutes * 60)))
        }
        let state: BottleState = now >= expiry ? .expired : (feedingStartedAt == nil ? .prepared : .feeding)
        return BottleStatus(event: event, state: state, expiresAt: expiry, preparedMl: prepared)
    }
}

extension EventRepository {
    /// The child's open bottles (prepared or being fed, not finished, not deleted), oldest
    /// first, each with its state and expiry from the child's settings.
    public func activeBottles(for childID: UUID, now: Date = Date(), as actingUser: UUID) async throws -> [BottleStatus] {
        try await routing.reading(as: actingUser) { pool in
            let rows = try await pool.query("""
                WITH child AS (
                    SELECT c.id, c.timezone, c.day_start_time, c.settings FROM children c
                    WHERE c.id = \(childID) AND \(Authorization.isCaregiver(of: "c.id", for: actingUser))
                )
                SELECT child.timezone AS child_timezone, child.day_start_time AS child_day_start, child.settings AS child_settings, b.*
                FROM child LEFT JOIN LATERAL (
                    SELECT \(Event.columns) FROM events e
                    WHERE e.child_id = child.id AND e.event_type = 'feeding' AND e.end_time IS NULL AND e.deleted_at IS NULL
                      AND e.data ->> 'kind' = 'bottle' AND e.data ? 'amount_prepared_ml'
                    ORDER BY e.start_time
                ) AS b ON true
                """)
            guard let first = rows.first else { throw StoreError.notFound }
            let settings = ChildSettings(
                document: try first.decode(PostgresJSON<ChildSettings.Document>.self, column: "child_settings").value,
                timezone: try first.decode(String.self, column: "child_timezone"),
                dayStartTime: try first.decode(PostgresTime.self, column: "child_day_start"))
            return try rows.filter { row in row.columnIndex("id").map { !row.isNull(at: $0) } ?? false }.compactMap { row in
                BottleStatus.of(try Event.Row(row).event(), settings: settings, now: now)
            }
        }
    }
}
