public import Foundation
public import Postgres

/// Events: what caregivers log twenty times a day.
///
/// Every call authorizes the acting user as a caregiver of the event's child inside its SQL;
/// for anyone else the child and its events do not exist (`notFound`).
///
/// ```swift
/// let now = EventTimestamp(Date(), in: .current)
/// let sleep = try await store.events.startSleep(for: child.id, at: now, as: userID)
/// let ended = try await store.events.endSleep(for: child.id, at: later, as: userID)
/// print(ended.summary)   // "Ended sleep (1h 20m)"
/// ```
public struct EventRepository: Sendable {
    let routing: Routing
    var pool: PostgresPool { routing.primary }
    /// Set by ``scoped(to:)``: calls that name an event by id look for it in this child only.
    var scope: UUID?

    /// The same repository, naming events by id within `child` only: what a route such as
    /// `/children/:childId/events/:eventId` means. Event ids are unique per child (migration
    /// 0022), so a caregiver of two families could otherwise reach the other child's event
    /// that happens to carry the same id. Unscoped, a call picks the one it finds first.
    ///
    /// ```swift
    /// let edited = try await store.events.scoped(to: childID).update(eventID, with: changes, expectedRevision: 3, as: userID)
    /// ```
    public func scoped(to child: UUID) -> EventRepository {
        var copy = self
        copy.scope = child
        return copy
    }

    /// `AND alias.child_id = <scope>` when scoped; nothing otherwise.
    func inScope(_ alias: String) -> SQL {
        scope.map { "AND \(identifier: alias).child_id = \($0)" } ?? ""
    }

    // MARK: Logging

    /// Stores an event, idempotently by the client's id: a retry with the same id and the same
    /// content returns the stored event; the same id with different content is
    /// `conflict(current:)`.
    public func log(_ draft: EventDraft, as actingUser: UUID) async throws -> Event {
        try await record(draft, as: actingUser).event
    }

    /// ``log(_:as:)``, also saying whether this call stored the event (`created`) or found it
    /// stored by an earlier call with the same id and content (a client's retry): an HTTP
    /// handler answers 201 or 200.
    ///
    /// ```swift
    /// let (event, created) = try await store.events.record(draft, as: userID)
    /// return created ? .created : .ok
    /// ```
    public func record(_ draft: EventDraft, as actingUser: UUID) async throws -> (event: Event, created: Bool) {
        try Validate.event(payload: draft.payload, start: draft.start, end: draft.end, notes: draft.notes)
        let insert = Self.recordStatement(draft, as: actingUser)
        for _ in 0..<3 {
            let inserted = try await eventErrors(child: "\(draft.childID)", by: actingUser) { try await pool.query(insert) }
            if let row = inserted.first {
                let event = try Event.Row(row).event()
                await routing.announce([event.childID])
                return (event, true)
            }
            // Nothing stored: not a caregiver, or the child has an event with this id. The
            // INSERT waited for a concurrent one of the same id to commit, so this later
            // statement sees it.
            let rows = try await eventErrors(child: "\(draft.childID)", by: actingUser) { try await pool.query(Self.recordedStatement(draft, as: actingUser)) }
            guard let row = rows.first, try row.decode(CaregiverRole?.self, column: "my_role") != nil else { throw StoreError.notFound }
            // Gone again in between (purged): store it anew.
            guard let idColumn = row.columnIndex("id"), !row.isNull(at: idColumn) else { continue }
            let event = try Event.Row(row).event()
            guard try row.decode(Bool.self, column: "same") else { throw StoreError.conflict(current: event) }
            return (event, false)
        }
        throw StoreError.stateConflict(reason: "the event is being written by another request; retry")
    }

