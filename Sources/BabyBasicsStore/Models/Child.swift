public import Foundation
public import Postgres

/// A caregiver's role for one child (PRD §7.3): the primary is the account owner, who alone
/// may delete the child, remove caregivers and manage invites.
///
/// ```swift
/// if child.role == .primary { showInviteButton() }
/// ```
public enum CaregiverRole: String, Codable, Sendable, PostgresCodable {
    case primary
    case caregiver
}

/// A child, as seen by one of their caregivers (with that caregiver's role).
///
/// ```swift
/// let child = try await store.children.create(ChildDraft(name: "Zoë", birthDate: birth), as: parentID)
/// print(child.name, child.role)   // Zoë primary
/// ```
public struct Child: Codable, Sendable, Equatable, Identifiable {
    public var id: UUID
    public var name: String
    public var birthDate: PostgresDate
    public var primaryCaregiverID: UUID
    public var settings: ChildSettings
    /// The acting user's role for this child.
    public var role: CaregiverRole
    public var createdAt: Date
    public var updatedAt: Date

    /// The columns that fill a `Child`, for a query joining `children c` and the acting
    /// user's `caregivers me`.
    static let columns: SQL = """
        c.id, c.name, c.birth_date, c.primary_caregiver_id, c.timezone, c.day_start_time, c.settings,
        me.role, c.created_at, c.updated_at
        """

    /// One row of `columns`.
    struct Row: Decodable {
        var id: UUID
        var name: String
        var birthDate: PostgresDate
        var primaryCaregiverId: UUID
        var timezone: String
        var dayStartTime: PostgresTime
        var settings: ChildSettings.Document
        var role: CaregiverRole
        var createdAt: Date
        var updatedAt: Date

        var child: Child {
            Child(
                id: id, name: name, birthDate: birthDate, primaryCaregiverID: primaryCaregiverId,
                settings: ChildSettings(document: settings, timezone: timezone, dayStartTime: dayStartTime),
                role: role, createdAt: createdAt, updatedAt: updatedAt)
        }
    }
}

/// What a new child needs.
///
/// ```swift
/// var draft = ChildDraft(name: "Zoë", birthDate: PostgresDate(year: 2026, month: 3, day: 8))
/// draft.settings.timezone = "America/New_York"
/// ```
public struct ChildDraft: Sendable {
    public var name: String
    public var birthDate: PostgresDate
    public var settings: ChildSettings

    public init(name: String, birthDate: PostgresDate, settings: ChildSettings = ChildSettings()) {
        self.name = name
        self.birthDate = birthDate
        self.settings = settings
    }
}

/// Changes to a child; `nil` leaves a field as it is.
///
/// ```swift
/// var changes = ChildChanges()
/// changes.name = "Zoé"
/// changes.settings = newSettings     // includes time zone and day start
/// ```
public struct ChildChanges: Sendable {
    public var name: String?
    public var birthDate: PostgresDate?
    public var settings: ChildSettings?
    public init(name: String? = nil, birthDate: PostgresDate? = nil, settings: ChildSettings? = nil) {
        self.name = name
        self.birthDate = birthDate
        self.settings = settings
    }
}

/// A caregiver of a child, for the caregivers screen.
///
/// ```swift
/// for caregiver in try await store.caregivers.list(of: childID, as: userID) { print(caregiver.displayName) }
/// ```
public struct Caregiver: Codable, Sendable, Equatable {
    public var userID: UUID
    public var displayName: String
    public var role: CaregiverRole
    public var joinedAt: Date

    enum CodingKeys: String, CodingKey { case userID = "userId", displayName, role, joinedAt }
}

/// An invite code for a child (PRD §7.3).
///
/// ```swift
/// let invite = try await store.invites.create(for: childID, as: primaryID)
/// print(invite.code)   // "K7MX2QPA"
/// ```
public struct Invite: Codable, Sendable, Equatable {
    public var code: String
    public var childID: UUID
    public var createdBy: UUID
    public var createdAt: Date
    public var expiresAt: Date
    public var redeemedBy: UUID?
    public var redeemedAt: Date?

    static let columns: SQL = "i.code, i.child_id, i.created_by, i.created_at, i.expires_at, i.redeemed_by, i.redeemed_at"

    enum CodingKeys: String, CodingKey { case code, childID = "childId", createdBy, createdAt, expiresAt, redeemedBy, redeemedAt }
}
