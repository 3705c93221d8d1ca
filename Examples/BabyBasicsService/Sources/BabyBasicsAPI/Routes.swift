import BabyBasicsStore
import Foundation
import Hummingbird
import NIOCore
import Postgres

/// The routes of the dashboard spec (seed 000) and the quick-log writes, over a `Store`.
///
/// Every route but `GET /health` (liveness: the process answers) and `GET /health/ready`
/// (readiness: the database answers within a second) needs `Authorization: Bearer <token>`;
/// the acting user is the token's, and must exist. Another family's child or event is 404, a
/// primary-only call 403, invalid input 422 naming the field, a body over its limit 413, a busy
/// database (or one that did not answer within the store's deadline) 503 with `Retry-After`
/// (see `ErrorResponses`).
///
/// ```swift
/// let router = BabyBasicsAPI.router(store: store, authority: authority)
/// let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 8080)))
/// ```
public enum BabyBasicsAPI {
    public static func router(
        store: Store, authority: TokenAuthority, exports: ExportLimiter = ExportLimiter(), exportStall: Duration = .seconds(30),
        now: @escaping @Sendable () -> Date = { Date() }
    ) -> Router<APIContext> {
        let router = Router(context: APIContext.self)
        router.add(middleware: ErrorResponses())
        router.get("/health") { _, _ in "ok" }
        router.get("/health/ready") { _, _ in
            do {
                _ = try await PostgresDeadline.within(.seconds(1)) { try await store.pool.fetchValue(Int.self, "SELECT 1") }
                return JSONBody.response(.ok, ["status": "ready"])
            } catch {
                var response = JSONBody.response(.serviceUnavailable, ["status": "not_ready", "message": "the database did not answer within 1 s"])
                response.headers[.retryAfter] = "1"
                return response
            }
        }
        let api = router.group().add(middleware: BearerAuthentication(authority: authority, users: KnownUsers(store: store)))
        let routes = Routes(store: store, exports: exports, exportStall: exportStall, now: now)

        api.get("/children/:childId/dashboard") { _, context in
            let dashboard = try await store.events.dashboard(for: try routes.child(context), now: now(), as: try context.user())
            return JSONBody.response(.ok, DashboardJSON(dashboard: dashboard))
        }
        api.get("/children/:childId/timeline") { request, context in try await routes.timeline(request, context) }

        api.post("/children/:childId/events") { request, context in
            let body = try await JSONBody.decode(NewEventBody.self, from: request)
            let (event, created) = try await FieldNames.translating(FieldNames.event) {
                try await store.events.record(try body.draft(child: try routes.child(context)), as: try context.user())
            }
            return JSONBody.response(created ? .created : .ok, EventJSON(event))
        }
        api.get("/children/:childId/events/:eventId") { _, context in
            JSONBody.response(.ok, EventJSON(try await routes.event(context)))
        }
        api.patch("/children/:childId/events/:eventId") { request, context in
            let patch = try await JSONBody.decode(EventPatch.self, from: request)
            let event = try await routes.event(context)
            do {
                let updated = try await FieldNames.translating(FieldNames.event) {
                    try await routes.events(context).update(event.id, with: try patch.changes(of: event), expectedRevision: patch.expectedRevision, as: try context.user())
                }
                return JSONBody.response(.ok, EventJSON(updated))
            } catch StoreError.conflict(let current) {
                throw APIError.editConflict(current: current, yours: patch)
            }
        }
        api.delete("/children/:childId/events/:eventId") { request, context in
            let event = try await routes.event(context)
            let expected = try routes.revision(request)
            return JSONBody.response(.ok, EventJSON(try await routes.events(context).softDelete(event.id, expectedRevision: expected, as: try context.user())))
        }
        api.post("/children/:childId/events/:eventId/restore") { request, context in
            let event = try await routes.event(context)
            let expected = try routes.revision(request)
            return JSONBody.response(.ok, EventJSON(try await routes.events(context).restore(event.id, expectedRevision: expected, as: try context.user())))
        }

        api.post("/children/:childId/sleep/start") { request, context in
            try await FieldNames.translating(FieldNames.step) {
                let body = try await routes.step(request)
                let sleep = try await store.events.startSleep(for: try routes.child(context), id: body.id ?? UUID(), at: try body.moment(now: now()), notes: body.notes, as: try context.user())
                return JSONBody.response(.created, EventJSON(sleep))
            }
        }
        api.post("/children/:childId/sleep/end") { request, context in
            try await FieldNames.translating(FieldNames.step) {
                let body = try await routes.step(request)
                let ended = try await store.events.endSleep(for: try routes.child(context), at: try body.moment(now: now()), expectedRevision: body.expectedRevision, as: try context.user())
                return JSONBody.response(.ok, StepResult(event: EventJSON(ended.event), summary: ended.summary, minutes: ended.minutes))
            }
        }

        api.post("/children/:childId/bottles") { request, context in
            try await FieldNames.translating(FieldNames.step) {
                let body = try await routes.step(request)
                guard let prepared = body.preparedMl else { throw APIError.invalid(field: "prepared_ml", reason: "is required (mL)") }
                let user = try context.user()
                var bottle = try await store.events.prepareBottle(
                    for: try routes.child(context), id: body.id ?? UUID(), preparedMl: prepared, at: try body.moment(now: now()), notes: body.notes, as: user)
                if body.refrigerated == true { bottle = try await store.events.scoped(to: bottle.childID).setRefrigerated(bottle.id, as: user) }
                return JSONBody.response(.created, EventJSON(bottle))
            }
        }
        api.post("/children/:childId/bottles/:eventId/start") { request, context in
            try await FieldNames.translating(FieldNames.step) {
                let body = try await routes.step(request)
                let bottle = try await routes.event(context)
                let started = try await routes.events(context).startFeeding(bottle.id, at: body.at ?? now(), expectedRevision: body.expectedRevision, as: try context.user())
                return JSONBody.response(.ok, EventJSON(started))
            }
        }
        api.post("/children/:childId/bottles/:eventId/finish") { request, context in
            try await FieldNames.translating(FieldNames.step) {
                let body = try await routes.step(request)
                guard let remaining = body.remainingMl else { throw APIError.invalid(field: "remaining_ml", reason: "is required (mL left in the bottle)") }
                let bottle = try await routes.event(context)
                let finished = try await routes.events(context).finishFeeding(bottle.id, remainingMl: remaining, at: try body.moment(now: now()), expectedRevision: body.expectedRevision, as: try context.user())
                return JSONBody.response(.ok, StepResult(event: EventJSON(finished.event), summary: nil, minutes: nil, consumedMl: finished.consumedMl))
            }
        }
        api.post("/children/:childId/bottles/:eventId/discard") { request, context in
            try await FieldNames.translating(FieldNames.step) {
                let body = try await routes.step(request)
                let bottle = try await routes.event(context)
                let discarded = try await routes.events(context).discard(bottle.id, at: try body.moment(now: now()), expectedRevision: body.expectedRevision, as: try context.user())
                return JSONBody.response(.ok, EventJSON(discarded))
            }
        }

        api.post("/children/:childId/invites") { _, context in
            let invite = try await store.invites.create(for: try routes.child(context), as: try context.user())
            return JSONBody.response(.created, InviteJSON(code: invite.code, expiresAt: invite.expiresAt))
        }

        api.get("/sync") { request, context in
            let token = request.uri.queryParameters.get("cursor")
            let cursor = try token.map { try SyncCursor(validating: $0) } ?? .start
            let limit = try request.uri.queryParameters.get("limit").map { text -> Int in
                guard let value = Int(text), (1...1000).contains(value) else { throw APIError.invalid(field: "limit", reason: "must be a whole number from 1 to 1000") }
                return value
            } ?? 500
            let page = try await store.events.changes(for: try context.user(), after: cursor, limit: limit)
            return JSONBody.response(.ok, SyncPageJSON(page: page))
        }

        api.get("/children/:childId/export.csv") { request, context in try await routes.export(request, context) }
        return router
    }
}