    /// The statement `record(_:as:)` runs first (after validating `draft`): it stores the event
    /// when `actingUser` is a caregiver of its child and the child has no event with its id,
    /// and returns it (`Event.columns`, `same` and `created`, both true); no row otherwise.
    /// Its text is `description`, its values `parameters`: for `EXPLAIN` in psql, or to give
    /// another client the same work.
    ///
    /// One `INSERT … SELECT` about one child, with no CTE: on a Citus cluster the whole of it
    /// goes to the child's node in one round trip and commits there alone (an `INSERT` in a
    /// CTE cannot be routed; it was run apart, its result sent to every node, and each log
    /// became a two-phase commit).
    ///
    /// ```swift
    /// let sql = EventRepository.recordStatement(draft, as: userID)
    /// print(sql.description)   // INSERT INTO events AS e (…) SELECT … FROM caregivers …
    /// ```
    public static func recordStatement(_ draft: EventDraft, as actingUser: UUID) -> SQL {
        // An id is unique per child, and only that (events_pkey (id, child_id), migrations
        // 0022 and 0025): the key decides, so parallel requests cannot get around it. The same
        // id for another child is another event. The child's id is the membership row's, so
        // Citus sees a read and a write of one shard.
        """
        INSERT INTO events AS e (id, child_id, logged_by, updated_by, event_type, start_time, start_tz, start_offset_seconds,
                                 end_time, end_tz, end_offset_seconds, data, notes)
        SELECT \(draft.id), me.child_id, \(actingUser), \(actingUser), \(draft.payload.type),
               \(draft.start.utc), \(draft.start.timeZone), \(draft.start.offsetSeconds),
               \(draft.end?.utc), \(draft.end?.timeZone), \(draft.end?.offsetSeconds), \(EventData(draft.payload)), \(draft.notes)
        FROM caregivers me
        WHERE me.child_id = \(draft.childID) AND me.user_id = \(actingUser)
        ON CONFLICT (child_id, id) DO NOTHING
        RETURNING \(Event.columns), true AS same, true AS created
        """
    }

    /// What `record(_:as:)` reads when ``recordStatement(_:as:)`` stored nothing: the user's
    /// role in the child (`my_role`, NULL for a stranger) and, for a caregiver, the child's
    /// event with the draft's id (`Event.columns`, NULL when there is none), with `same` (its
    /// content is the draft's: a client's retry) and `created` (false).
    ///
    /// ```swift
    /// let answer = try await connection.query(EventRepository.recordedStatement(draft, as: userID))
    /// ```
    public static func recordedStatement(_ draft: EventDraft, as actingUser: UUID) -> SQL {
        """
        WITH me AS (\(Authorization.membership(of: draft.childID, for: actingUser)))
        SELECT (SELECT role FROM me) AS my_role, \(Event.columns),
               (e.event_type = \(draft.payload.type)
                AND e.start_time = \(draft.start.utc) AND e.start_tz = \(draft.start.timeZone) AND e.start_offset_seconds = \(draft.start.offsetSeconds)
                AND e.end_time IS NOT DISTINCT FROM \(draft.end?.utc) AND e.end_tz IS NOT DISTINCT FROM \(draft.end?.timeZone)
                AND e.end_offset_seconds IS NOT DISTINCT FROM \(draft.end?.offsetSeconds)
                AND e.data = \(EventData(draft.payload)) AND e.notes IS NOT DISTINCT FROM \(draft.notes)) AS same,
               false AS created
        FROM (SELECT 1) AS one
        LEFT JOIN events e ON e.id = \(draft.id) AND e.child_id = \(draft.childID) AND EXISTS (SELECT FROM me)
        """
    }

