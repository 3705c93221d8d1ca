public import Foundation
import Logging
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
    /// The request does not fit the current state (`reason` says how).
    case stateConflict(reason: String)
    /// Someone changed the event since `expectedRevision` (PRD §7.4 direct edit conflict), or a
    /// retried `log` carries the same id with different content: show both versions.
    case conflict(current: Event)
    /// A sleep is already running for the child; `existing` is it (PRD §12).
    case sleepAlreadyActive(existing: Event)
    /// A bottle feeding is already in progress for the child; `existing` is it (PRD §12).
    case feedingAlreadyActive(existing: Event)
    /// There is no running sleep to end.
    case noActiveSleep
    /// The timer (a sleep, a bottle) was left running for more than a day and cannot end at
    /// the time given: an event lasts at most 24 hours. Ask when it really ended ("when did
    /// the baby wake up?") and end it at that time, at most 24 hours after `startedAt`.
    case timerTooLong(startedAt: EventTimestamp)
    /// The connection to the database was lost after the change was sent and before its
    /// answer came: it may or may not have been saved. Read it back before trying again (a
    /// client retrying with the same event id is safe: logging is idempotent by id).
    case outcomeUnknown(reason: String)

    /// The reason of `invalid(field: "end", …)` when an event would last more than 24 hours.
    static let maxDuration = "an event lasts at most 24 hours"

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
        case .stateConflict(reason: let reason): reason
        case .conflict(let current): "the event changed since you loaded it (now at revision \(current.revision)); review both versions"
        case .sleepAlreadyActive(let existing): "a sleep is already running since \(existing.start.localDescription); end it first"
        case .feedingAlreadyActive(let existing): "a bottle feeding is already in progress since \(existing.start.localDescription); finish it first"
        case .noActiveSleep: "no sleep is running"
        case .timerTooLong(let started): "this timer has been running since \(started.localDescription), more than a day: say when it really ended (at most 24 hours after it started)"
        case .outcomeUnknown(let reason): "the database connection was lost before it confirmed the change, which may or may not have been saved; read it back before trying again (\(reason))"
        }
    }

    /// Maps a database error to a domain error, by SQLSTATE and constraint name (never by
    /// message text). Errors with no domain meaning come back unchanged.
    static func map(_ error: PostgresError) -> any Error {
        switch (error.sqlState, error.declaredConstraint) {
        case ("23505", "users_email_lower_key"): return StoreError.emailTaken
        case ("23505", "users_apple_user_id_key"): return StoreError.appleAccountTaken
        case ("23514", "users_email_valid"): return StoreError.invalid(field: "email", reason: "is not an email address")
        case ("23514", "users_display_name_not_blank"): return StoreError.invalid(field: "displayName", reason: "must not be blank")
        case ("23514", "children_name_not_blank"): return StoreError.invalid(field: "name", reason: "must not be blank")
        case ("23514", "children_timezone_valid"): return StoreError.invalid(field: "timezone", reason: "is not a time zone the server knows")
        case ("23514", "children_settings_valid"): return StoreError.invalid(field: "settings", reason: "has a value out of range")
        case ("23503", "children_primary_is_caregiver_fkey"): return StoreError.invalid(field: "newPrimaryID", reason: "is not a caregiver of this child")
        case ("23505", "caregivers_pkey"): return StoreError.stateConflict(reason: "already a caregiver of this child")
        case ("23001", "users_sole_caregiver_of_child"): return StoreError.soleCaregiver(childIDs: [])
        case ("23514", "events_end_after_start"): return StoreError.invalid(field: "end", reason: "must not be before the start")
        case ("23514", "events_start_from_1900"): return StoreError.invalid(field: "start", reason: "must be in 1900 or later")
        case ("23514", "events_notes_length"): return StoreError.invalid(field: "notes", reason: "must be at most 5000 characters (Unicode scalars)")
        case ("23514", "events_note_category_length"): return StoreError.invalid(field: "category", reason: "must be at most 100 characters (Unicode scalars)")
        case ("23514", "events_max_duration_24h"): return StoreError.invalid(field: "end", reason: StoreError.maxDuration)
        case ("23514", "events_start_tz_valid"): return StoreError.invalid(field: "start.timeZone", reason: "is not a time zone the server knows")
        case ("23514", "events_end_tz_valid"): return StoreError.invalid(field: "end.timeZone", reason: "is not a time zone the server knows")
        case ("23514", "events_bottle_first_sip_within_life"):
            return StoreError.invalid(field: "at", reason: "the first sip must be after the bottle was made (at most 24 hours after) and before it was finished")
        case ("23514", "events_start_offset_matches_zone"):
            return StoreError.invalid(field: "start.offsetSeconds", reason: "is not start.timeZone's UTC offset at that instant")
        case ("23514", "events_end_offset_matches_zone"):
            return StoreError.invalid(field: "end.offsetSeconds", reason: "is not end.timeZone's UTC offset at that instant")
        case ("23514", "events_start_offset_valid"), ("23514", "events_end_offset_valid"):
            return StoreError.invalid(field: "offsetSeconds", reason: "must be within ±18 hours")
        case ("23514", "events_feeding_data_valid"): return StoreError.invalid(field: "payload", reason: "the feeding's amounts or sides are not valid (remaining must be between 0 and the amount prepared)")
        case ("23514", "events_diaper_data_valid"), ("23514", "events_note_data_valid"), ("23514", "events_sleep_data_valid"):
            return StoreError.invalid(field: "payload", reason: "does not fit the event type")
        default: return error
        }
    }
}

