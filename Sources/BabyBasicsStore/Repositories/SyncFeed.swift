public import Foundation
import Postgres

/// One page of the sync feed: what changed in the family state of the user's children.
///
/// Apply a page in this order: `notices` (drop the children they name), `removals`, then
/// `children`, `caregivers` and `events` (each is the row's current version: replace what you
/// hold by id). Then store `next`, and fetch again right away while `hasMore`.
///
/// ```swift
/// var cursor = SyncCursor.start
/// repeat {
///     let page = try await store.events.changes(for: userID, after: cursor)
///     local.apply(page)                // notices, removals, then upserts
///     cursor = page.next
/// } while page.hasMore
/// ```
public struct ChangePage: Sendable, Equatable {
    /// Children the client must drop (`accessRevoked`) or drop and load again (`resyncRequired`).
    public var notices: [SyncNotice]
    /// Rows that no longer exist: purged events, caregivers removed or gone.
    public var removals: [SyncRemoval]
    /// Child records that changed (name, birth date, time zone, day start, settings,
    /// primary), and every child the user newly sees.
    public var children: [Child]
    /// Memberships that were added or changed (role).
    public var caregivers: [ChildCaregiver]
    /// Events inserted, edited, soft-deleted (`deletedAt` set) or restored, at their
    /// current version.
    public var events: [Event]
    /// Where the next page starts.
    public var next: SyncCursor
    /// Whether `limit` cut the page: fetch again right away.
    public var hasMore: Bool
}

/// A typed answer about one child of the cursor.
///
/// ```swift
/// for notice in page.notices {
///     switch notice {
///     case .accessRevoked(let child): local.forget(child)
///     case .resyncRequired(let child): local.forget(child)   // its whole state follows
///     }
/// }
/// ```
public enum SyncNotice: Sendable, Equatable, Hashable {
    /// The user no longer sees this child (removed, left, or the child was deleted). Forget it.
    case accessRevoked(childID: UUID)
    /// The cursor cannot continue for this child (older than the tombstone retention, from
    /// another epoch after a restore of an older state, or ahead of the server). Forget
    /// what you hold of it: this page and the next ones deliver its whole state again.
    case resyncRequired(childID: UUID)
}

/// A row removed from a child's state.
///
/// ```swift
/// for removal in page.removals where removal.kind == .event { local.deleteEvent(removal.id) }
/// ```
public struct SyncRemoval: Sendable, Equatable, Hashable {
    public enum Kind: String, Sendable, PostgresCodable { case event, caregiver }
    public var childID: UUID
    public var kind: Kind
    /// The event id, or the caregiver's user id.
    public var id: UUID
}

/// A caregiver of one child, as the feed delivers it.
///
/// ```swift
/// for change in page.caregivers { local.upsert(change.caregiver, of: change.childID) }
/// ```
public struct ChildCaregiver: Sendable, Equatable {
    public var childID: UUID
    public var caregiver: Caregiver
}

extension EventRepository {
    /// The changes to the family state of the user's children (or of one child) after `cursor`.
    ///
    /// Per child, every change takes its stamp from the child's counter row, whose lock is held
    /// to commit, so stamp order is commit order: a page delivers, per child, every committed
    /// change above the cursor's position in stamp order, and nothing uncommitted. No other
    /// transaction, child or database can hold the feed back. Never a change twice, never one
    /// skipped (see `Migrations/0011_sync_per_child.sql` and
    /// `Migrations/0022_citus_ready_keys_and_counters.sql`).
    ///
    /// A cursor naming a child the user no longer sees gets `.accessRevoked` for it; one the
    /// server cannot continue gets `.resyncRequired` and the child's whole state. A cursor of
    /// another user, or a damaged one, is `StoreError.invalid(field: "cursor")`.
    public func changes(for actingUser: UUID, child childID: UUID? = nil, after cursor: SyncCursor, limit: Int = 500) async throws -> ChangePage {
        guard (1...10_000).contains(limit) else { throw StoreError.invalid(field: "limit", reason: "must be between 1 and 10000") }
        if let owner = cursor.user, owner != actingUser {
            throw StoreError.invalid(field: "cursor", reason: "belongs to another account; start again from SyncCursor.start")
        }
        return try await routing.reading(as: actingUser) { pool in
            let onReplica = routing.isReplica(pool)
            return try await pool.transaction(TransactionOptions(isolation: .repeatableRead, readOnly: true)) { connection in
                try await SyncPageBuilder(user: actingUser, only: childID, cursor: cursor, limit: limit, onReplica: onReplica).build(on: connection)
            }
        }
    }
}