    /// Runs `body`, turning a refused second active sleep or bottle feeding into
    /// `sleepAlreadyActive` / `feedingAlreadyActive` carrying the one that exists.
    /// `child` is the child whose index refused the write, as SQL (an id, or
    /// `childOf(eventID, for: user)`): the winner is always looked up in that child, never elsewhere.
    ///
    /// Every event write goes through here: on success, `actingUser`'s reads must see it
    /// (read-your-writes on a replica).
    func eventErrors<T>(child: SQL, by actingUser: UUID, isolation: isolated (any Actor)? = #isolation, _ body: () async throws -> T) async throws -> T {
        do {
            let result = try await retryingSafeErrors(routing, body)
            if let router = routing.router { await router.noteWrite(by: actingUser) }
            return result
        } catch StoreError.outcomeUnknown(let reason) {
            // It may have committed: the user's reads must not hide it if it did.
            if let router = routing.router { await router.noteWrite(by: actingUser) }
            throw StoreError.outcomeUnknown(reason: reason)
        } catch let error as PostgresError where error.declaredConstraint == "events_one_active_sleep" || error.declaredConstraint == "events_one_bottle_in_progress" {
            let sleep = error.declaredConstraint == "events_one_active_sleep"
            // The refusal was the index's; this read only fetches the winner for the message.
            let filter: SQL = sleep
                ? "e.event_type = 'sleep' AND e.end_time IS NULL AND e.deleted_at IS NULL"
                : "e.event_type = 'feeding' AND e.data ->> 'kind' = 'bottle' AND \(Self.feedingStarted) AND e.end_time IS NULL AND e.deleted_at IS NULL"
            guard let existing = try await pool.query("SELECT \(Event.columns) FROM events e WHERE e.child_id = \(child) AND \(filter) LIMIT 1").first else {
                throw StoreError.map(error)
            }
            let event = try Event.Row(existing).event()
            throw sleep ? StoreError.sleepAlreadyActive(existing: event) : StoreError.feedingAlreadyActive(existing: event)
        } catch let error as PostgresError {
            throw StoreError.map(error)
        }
    }

    /// A bottle's feeding has started: the rule of the partial unique index
    /// `events_one_bottle_in_progress` (a JSON null counts as not started, as the schema's
    /// CHECK reads it), so that the app and the index never disagree.
    static let feedingStarted: SQL = "(e.data ->> 'feeding_started_at') IS NOT NULL"

    /// The child of an event among the children `user` cares for, as a SQL expression. An id
    /// is unique per child only (events_pkey, 0022): another family may use the same one.
    func childOf(_ eventID: UUID, for user: UUID) -> SQL {
        "(SELECT o.child_id FROM events o WHERE o.id = \(eventID) \(inScope("o")) AND \(Authorization.isCaregiver(of: "o.child_id", for: user)) LIMIT 1)"
    }

    /// Decodes `SELECT (…) AS my_role, r.* … LEFT JOIN r`: `notFound` for a non-member, `nil`
    /// when the member's statement matched nothing.
    static func memberEvent(_ rows: PostgresRows) throws -> Event? {
        guard let row = rows.first, try row.decode(CaregiverRole?.self, column: "my_role") != nil else { throw StoreError.notFound }
        guard let idColumn = row.columnIndex("id"), !row.isNull(at: idColumn) else { return nil }
        return try Event.Row(row).event()
    }

    /// `AND e.revision = N` when the caller said which version it saw; nothing otherwise.
    static func revision(_ expected: Int?) -> SQL {
        expected.map { "AND e.revision = \($0)" } ?? ""
    }

    /// `conflict(current:)` when `current` is no longer at the version the caller saw.
    static func ensure(_ current: Event, isAt expected: Int?) throws {
        if let expected, current.revision != expected { throw StoreError.conflict(current: current) }
    }

    /// After a change that was not applied: `conflict(current:)` when the event is no longer
    /// at the version the caller saw (one read, only when the caller gave a revision).
    func conflictIfChanged(_ eventID: UUID, expected: Int?, as actingUser: UUID) async throws {
        guard expected != nil else { return }
        try Self.ensure(try await stored(eventID, as: actingUser), isAt: expected)
    }

    /// A child's running sleep (`e`), as a SQL condition: `events_one_active_sleep`'s rule.
    static func runningSleep(of childID: UUID) -> SQL {
        "e.child_id = \(childID) AND e.event_type = 'sleep' AND e.end_time IS NULL AND e.deleted_at IS NULL"
    }