struct StepResult: Encodable {
    var event: EventJSON
    var summary: String?
    var minutes: Int?
    var consumedMl: Double?

    enum CodingKeys: String, CodingKey {
        case event, summary, minutes
        case consumedMl = "consumed_ml"
    }
}

struct InviteJSON: Encodable {
    var code: String
    var expiresAt: Date
    enum CodingKeys: String, CodingKey {
        case code
        case expiresAt = "expires_at"
    }
}

/// The route bodies that take more than a line.
struct Routes: Sendable {
    let store: Store
    let exports: ExportLimiter
    let exportStall: Duration
    let now: @Sendable () -> Date

    /// The `:childId` of the path; a malformed one is a child that does not exist (404).
    func child(_ context: APIContext) throws -> UUID {
        guard let text = context.parameters.get("childId"), let id = UUID(uuidString: text) else { throw StoreError.notFound }
        return id
    }

    /// The `:eventId` of the path, as an event of the path's child the user may see (404 otherwise).
    func event(_ context: APIContext) async throws -> Event {
        guard let text = context.parameters.get("eventId"), let id = UUID(uuidString: text) else { throw StoreError.notFound }
        return try await events(context).get(id, as: try context.user())
    }

    /// The event repository scoped to the path's child: ids are unique per child, so an
    /// event id names an event of this child only.
    func events(_ context: APIContext) throws -> EventRepository {
        store.events.scoped(to: try child(context))
    }