/// Reads one page in one snapshot (a REPEATABLE READ transaction): the user's children with
/// their positions, then, child by child, the rows stamped between the cursor and that
/// position, merged per child in stamp order. On a Citus cluster each worker's session has a
/// snapshot of its own: what the feed needs holds per child (a child's rows and counter are on
/// one shard, read over the connection that read its position, and never above it).
struct SyncPageBuilder {
    let user: UUID
    let only: UUID?
    let cursor: SyncCursor
    let limit: Int
    /// Read on a replica: a cursor beyond what it replayed is read on the primary instead
    /// (`ReplicaBehindCursor`), not taken for a restore.
    var onReplica = false

    /// A child the user sees: its position (`sync_child_position`, the highest stamp this
    /// snapshot sees), its record's stamp and its floor.
    private struct ChildState: Decodable {
        var changeSeq: Int64
        var recordSeq: Int64
        var syncFloor: Int64
        var epoch: UUID
    }

    private enum Item {
        case child(Child)
        case caregiver(ChildCaregiver)
        case removal(SyncRemoval)
        case event(Event)
    }

    private struct Stamped {
        var childID: UUID
        var seq: Int64
        var item: Item
    }

    /// The user's children (or the one asked for) with their records, positions and floors,
    /// and the epoch. The position is the child's counter (`sync_child_position()`'s body,
    /// written out: on a Citus cluster a function that reads a distributed table cannot run
    /// inside a statement sent to a shard; its fallback for a child without a counter is
    /// evaluated only then).
    ///
    /// It also turns bitmap scans off for the rest of the feed's transaction: the planner
    /// estimates rows per child from the table's average, and for a child with a long history
    /// above the position a bitmap scan reads all of it and sorts, where the index scan in
    /// stamp order stops after `limit` rows (a bounded range scan, whatever the history).
    /// `set_config(…, true)` ends with the transaction; on Citus it runs in the workers'
    /// sessions, where the per-child statements are planned.
    static func children(of user: UUID, only: UUID?) -> SQL {
        let onlyChild: SQL = only.map { "AND me.child_id = \($0) AND c.id = \($0)" } ?? ""
        return """
            SELECT \(Child.columns),
                   coalesce(k.last_stamp, sync_rows_position(c.id)) AS change_seq,
                   c.record_seq, c.sync_floor, s.epoch,
                   set_config('enable_bitmapscan', 'off', true) AS planner
            FROM caregivers me
            JOIN children c ON c.id = me.child_id
            LEFT JOIN sync_counters k ON k.child_id = c.id
            CROSS JOIN sync_state s
            WHERE me.user_id = \(user) \(onlyChild)
            """
    }

    /// One child's first `limit` events stamped in `(after, through]`, in stamp order: the
    /// body of the database's `sync_events_since()` (what a DBA runs), one range scan of
    /// `events_child_change_seq_key`, bounded above by the position read with the child's
    /// state. One statement per child, naming it by value: on Citus it goes to the child's shard.
    static func events(of child: UUID, after: Int64, through: Int64, limit: Int) -> SQL {
        """
        SELECT \(Event.columns), e.change_seq AS sync_seq
        FROM events e
        WHERE e.child_id = \(child) AND e.change_seq > \(after) AND e.change_seq <= \(through)
        ORDER BY e.change_seq
        LIMIT \(limit)
        """
    }

    /// One child's first `limit` memberships and first `limit` tombstones stamped in
    /// `(after, through]` (`idx_caregivers_child_change`, `sync_tombstones_pkey`).
    static func family(of child: UUID, after: Int64, through: Int64, limit: Int) -> SQL {
        """
        SELECT f.kind, f.change_seq, f.entity_id, u.display_name, f.role, f.joined_at
        FROM (
            (SELECT 'caregiver' AS source, 'caregiver' AS kind, cg.change_seq, cg.user_id AS entity_id, cg.role, cg.joined_at
             FROM caregivers cg
             WHERE cg.child_id = \(child) AND cg.change_seq > \(after) AND cg.change_seq <= \(through)
             ORDER BY cg.change_seq LIMIT \(limit))
            UNION ALL
            (SELECT 'removal', t.kind, t.change_seq, t.entity_id, NULL, NULL
             FROM sync_tombstones t
             WHERE t.child_id = \(child) AND t.change_seq > \(after) AND t.change_seq <= \(through)
             ORDER BY t.change_seq LIMIT \(limit))
        ) AS f
        LEFT JOIN users u ON f.source = 'caregiver' AND u.id = f.entity_id
        """
    }