    /// Runs an UPDATE that ends the timer `timer` (a condition on `e`); the database's 24-hour
    /// limit refusing it becomes `timerTooLong(startedAt:)` with the timer's start, so the
    /// caller can ask when it really ended.
    func timerEnding<T>(_ timer: SQL, isolation: isolated (any Actor)? = #isolation, _ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch StoreError.invalid(field: "end", reason: let reason) where reason == StoreError.maxDuration {
            let rows = try await mappingErrors(routing) { try await pool.query("SELECT \(Event.columns) FROM events e WHERE \(timer)") }
            guard let row = rows.first else { throw StoreError.invalid(field: "end", reason: reason) }
            throw StoreError.timerTooLong(startedAt: try Event.Row(row).event().start)
        }
    }

    /// The running sleep of a child, if any (the caller's membership was checked already).
    private func activeSleepID(of childID: UUID) async throws -> UUID? {
        try await mappingErrors(routing) {
            try await pool.query("SELECT e.id FROM events e WHERE \(Self.runningSleep(of: childID))").first?.decode(UUID.self, at: 0)
        }
    }

    // MARK: Sleep

    /// Starts a sleep. If one is already running, `sleepAlreadyActive(existing:)`: the partial
    /// unique index decides, so of many simultaneous taps exactly one wins.
    public func startSleep(for childID: UUID, id: UUID? = nil, at start: EventTimestamp, notes: String? = nil, as actingUser: UUID) async throws -> Event {
        try await log(EventDraft(id: id, childID: childID, payload: .sleep, start: start, notes: notes), as: actingUser)
    }

    /// Ends the running sleep; the result carries its duration ("Ended sleep (1h 20m)"). With
    /// `expectedRevision`, only the version of the sleep the caller saw: if someone changed it
    /// since, `conflict(current:)` with theirs.
    public func endSleep(for childID: UUID, at end: EventTimestamp, expectedRevision: Int? = nil, as actingUser: UUID) async throws -> EndedSleep {
        try Validate.timestamp(end, field: "end")
        let rows = try await timerEnding(Self.runningSleep(of: childID)) {
          try await eventErrors(child: "\(childID)", by: actingUser) {
            try await pool.query("""
                WITH me AS (\(Authorization.membership(of: childID, for: actingUser))),
                ended AS (
                    UPDATE events e SET end_time = \(end.utc), end_tz = \(end.timeZone), end_offset_seconds = \(end.offsetSeconds), updated_by = \(actingUser)
                    WHERE \(Self.runningSleep(of: childID))
                      AND EXISTS (SELECT FROM me) \(Self.revision(expectedRevision))
                    RETURNING \(Event.columns)
                )
                SELECT (SELECT role FROM me) AS my_role, ended.* FROM (SELECT 1) AS one LEFT JOIN ended ON true
                """)
          }
        }
        guard let event = try Self.memberEvent(rows) else {
            if expectedRevision != nil, let running = try await activeSleepID(of: childID) {
                try await conflictIfChanged(running, expected: expectedRevision, as: actingUser)
            }
            throw StoreError.noActiveSleep
        }
        await routing.announce([event.childID])
        return EndedSleep(event: event)
    }

    // MARK: Bottles

    /// Logs a prepared bottle; its start time is when it was made (the expiry reference).
    public func prepareBottle(for childID: UUID, id: UUID? = nil, preparedMl: Double, at prepared: EventTimestamp, notes: String? = nil, as actingUser: UUID) async throws -> Event {
        try await log(EventDraft(id: id, childID: childID, payload: .feeding(.bottle(amountMl: nil, preparedMl: preparedMl, remainingMl: nil, feedingStartedAt: nil)), start: prepared, notes: notes), as: actingUser)
    }

    /// Marks a prepared bottle as being fed. Only one feeding may be in progress per child
    /// (`feedingAlreadyActive`).
    ///
    /// The first sip is within the bottle's life: not before it was made nor more than 24 hours
    /// after (`invalid(field: "at")`, checked by the database), and not more than 5 minutes
    /// ahead of this clock. Its zone is the bottle's.
    public func startFeeding(_ bottleID: UUID, at started: Date, expectedRevision: Int? = nil, as actingUser: UUID) async throws -> Event {
        guard started.timeIntervalSinceNow <= 300 else {
            throw StoreError.invalid(field: "at", reason: "the first sip cannot be in the future")
        }
        return try await changeBottle(bottleID, expectedRevision: expectedRevision, as: actingUser, set: """
            data = e.data || jsonb_build_object('feeding_started_at', \(EventData.iso8601(started))::text)
            """, when: "NOT \(Self.feedingStarted)", refusal: "this bottle's feeding already started, or it is finished")
    }

    /// Finishes a bottle with what is left in it; the result says how much was consumed
    /// (prepared − remaining).
    public func finishFeeding(_ bottleID: UUID, remainingMl: Double, at end: EventTimestamp, expectedRevision: Int? = nil, as actingUser: UUID) async throws -> FinishedBottle {
        guard remainingMl.isFinite, remainingMl >= 0 else { throw StoreError.invalid(field: "remainingMl", reason: "must be 0 or more") }
        try Validate.timestamp(end, field: "end")
        let event = try await timerEnding("e.id = \(bottleID) AND \(Authorization.isCaregiver(of: "e.child_id", for: actingUser))") { try await changeBottle(bottleID, expectedRevision: expectedRevision, as: actingUser, set: """
            data = e.data || jsonb_build_object('amount_remaining_ml', \(remainingMl)::float8),
            end_time = \(end.utc), end_tz = \(end.timeZone), end_offset_seconds = \(end.offsetSeconds)
            """, when: "true", refusal: "this bottle is already finished", invalidField: "remainingMl") }
        return FinishedBottle(event: event)
    }

    /// Marks a prepared bottle as kept in the fridge (or not): it then keeps 24 hours from
    /// preparation instead of 2 (the child's `bottleExpiry.refrigeratedMinutes`), the first
    /// sip's hour still counting if it comes first.
    ///
    /// ```swift
    /// let cold = try await store.events.setRefrigerated(bottle.id, as: userID)
    /// ```
    @discardableResult
    public func setRefrigerated(_ bottleID: UUID, _ refrigerated: Bool = true, expectedRevision: Int? = nil, as actingUser: UUID) async throws -> Event {
        try await changeBottle(bottleID, expectedRevision: expectedRevision, as: actingUser, set: refrigerated
            ? "data = e.data || '{\"refrigerated\": true}'::jsonb"
            : "data = e.data - 'refrigerated'", when: "true", refusal: "this bottle is already finished")
    }

    /// Discards a bottle (expired or not wanted), and whatever was not recorded as consumed
    /// counts as waste. It ends at `end`, kept between its first sip (or when it was made) and
    /// 24 hours after it was made: a bottle forgotten for days can always be discarded.
    public func discard(_ bottleID: UUID, at end: EventTimestamp, expectedRevision: Int? = nil, as actingUser: UUID) async throws -> Event {
        try Validate.timestamp(end, field: "end")
        let ended: SQL = """
            least(greatest(\(end.utc)::timestamptz, e.start_time, (e.data ->> 'feeding_started_at')::timestamptz),
                  e.start_time + interval '24 hours')
            """
        // The new values are computed from the row where it is read (`target`), and the UPDATE
        // only copies them, guarded by the revision they were computed from: Citus refuses an
        // UPDATE whose SET calls a STABLE function (a cast to timestamptz, a zone's offset) on
        // the row's columns. A change committed between the read and the write makes the guard
        // fail; the bottle, still open, is then discarded as it is now.
        let computed: SQL = """
            \(ended) AS ended_at, utc_offset_seconds(\(end.timeZone), \(ended)) AS ended_offset,
            CASE WHEN e.data ? 'amount_remaining_ml' THEN e.data
                 ELSE e.data || jsonb_build_object('amount_remaining_ml', e.data -> 'amount_prepared_ml') END AS discarded_data,
            e.revision AS seen_revision
            """
        for attempt in 1...3 {
            do {
                return try await changeBottle(bottleID, expectedRevision: expectedRevision, as: actingUser, computed: computed, set: """
                    data = target.discarded_data, end_time = target.ended_at, end_tz = \(end.timeZone), end_offset_seconds = target.ended_offset
                    """, when: "e.revision = target.seen_revision", refusal: "this bottle is already finished")
            } catch StoreError.stateConflict(let reason) where expectedRevision == nil && attempt < 3 {
                let now = try await stored(bottleID, as: actingUser)
                guard now.end == nil, !now.isDeleted else { throw StoreError.stateConflict(reason: reason) }
            }
        }
        throw StoreError.stateConflict(reason: "the bottle kept changing while it was discarded; try again")
    }

    /// One UPDATE of an open (not finished, not deleted) prepared bottle the acting user may
    /// see, at `expectedRevision` when given (`conflict(current:)` when it moved on).
    private func changeBottle(_ bottleID: UUID, expectedRevision: Int?, as actingUser: UUID, computed: SQL? = nil, set: SQL, when condition: SQL, refusal: String, invalidField: String? = nil) async throws -> Event {
        let open: SQL = """
            e.event_type = 'feeding' AND e.data ->> 'kind' = 'bottle' AND e.data ? 'amount_prepared_ml'
            AND e.end_time IS NULL AND e.deleted_at IS NULL AND \(condition) \(Self.revision(expectedRevision))
            """
        do {
            guard let event = try await changeVisibleEvent(bottleID, as: actingUser, computed: computed, set: set, when: open) else {
                try await conflictIfChanged(bottleID, expected: expectedRevision, as: actingUser)
                throw StoreError.stateConflict(reason: refusal)
            }
            return event
        } catch StoreError.invalid(let field, let reason) where field == "payload" && invalidField != nil {
            throw StoreError.invalid(field: invalidField ?? field, reason: reason)
        }
    }

    // MARK: Edits and deletes

    /// Changes an event if nobody changed it since `expectedRevision`; otherwise
    /// `conflict(current:)` with the version in the database (PRD §7.4), so the caller can
    /// show both. Times can be adjusted; the type cannot change.
    ///
    /// Changes that change nothing (none given, or each the same as stored) are no edit: the
    /// event comes back as it is, its revision unchanged (still `conflict(current:)` if the
    /// caller's revision is stale).
    public func update(_ eventID: UUID, with changes: EventChanges, expectedRevision: Int, as actingUser: UUID) async throws -> Event {
        let current = try await stored(eventID, as: actingUser)
        if changes.changesNothing(in: current) {
            if current.isDeleted { throw StoreError.stateConflict(reason: "the event was deleted; restore it first") }
            try Self.ensure(current, isAt: expectedRevision)
            return current
        }
        let payload = changes.payload ?? current.payload
        guard payload.type == current.type else {
            throw StoreError.invalid(field: "payload", reason: "cannot change a \(current.type.rawValue) into a \(payload.type.rawValue); delete it and log a new one")
        }
        let start = changes.start ?? current.start
        let end = changes.end ?? current.end
        let notes = changes.notes ?? current.notes
        try Validate.event(payload: payload, start: start, end: end, notes: notes)
        let applied = try await changeVisibleEvent(eventID, as: actingUser, set: """
            data = \(EventData(payload)), notes = \(notes),
            start_time = \(start.utc), start_tz = \(start.timeZone), start_offset_seconds = \(start.offsetSeconds),
            end_time = \(end?.utc), end_tz = \(end?.timeZone), end_offset_seconds = \(end?.offsetSeconds)
            """, when: "e.revision = \(expectedRevision) AND e.deleted_at IS NULL AND e.event_type = \(payload.type)")
        if let applied { return applied }
        // Not applied: read the latest version (after any concurrent commit) for the caller.
        let latest = try await stored(eventID, as: actingUser)
        if latest.isDeleted { throw StoreError.stateConflict(reason: "the event was deleted; restore it first") }
        throw StoreError.conflict(current: latest)
    }

    /// One event (deleted ones included) of a child the acting user cares for.
    public func get(_ eventID: UUID, as actingUser: UUID) async throws -> Event {
        try await routing.reading(as: actingUser) { pool in try await Self.fetch(eventID, in: scope, as: actingUser, on: pool) }
    }

    /// The event as the primary has it (inside a write's steps).
    func stored(_ eventID: UUID, as actingUser: UUID) async throws -> Event {
        try await mappingErrors(routing) { try await Self.fetch(eventID, in: scope, as: actingUser, on: pool) }
    }

    static func fetch(_ eventID: UUID, in scope: UUID?, as actingUser: UUID, on pool: PostgresPool) async throws -> Event {
        let scoped: SQL = scope.map { "AND e.child_id = \($0)" } ?? ""
        let rows = try await pool.query("""
            SELECT \(Event.columns) FROM events e
            WHERE e.id = \(eventID) \(scoped) AND \(Authorization.isCaregiver(of: "e.child_id", for: actingUser))
            """)
        guard let row = rows.first else { throw StoreError.notFound }
        return try Event.Row(row).event()
    }

    /// Soft-deletes an event (recoverable for 30 days). Deleting a deleted event is a no-op.
    /// With `expectedRevision`, only the version the caller saw: a delete never silently beats
    /// someone's concurrent edit (`conflict(current:)` with their version).
    @discardableResult
    public func softDelete(_ eventID: UUID, expectedRevision: Int? = nil, as actingUser: UUID) async throws -> Event {
        if let deleted = try await changeVisibleEvent(eventID, as: actingUser,
            set: "deleted_at = now(), deleted_by = \(actingUser)", when: "e.deleted_at IS NULL \(Self.revision(expectedRevision))") {
            return deleted
        }
        let current = try await stored(eventID, as: actingUser)
        if current.isDeleted { return current }
        try Self.ensure(current, isAt: expectedRevision)
        return current
    }

    /// Restores a soft-deleted event within 30 days of its deletion. With `expectedRevision`,
    /// only the version the caller saw (`conflict(current:)` otherwise).
    @discardableResult
    public func restore(_ eventID: UUID, expectedRevision: Int? = nil, as actingUser: UUID) async throws -> Event {
        if let restored = try await changeVisibleEvent(eventID, as: actingUser,
            set: "deleted_at = NULL, deleted_by = NULL", when: "e.deleted_at > now() - interval '30 days' \(Self.revision(expectedRevision))") {
            return restored
        }
        let current = try await stored(eventID, as: actingUser)
        try Self.ensure(current, isAt: expectedRevision)
        guard current.isDeleted else { return current }
        throw StoreError.stateConflict(reason: "the event was deleted more than 30 days ago and can no longer be restored")
    }

    /// One UPDATE of an event the acting user may see, when `condition` holds: the changed
    /// event, `nil` when the condition did not hold, `notFound` for anyone else's event.
    /// `computed` adds columns to `target`, read from the row (`e`) before the UPDATE, for
    /// `set` to copy as `target.<name>`.
    private func changeVisibleEvent(_ eventID: UUID, as actingUser: UUID, computed: SQL? = nil, set: SQL, when condition: SQL) async throws -> Event? {
        let extra: SQL = computed.map { ", \($0)" } ?? ""
        // The event is (id, child) among the user's children: another family's event with the
        // same id (events_pkey is unique per child, 0022) is never touched.
        let rows = try await eventErrors(child: childOf(eventID, for: actingUser), by: actingUser) {
            try await pool.query("""
                WITH target AS (
                    SELECT e.id, e.child_id\(extra) FROM events e
                    WHERE e.id = \(eventID) \(inScope("e")) AND \(Authorization.isCaregiver(of: "e.child_id", for: actingUser))
                    LIMIT 1
                ), changed AS (
                    UPDATE events e SET \(set), updated_by = \(actingUser)
                    FROM target
                    WHERE e.id = target.id AND e.child_id = target.child_id AND \(condition)
                    RETURNING \(Event.columns)
                )
                SELECT (SELECT 'caregiver'::text FROM target) AS my_role, changed.* FROM (SELECT 1) AS one LEFT JOIN changed ON true
                """)
        }
        let changed = try Self.memberEvent(rows)
        if let changed { await routing.announce([changed.childID]) }
        return changed
    }

    /// Hard-deletes events soft-deleted more than 30 days ago, with their history (PRD §11).
    /// A maintenance call for a scheduled job; returns how many were purged.
    public func purgeDeleted() async throws -> Int {
        try await mappingErrors(routing) { try await pool.query("SELECT purge_deleted_events()").first?.decode(Int.self, at: 0) ?? 0 }
    }

    /// Other events of the same child and type starting within 5 minutes of this one, not
    /// deleted (PRD §7.4 "possible duplicate"), closest first.
    public func possibleDuplicates(of eventID: UUID, as actingUser: UUID) async throws -> [Event] {
        try await routing.reading(as: actingUser) { pool in
            let rows = try await pool.query("""
                WITH target AS (
                    SELECT t.id, t.child_id, t.event_type, t.start_time FROM events t
                    WHERE t.id = \(eventID) \(inScope("t")) AND \(Authorization.isCaregiver(of: "t.child_id", for: actingUser))
                    LIMIT 1
                )
                SELECT (SELECT 'caregiver'::text FROM target) AS my_role, d.* FROM (SELECT 1) AS one
                LEFT JOIN LATERAL (
                    SELECT \(Event.columns) FROM events e, target
                    WHERE e.child_id = target.child_id AND e.event_type = target.event_type AND e.id <> target.id
                      AND e.deleted_at IS NULL
                      AND e.start_time BETWEEN target.start_time - interval '5 minutes' AND target.start_time + interval '5 minutes'
                    ORDER BY abs(extract(epoch FROM e.start_time - target.start_time)), e.id
                ) AS d ON true
                """)
            guard let first = rows.first, try first.decode(String?.self, column: "my_role") != nil else { throw StoreError.notFound }
            let start = try Event.Row.start(in: rows.columns)
            return try rows.filter { !$0.isNull(at: start) }.map { try Event.Row($0, at: start).event() }
        }
    }
}

