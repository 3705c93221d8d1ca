import Foundation
public import Postgres

/// Display unit for bottle amounts. Amounts are always stored in mL.
///
/// ```swift
/// settings.unit = .ml
/// ```
public enum VolumeUnit: String, Codable, Sendable, CaseIterable {
    case oz, ml
}

/// A child's settings, with the PRD's defaults (§4.6, §5).
///
/// `timezone` and `dayStartTime` live in their own columns on `children`; the rest is the
/// `settings` jsonb document.
///
/// ```swift
/// var settings = ChildSettings()          // oz, 120 mL bottles, 2 h / 1 h / 24 h expiry
/// settings.unit = .ml
/// settings.timezone = "Europe/London"
/// settings.dayStartTime = PostgresTime(hour: 6, minute: 0)
/// ```
public struct ChildSettings: Codable, Sendable, Equatable {
    /// oz or ml, for display.
    public var unit: VolumeUnit = .oz
    /// The bottle size offered by default, in mL (1 to 500).
    public var defaultBottleMl: Int = 120
    /// Formula expiry windows (PRD §5).
    public var bottleExpiry = BottleExpiry()
    /// Notification toggles (PRD §10).
    public var notifications = Notifications()
    /// IANA time zone that defines the child's "today".
    public var timezone: String = "UTC"
    /// When the child's "today" starts, in `timezone`.
    public var dayStartTime = PostgresTime(hour: 0, minute: 0)

    public init() {}

    /// Expiry windows, in minutes.
    ///
    /// ```swift
    /// settings.bottleExpiry.preparedMinutes = 24 * 60   // refrigerated bottles
    /// ```
    public struct BottleExpiry: Codable, Sendable, Equatable {
        /// Prepared at room temperature, not fed: 2 hours from preparation.
        public var preparedMinutes: Int = 120
        /// Feeding started: 1 hour from the first sip.
        public var feedingMinutes: Int = 60
        /// Refrigerated: 24 hours from preparation.
        public var refrigeratedMinutes: Int = 1440
        public init() {}
    }

    /// Push notification toggles.
    ///
    /// ```swift
    /// settings.notifications.wakeWindow = false
    /// ```
    public struct Notifications: Codable, Sendable, Equatable {
        /// 15 minutes before a bottle expires (default on).
        public var bottleExpiry: Bool = true
        /// Wake-window reminders (default on).
        public var wakeWindow: Bool = true
        public init() {}
    }

    /// The `children.settings` jsonb document (snake_case keys; time zone and day start are columns).
    struct Document: Codable, Sendable {
        var unit: VolumeUnit?
        var defaultBottleMl: Int?
        var bottleExpiry: ExpiryDocument?
        var notifications: NotificationsDocument?

        struct ExpiryDocument: Codable, Sendable {
            var preparedMinutes: Int?
            var feedingMinutes: Int?
            var refrigeratedMinutes: Int?
            enum CodingKeys: String, CodingKey {
                case preparedMinutes = "prepared_minutes", feedingMinutes = "feeding_minutes", refrigeratedMinutes = "refrigerated_minutes"
            }
        }

        struct NotificationsDocument: Codable, Sendable {
            var bottleExpiry: Bool?
            var wakeWindow: Bool?
            enum CodingKeys: String, CodingKey { case bottleExpiry = "bottle_expiry", wakeWindow = "wake_window" }
        }

        enum CodingKeys: String, CodingKey {
            case unit, defaultBottleMl = "default_bottle_ml", bottleExpiry = "bottle_expiry", notifications
        }
    }

    var document: Document {
        Document(
            unit: unit, defaultBottleMl: defaultBottleMl,
            bottleExpiry: .init(preparedMinutes: bottleExpiry.preparedMinutes, feedingMinutes: bottleExpiry.feedingMinutes, refrigeratedMinutes: bottleExpiry.refrigeratedMinutes),
            notifications: .init(bottleExpiry: notifications.bottleExpiry, wakeWindow: notifications.wakeWindow))
    }

    /// Settings from the stored document and columns; missing keys take the defaults.
    init(document: Document, timezone: String, dayStartTime: PostgresTime) {
        unit = document.unit ?? .oz
        defaultBottleMl = document.defaultBottleMl ?? 120
        bottleExpiry.preparedMinutes = document.bottleExpiry?.preparedMinutes ?? 120
        bottleExpiry.feedingMinutes = document.bottleExpiry?.feedingMinutes ?? 60
        bottleExpiry.refrigeratedMinutes = document.bottleExpiry?.refrigeratedMinutes ?? 1440
        notifications.bottleExpiry = document.notifications?.bottleExpiry ?? true
        notifications.wakeWindow = document.notifications?.wakeWindow ?? true
        self.timezone = timezone
        self.dayStartTime = dayStartTime
    }
}
