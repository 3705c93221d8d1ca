import Foundation
import Postgres

/// Every way a repository call can be refused, for HTTP handlers to turn into a response.
///
/// A caller who is not a caregiver of a child gets `notFound`, never `forbidden`: other
/// families' children do not exist as far as they can tell. `forbidden` means "you are a
/// caregiver, but this needs the primary role".
///
/// ```swift
/// do {
///     try await store.children.delete(childID, as: userID)
/// } catch StoreError.forbidden(let required) {
///     respond(403, "only the \(required) caregiver can delete a child")
/// } catch StoreError.notFound {
///     respond(404)
/// }
/// ```
public enum StoreError: Error, Sendable, Equatable, CustomStringConvertible {
    /// No such thing, or not yours to see.
    case notFound
    /// A caregiver, but the call needs `required`.
    case forbidden(required: CaregiverRole)
    /// Another account has this email (ignoring case).
    case emailTaken
    /// Another account is linked to this Apple ID.
    case appleAccountTaken
    /// No invite has this code.
    case inviteNotFound
    /// The invite's time ran out.
    case inviteExpired
    /// Someone else already used the invite.
    case inviteUsed
    /// The account is the only caregiver of these children: delete them or add and promote
    /// another caregiver first (PRD §11).
    case soleCaregiver(childIDs: [UUID])
    /// The primary caregiver cannot leave or be removed: transfer the role first.
    case primaryCaregiverCannotLeave
    /// Input that cannot be stored; `field` names it, `reason` says why.
    case invalid(field: String, reason: String)
    /// The request conflicts with the current state (`reason` says how).
    case conflict(reason: String)

    public var description: String {
        switch self {
        case .notFound: "not found"
        case .forbidden(let required): "only the \(required.rawValue) caregiver can do this"
        case .emailTaken: "an account with this email already exists"
        case .appleAccountTaken: "this Apple ID is already linked to another account"
        case .inviteNotFound: "no invite has this code; check it for typos"
        case .inviteExpired: "this invite has expired; ask for a new one"
        case .inviteUsed: "this invite was already used; ask for a new one"
        case .soleCaregiver(let ids): "you are the only caregiver of \(ids.count) child(ren): delete them or hand the primary role to another caregiver first"
        case .primaryCaregiverCannotLeave: "the primary caregiver cannot leave; transfer the primary role first"
        case .invalid(let field, let reason): "\(field): \(reason)"
        case .conflict(let reason): reason
        }
    }

    /// Maps a database error to a domain error, by SQLSTATE and constraint name (never by
    /// message text). Errors with no domain meaning come back unchanged.
    static func map(_ error: PostgresError) -> any Error {
        switch (error.sqlState, error.constraint) {
        case ("23505", "users_email_lower_key"): return StoreError.emailTaken
        case ("23505", "users_apple_user_id_key"): return StoreError.appleAccountTaken
        case ("23514", "users_email_valid"): return StoreError.invalid(field: "email", reason: "is not an email address")
        case ("23514", "users_display_name_not_blank"): return StoreError.invalid(field: "displayName", reason: "must not be blank")
        case ("23514", "children_name_not_blank"): return StoreError.invalid(field: "name", reason: "must not be blank")
        case ("23514", "children_timezone_valid"): return StoreError.invalid(field: "timezone", reason: "is not a time zone the server knows")
        case ("23514", "children_settings_valid"): return StoreError.invalid(field: "settings", reason: "has a value out of range")
        case ("23503", "children_primary_is_caregiver_fkey"): return StoreError.invalid(field: "newPrimaryID", reason: "is not a caregiver of this child")
        case ("23505", "caregivers_pkey"): return StoreError.conflict(reason: "already a caregiver of this child")
        case ("23001", "users_sole_caregiver_of_child"): return StoreError.soleCaregiver(childIDs: [])
        default: return error
        }
    }
}

/// Runs `body`, translating database errors into `StoreError` where they have a domain meaning.
func mappingErrors<T>(isolation: isolated (any Actor)? = #isolation, _ body: () async throws -> T) async throws -> T {
    do {
        return try await body()
    } catch let error as PostgresError {
        throw StoreError.map(error)
    }
}
