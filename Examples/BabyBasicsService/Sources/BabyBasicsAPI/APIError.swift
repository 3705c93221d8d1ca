import BabyBasicsStore
import Foundation
import Hummingbird
import Logging
import NIOCore
import Postgres

/// What the routes refuse before or besides the store. Every refusal reaches the client as
/// JSON: `{"error": "<code>", "message": "…"}`, plus `field` for 422 and the versions for 409.
///
/// ```swift
/// guard let zone = TimeZone(identifier: body.timeZone) else { throw APIError.invalid(field: "time_zone", reason: "is not an IANA time zone") }
/// ```
public enum APIError: Error, Sendable {
    case unauthorized(String)
    case invalid(field: String, reason: String)
    /// An edit lost to someone else's: both versions go back (409).
    case editConflict(current: Event, yours: EventPatch)
}

/// Turns every error into a response a client can act on (see `APIError`):
///
/// | Error | Status |
/// | --- | --- |
/// | no or bad token | 401 |
/// | another family's child or event (`notFound`) | 404 |
/// | needs the primary caregiver (`forbidden`) | 403 |
/// | invalid input, naming the field | 422 |
/// | a body larger than the route takes | 413 |
/// | too many exports of one user at once | 429 with `Retry-After` |
/// | a conflict (same id, other content; a stale revision; a running sleep) | 409, with the versions |
/// | the database is busy, unreachable or did not answer within the deadline, or a write's outcome is unknown | 503 with `Retry-After` |
struct ErrorResponses: RouterMiddleware {
    typealias Context = APIContext

    func handle(_ request: Request, context: APIContext, next: (Request, APIContext) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as HTTPError {
            throw error // Hummingbird's own (no such route, method not allowed)
        } catch {
            return Self.response(for: error, logger: context.logger)
        }
    }

    static func response(for error: any Error, logger: Logger) -> Response {
        switch error {
        case APIError.unauthorized(let message):
            var response = body(.unauthorized, ["error": "unauthorized", "message": message])
            response.headers[.wwwAuthenticate] = "Bearer"
            return response
        case APIError.invalid(let field, let reason), StoreError.invalid(let field, let reason):
            return body(.unprocessableContent, ["error": "invalid", "field": field, "message": "\(field) \(reason)"])
        case APIError.editConflict(let current, let yours):
            return JSONBody.response(.conflict, EditConflictBody(current: EventJSON(current), yours: yours))
        case is NIOTooManyBytesError:
            return body(.contentTooLarge, ["error": "too_large", "message": "the request body is larger than this route takes (1 MB for an event, 64 kB for a step)"])
        case ExportLimiter.Refusal.tooManyForUser(let limit):
            var response = body(.tooManyRequests, ["error": "too_many_exports", "message": "you are running \(limit) exports already; wait for one to finish"])
            response.headers[.retryAfter] = "10"
            return response
        case ExportLimiter.Refusal.busy:
            var response = body(.serviceUnavailable, ["error": "busy", "message": "too many exports are running, or the service is shutting down; try again shortly"])
            response.headers[.retryAfter] = "10"
            return response
        case let error as DecodingError:
            let (field, reason) = describe(error)
            return body(.unprocessableContent, ["error": "invalid", "field": field, "message": "\(field) \(reason)"])
        case let error as StoreError:
            return store(error)
        case let error as PostgresError where isBusy(error):
            var response = body(.serviceUnavailable, ["error": "busy", "message": "the database is busy or unreachable; try again shortly"])
            response.headers[.retryAfter] = "1"
            return response
        case is CancellationError:
            // The client went away; nobody reads this answer.
            return body(.serviceUnavailable, ["error": "cancelled", "message": "the request was cancelled"])
        default:
            logger.error("request failed", metadata: ["error.type": "\(type(of: error))"])
            return body(.internalServerError, ["error": "internal", "message": "something went wrong on the server; it was logged"])
        }
    }

    private static func store(_ error: StoreError) -> Response {
        switch error {
        case .notFound:
            return body(.notFound, ["error": "not_found", "message": "no such child or event (or not yours to see)"])
        case .forbidden(let required):
            return body(.forbidden, ["error": "forbidden", "message": error.description, "required_role": required.rawValue])
        case .conflict(let current):
            return JSONBody.response(.conflict, ConflictBody(error: "conflict", message: error.description, current: EventJSON(current)))
        case .sleepAlreadyActive(let existing):
            return JSONBody.response(.conflict, ConflictBody(error: "sleep_already_active", message: error.description, current: EventJSON(existing)))
        case .feedingAlreadyActive(let existing):
            return JSONBody.response(.conflict, ConflictBody(error: "feeding_already_active", message: error.description, current: EventJSON(existing)))
        case .timerTooLong:
            return body(.unprocessableContent, ["error": "timer_too_long", "field": "end_time", "message": error.description])
        case .noActiveSleep, .stateConflict, .primaryCaregiverCannotLeave, .soleCaregiver, .emailTaken, .appleAccountTaken, .inviteUsed, .inviteExpired:
            return body(.conflict, ["error": "state_conflict", "message": error.description])
        case .inviteNotFound:
            return body(.notFound, ["error": "invite_not_found", "message": error.description])
        case .outcomeUnknown:
            var response = body(.serviceUnavailable, ["error": "outcome_unknown", "message": "the database may or may not have saved this: read it back before sending it again (a POST of an event with the same id is always safe to repeat)"])
            response.headers[.retryAfter] = "1"
            return response
        case .invalid(let field, let reason):
            return body(.unprocessableContent, ["error": "invalid", "field": field, "message": "\(field) \(reason)"])
        }
    }

    /// The database cannot take the request now: the pool is exhausted or closing, the server
    /// unreachable, restarting or out of connections.
    static func isBusy(_ error: PostgresError) -> Bool {
        switch error.kind {
        case .poolTimeout, .poolClosed, .connectionFailure, .adminShutdown, .timeout,
             .serializationFailure, .deadlockDetected, .lockNotAvailable: return true   // the last three: still so after the store's retries
        default: return error.sqlState?.hasPrefix("53") == true || error.sqlState == "57P03"
        }
    }

    private static func describe(_ error: DecodingError) -> (field: String, reason: String) {
        func path(_ context: DecodingError.Context, _ extra: CodingKey? = nil) -> String {
            let keys = context.codingPath + (extra.map { [$0] } ?? [])
            let names = keys.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }
            return names.isEmpty ? "body" : names.joined(separator: ".").replacingOccurrences(of: ".[", with: "[")
        }
        switch error {
        case .keyNotFound(let key, let context): return (path(context, key), "is required")
        case .valueNotFound(_, let context): return (path(context), "must not be null")
        case .typeMismatch(let type, let context): return (path(context), "must be a \(type)")
        case .dataCorrupted(let context): return (path(context), context.debugDescription.isEmpty ? "is not valid" : context.debugDescription)
        @unknown default: return ("body", "is not valid JSON for this request")
        }
    }

    private static func body(_ status: HTTPResponse.Status, _ fields: [String: String]) -> Response {
        JSONBody.response(status, fields)
    }
}

struct ConflictBody: Encodable {
    var error: String
    var message: String
    var current: EventJSON
}

struct EditConflictBody: Encodable {
    var error = "conflict"
    var message = "someone changed this event since you loaded it; here are both versions"
    var current: EventJSON
    var yours: EventPatch
}