extension RetryPolicy {
    /// The store's policy: the wrapper's default (``RetryPolicy``, layer 2: three attempts in
    /// all), each retry logged at `info` through `logger` (kinds and SQLSTATEs only, never
    /// values), after the caller's own `beforeRetry`.
    func loggingRetries(to logger: Logger) -> RetryPolicy {
        var policy = self
        let earlier = beforeRetry
        let attempts = self.attempts
        policy.beforeRetry = { attempt, error in
            logger.info("store call failed safely (nothing was applied); running it again", metadata: [
                "error.kind": "\(error.kind.rawValue)", "db.response.status_code": "\(error.sqlState ?? "")",
                "attempt": "\(attempt)", "attempts": "\(attempts)",
            ])
            await earlier?(attempt, error)
        }
        return policy
    }
}

/// Runs `body`, translating database errors into `StoreError` where they have a domain
/// meaning, after `retryingSafeErrors` has run it again where that is safe.
func mappingErrors<T>(
    _ routing: Routing, retrying: Bool = true, reading: Bool = false, isolation: isolated (any Actor)? = #isolation,
    _ body: () async throws -> T
) async throws -> T {
    do {
        return try await retryingSafeErrors(routing, retrying: retrying, reading: reading, body)
    } catch let error as PostgresError {
        throw StoreError.map(error)
    }
}

/// Runs `body` within the call's deadline, again after an error that guarantees nothing was
/// applied.
///
/// Each store call is one statement or one transaction, so an error whose `retry` is `.safe`
/// (a serialization failure, a deadlock, a lock timeout, a connection lost before anything
/// was applied) runs it again as the store's `RetryPolicy` says (three attempts by default),
/// unless the task was cancelled or the call's deadline (`StoreDeadlines`: `reading` or not)
/// would pass. Every database wait inside ends by that deadline (`PostgresDeadline`).
/// `.outcomeUnknown` is never retried for a write: it becomes `StoreError.outcomeUnknown`. A
/// read changed nothing, so a read whose connection was lost is safe to run again, and never
/// reports an unknown outcome. Other errors come back unchanged. `retrying: false` for calls
/// whose body has effects outside the database.
/// Retries are logged at `info`, an unknown outcome at `warning`, through the pool's logger
/// (kinds and SQLSTATEs only, never values).
func retryingSafeErrors<T>(
    _ routing: Routing, retrying: Bool = true, reading: Bool = false, isolation: isolated (any Actor)? = #isolation,
    _ body: () async throws -> T
) async throws -> T {
    let policy = retrying ? routing.retry : RetryPolicy(attempts: 1)
    do {
        guard let limit = reading ? routing.deadlines.read : routing.deadlines.write else {
            return try await attempts(policy, reading: reading, body)
        }
        return try await PostgresDeadline.within(limit) { try await attempts(policy, reading: reading, body) }
    } catch let error as PostgresError where error.retry == .outcomeUnknown {
        routing.primary.logger.warning("the connection was lost before the database confirmed a change; it may or may not be saved (StoreError.outcomeUnknown)", metadata: [
            "error.kind": "\(error.kind.rawValue)",
        ])
        throw StoreError.outcomeUnknown(reason: error.message)
    }
}

/// `body` under `policy`; for a read, a lost connection is safe to run again (it applied nothing).
private func attempts<T>(
    _ policy: RetryPolicy, reading: Bool, isolation: isolated (any Actor)? = #isolation, _ body: () async throws -> T
) async throws -> T {
    try await policy.run {
        guard reading else { return try await body() }
        do {
            return try await body()
        } catch var error as PostgresError where error.retry == .outcomeUnknown {
            error.lostConnectionOutcome = .safe
            throw error
        }
    }
}