/// A sleep that just ended.
///
/// ```swift
/// banner(ended.summary)   // "Ended sleep (1h 20m)"
/// ```
public struct EndedSleep: Sendable, Equatable {
    public var event: Event
    /// Whole minutes slept.
    public var minutes: Int { Int(((event.duration ?? 0) / 60).rounded(.down)) }
    /// "Ended sleep (1h 20m)".
    public var summary: String { "Ended sleep (\(DurationText.hoursMinutes(minutes)))" }
}

/// A bottle that was finished.
///
/// ```swift
/// print(finished.consumedMl)   // 100 (prepared 120, remaining 20)
/// ```
public struct FinishedBottle: Sendable, Equatable {
    public var event: Event

    public init(event: Event) { self.event = event }
    /// Prepared − remaining, in mL.
    public var consumedMl: Double {
        guard case .feeding(.bottle(_, let prepared?, let remaining, _, _)) = event.payload else { return 0 }
        return max(0, prepared - (remaining ?? 0))
    }
}

/// "1h 20m", "45m".
///
/// ```swift
/// DurationText.hoursMinutes(80)   // "1h 20m"
/// ```
public enum DurationText {
    public static func hoursMinutes(_ minutes: Int) -> String {
        minutes >= 60 ? "\(minutes / 60)h \(minutes % 60)m" : "\(minutes)m"
    }
}