    func build(on connection: isolated PostgresConnection) async throws -> ChangePage {
        let stateRows = try await connection.query(Self.children(of: user, only: only))
        var known = try stateRows.first?.decode(as: ChildState.self).epoch
        if known == nil { known = try await connection.fetchValue(UUID.self, "SELECT epoch FROM sync_state") }
        guard let epoch = known else {
            throw StoreError.stateConflict(reason: "sync_state has no row: the database was not migrated with bbmigrate")
        }
        let sameEpoch = cursor.epoch == nil || cursor.epoch == epoch

        var notices: [SyncNotice] = []
        var next = cursor.positions
        var after: [UUID: Int64] = [:]          // children with something above their position
        var highest: [UUID: Int64] = [:]       // per child, its highest stamp in this snapshot
        var recordSeqs: [UUID: Int64] = [:]
        var nextRecordsAhead = cursor.recordsAhead      // children not read now keep theirs
        var items: [Stamped] = []
        var visible = Set<UUID>()
        for row in stateRows {
            let child = try row.decode(as: Child.Row.self).child
            let state = try row.decode(as: ChildState.self)
            visible.insert(child.id)
            var position = cursor.positions[child.id] ?? 0
            var recordAhead = sameEpoch ? cursor.recordsAhead[child.id] ?? 0 : 0
            if onReplica && sameEpoch && position > state.changeSeq { throw ReplicaBehindCursor() }
            if position > 0 && (!sameEpoch || position < state.syncFloor || position > state.changeSeq) {
                notices.append(.resyncRequired(childID: child.id))
                position = 0
                recordAhead = 0
            }
            next[child.id] = position
            highest[child.id] = state.changeSeq
            recordSeqs[child.id] = state.recordSeq
            nextRecordsAhead[child.id] = recordAhead > position ? recordAhead : nil
            guard position < state.changeSeq else { continue }
            after[child.id] = position
            if state.recordSeq > max(position, recordAhead) {
                // A child new to the client (position 0) gets its record before anything of
                // it (sort key 0; it does not move the position); later, at its stamp.
                items.append(Stamped(childID: child.id, seq: position == 0 ? 0 : state.recordSeq, item: .child(child)))
            }
        }
        for child in cursor.positions.keys where !visible.contains(child) {
            // A replica that has not replayed the membership yet (an invite redeemed a moment
            // ago) must not revoke the child: only the primary decides that.
            if onReplica && (only == nil || only == child) { throw ReplicaBehindCursor() }
            if only == nil || only == child {
                notices.append(.accessRevoked(childID: child))
                next[child] = nil
            } else if !sameEpoch {
                // Not read now (another child was asked for), but its position belongs to the
                // old epoch: it starts over on the next page that reads it.
                notices.append(.resyncRequired(childID: child))
                next[child] = nil
            }
        }

        // The rows above each position, at most `limit` per child and kind; `horizon` is, per
        // child, the last stamp below which every row was read (a kind that hit `limit` may
        // have more above it).
        var horizon: [UUID: Int64] = [:]
        // Per child, two statements naming it (one shard each on Citus), all sent in one
        // pipeline: one round trip whatever the number of children. Every row read is at or
        // below the child's position read above: on one server the transaction's snapshot is
        // the same anyway; on Citus a later statement may see a newer state of the shard, whose
        // rows above the position belong to the next page.
        let reading = after.keys.sorted { $0.uuidString < $1.uuidString }
        var statements: [SQL] = []
        for child in reading {
            let position = after[child] ?? 0, through = highest[child] ?? 0
            statements.append(Self.events(of: child, after: position, through: through, limit: limit))
            statements.append(Self.family(of: child, after: position, through: through, limit: limit))
        }
        let results = try await connection.pipeline(statements)
        guard results.count == statements.count else {
            throw PostgresError(kind: .protocolViolation, message: "the feed's pipeline of \(statements.count) statements came back with \(results.count) results")
        }
        for (index, child) in reading.enumerated() {
            let eventRows = results[2 * index], familyRows = results[2 * index + 1]
            var eventsRead = (count: 0, last: Int64(0))
            let start = eventRows.isEmpty ? 0 : try Event.Row.start(in: eventRows.columns)
            for row in eventRows {
                let event = try Event.Row(row, at: start).event()
                let seq = try row.decode(Int64.self, column: "sync_seq")
                items.append(Stamped(childID: child, seq: seq, item: .event(event)))
                eventsRead = (eventsRead.count + 1, seq)
            }
            var caregiversRead = (count: 0, last: Int64(0))
            var removalsRead = (count: 0, last: Int64(0))
            for row in familyRows {
                let (kind, seq, entity, name, role, joined) = try row.decode((SyncRemoval.Kind, Int64, UUID, String?, CaregiverRole?, Date?).self)
                if let role, let joined {
                    let caregiver = Caregiver(userID: entity, displayName: name ?? "", role: role, joinedAt: joined)
                    items.append(Stamped(childID: child, seq: seq, item: .caregiver(ChildCaregiver(childID: child, caregiver: caregiver))))
                    caregiversRead = (caregiversRead.count + 1, seq)
                } else {
                    items.append(Stamped(childID: child, seq: seq, item: .removal(SyncRemoval(childID: child, kind: kind, id: entity))))
                    removalsRead = (removalsRead.count + 1, seq)
                }
            }
            for read in [eventsRead, caregiversRead, removalsRead] where read.count == limit {
                horizon[child] = min(horizon[child] ?? .max, read.last)
            }
        }

        // Per child, a prefix in stamp order; across children, interleaved by stamp.
        // Ties (a child's record at 0) go by child id, ranked once: no string per comparison.
        var rank: [UUID: Int] = [:]
        for (index, child) in visible.sorted(by: { $0.uuidString < $1.uuidString }).enumerated() { rank[child] = index }
        var candidates = items.filter { $0.seq <= (horizon[$0.childID] ?? .max) }
        candidates.sort { ($0.seq, rank[$0.childID] ?? 0) < ($1.seq, rank[$1.childID] ?? 0) }
        let cut = candidates.count > limit
        let delivered = candidates.prefix(limit)
        var page = ChangePage(notices: notices, removals: [], children: [], caregivers: [], events: [], next: cursor, hasMore: cut || !horizon.isEmpty)
        var complete = Set(after.keys).subtracting(horizon.keys)
        // A child with rows after the cut is not complete.
        for item in candidates.dropFirst(limit) { complete.remove(item.childID) }
        for stamped in delivered {
            if stamped.seq == 0 {
                nextRecordsAhead[stamped.childID] = recordSeqs[stamped.childID]
            } else {
                next[stamped.childID] = stamped.seq
            }
            switch stamped.item {
            case .child(let child): page.children.append(child)
            case .caregiver(let caregiver): page.caregivers.append(caregiver)
            case .removal(let removal): page.removals.append(removal)
            case .event(let event): page.events.append(event)
            }
        }
        // A child whose every row above its position was delivered is at its highest stamp in
        // this snapshot: every stamp of it below that is committed and was visible here.
        for child in complete { next[child] = highest[child] }
        page.next = SyncCursor(epoch: epoch, user: user, positions: next, recordsAhead: nextRecordsAhead)
        return page
    }
}