    /// `?expected_revision=N`, if given.
    func revision(_ request: Request) throws -> Int? {
        guard let text = request.uri.queryParameters.get("expected_revision") else { return nil }
        guard let revision = Int(text) else { throw APIError.invalid(field: "expected_revision", reason: "must be a whole number") }
        return revision
    }

    /// A step's body; an empty body means "now, in UTC".
    func step(_ request: Request) async throws -> StepBody {
        let buffer = try await request.body.collect(upTo: 1 << 16)
        guard buffer.readableBytes > 0 else { return StepBody() }
        return try JSONBody.decoder.decode(StepBody.self, from: Data(buffer: buffer))
    }

    /// `?date=today` (the child's day by its time zone and day start) or `?date=2026-11-25`.
    func timeline(_ request: Request, _ context: APIContext) async throws -> Response {
        let user = try context.user()
        let childID = try child(context)
        let asked = request.uri.queryParameters.get("date") ?? "today"
        let day: PostgresDate
        if asked == "today" {
            let child = try await store.children.get(childID, as: user)
            guard let zone = TimeZone(identifier: child.settings.timezone) else { throw APIError.invalid(field: "timezone", reason: "the child's time zone is unknown to this server") }
            day = Self.today(now: now(), zone: zone, dayStart: child.settings.dayStartTime)
        } else {
            guard let parsed = PostgresDate(isoText: asked), parsed.isValid,
                  parsed >= PostgresDate(year: 1900, month: 1, day: 1), parsed <= PostgresDate(year: 9999, month: 12, day: 31) else {
                throw APIError.invalid(field: "date", reason: "must be today or a date from 1900-01-01 to 9999-12-31, such as 2026-11-25")
            }
            day = parsed
        }
        let timeline = try await store.events.timeline(for: childID, day: day, now: now(), as: user)
        return JSONBody.response(.ok, TimelineJSON(timeline: timeline))
    }

    /// The child's day that holds `now`: before the day's start time it is still yesterday.
    static func today(now: Date, zone: TimeZone, dayStart: PostgresTime) -> PostgresDate {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = zone
        let parts = calendar.dateComponents([.hour, .minute, .second], from: now)
        let sinceMidnight = Int64((parts.hour ?? 0) * 3600 + (parts.minute ?? 0) * 60 + (parts.second ?? 0)) * 1_000_000
        let day = sinceMidnight < dayStart.microsecondsSinceMidnight ? now.addingTimeInterval(-86_400) : now
        return PostgresDate(day, in: zone)
    }

    /// The CSV export, streamed as it is read (pages of 500 rows, each a short read of its
    /// own), at the client's pace (`ChunkHandoff`): no database connection or transaction is
    /// held while the client is slow. A client that takes nothing for `exportStall` is cut off;
    /// a user runs at most two at once and the service at most `ExportLimiter.total` (429 and
    /// 503 with `Retry-After` beyond). Membership is checked before the first byte, so a
    /// stranger gets 404, not a broken stream.
    func export(_ request: Request, _ context: APIContext) async throws -> Response {
        let user = try context.user()
        let childID = try child(context)
        let range: ExportRange
        switch request.uri.queryParameters.get("range") ?? "all" {
        case "24h": range = .last24Hours
        case "7d": range = .last7Days
        case "30d": range = .last30Days
        case "all": range = .allTime
        default: throw APIError.invalid(field: "range", reason: "must be 24h, 7d, 30d or all")
        }
        _ = try await store.children.get(childID, as: user)
        let handoff = ChunkHandoff(stall: exportStall)
        let ticket = try await exports.begin(user, handoff)
        let store = self.store
        let exports = self.exports
        let now = self.now()
        let logger = context.logger
        Task {
            do {
                try await store.events.exportCSV(for: childID, range: range, now: now, as: user) { chunk in
                    try await handoff.send(ByteBuffer(string: chunk))
                }
                await handoff.finish(nil)
            } catch is CancellationError {
                await handoff.finish(CancellationError())
            } catch {
                // After the 200 and the first rows: the client sees a cut-off file, the log why.
                logger.warning("CSV export ended early", metadata: ["reason": "\(error)"])
                await handoff.finish(error)
            }
            await exports.end(ticket)
        }
        return Response(
            status: .ok,
            headers: [.contentType: "text/csv; charset=utf-8", .contentDisposition: "attachment; filename=\"babybasics-\(childID).csv\""],
            body: ResponseBody(asyncSequence: HandoffChunks(handoff: handoff)))
    }
}