/// A push that a child's family state changed: the trigger to fetch the sync feed now
/// instead of at the next poll.
///
/// ```swift
/// for await change in store.childChanges() {
///     switch change {
///     case .changed(let childID): await devices(following: childID).sendRefresh()
///     case .missedSome: await allDevices().sendRefresh()
///     case .unavailable(let reason): logger.error("no push: \(reason)")
///     }
/// }
/// ```
public enum ChildChange: Sendable, Hashable {
    /// A change of this child committed (one per transaction and child; a rollback sends none).
    case changed(childID: UUID)
    /// Changes may not have been heard: the listening connection was lost and replaced, or the
    /// consumer fell more than 10,000 changes behind. Refresh everyone you follow.
    case missedSome
    /// Listening cannot work with the store's `listenConfiguration` (it goes through a
    /// connection pooler): `reason` says what to do. The sequence ends after it.
    case unavailable(reason: String)
}

extension Store {
    /// Every committed change of any child (`NOTIFY child_changed`, sent with each sync stamp),
    /// on a connection of its own that is replaced when lost. It carries only child ids: who
    /// may see what is decided by the feed, which the devices call next.
    public func childChanges() -> AsyncStream<ChildChange> {
        let events = PostgresListener(configuration: listenConfiguration, channel: "child_changed").events()
        return AsyncStream(bufferingPolicy: .bufferingOldest(10_000)) { continuation in
            let task = Task {
                // A change dropped for want of room is reported as `.missedSome` once there is room.
                var missed = false
                func deliver(_ change: ChildChange) {
                    if missed {
                        guard case .enqueued = continuation.yield(.missedSome) else { return }
                        missed = false
                    }
                    if case .dropped = continuation.yield(change) { missed = true }
                }
                for await event in events {
                    switch event {
                    case .listening: continue
                    case .reconnected, .overflowed: deliver(.missedSome)
                    case .notification(let notification):
                        if let child = UUID(uuidString: notification.payload) { deliver(.changed(childID: child)) }
                    case .failed(let reason):
                        // Listening cannot work here (through a pooler); the listener logged why.
                        continuation.yield(.unavailable(reason: reason))
                        continuation.finish()
                        return
                    }
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }
}
