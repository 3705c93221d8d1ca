public import Foundation
public import Postgres

/// A child's day: from `day_start_time` in the child's time zone to the next day's start
/// (23 or 25 hours across a DST change), with every event overlapping it, newest first.
///
/// ```swift
/// let today = try await store.events.timeline(for: child.id, day: PostgresDate(Date(), in: zone), as: userID)
/// print(today.from, today.to, today.events.count)
/// ```
public struct Timeline: Sendable, Equatable {
    public var day: PostgresDate?
    public var from: Date
    public var to: Date
    public var events: [Event]
}

extension Timeline {
    /// The one statement `timeline(for:day:now:as:)` runs: its text is `description`, its
    /// values `parameters`. For `EXPLAIN` in psql, or to give another client the same work.
    ///
    /// ```swift
    /// let sql = Timeline.statement(child: childID, day: day, now: Date(), as: userID)
    /// print(sql.description)   // WITH span AS (SELECT (($1::date + c.day_start_time) …
    /// ```
    public static func statement(child childID: UUID, day: PostgresDate, now: Date, as actingUser: UUID) -> SQL {
        """
        WITH span AS (
            SELECT ((\(day)::date + c.day_start_time) AT TIME ZONE c.timezone) AS day_from,
                   ((\(day)::date + 1 + c.day_start_time) AT TIME ZONE c.timezone) AS day_to
            FROM children c WHERE c.id = \(childID) AND \(Authorization.isCaregiver(of: "c.id", for: actingUser))
        )
        SELECT span.day_from, span.day_to, ev.* FROM span
        LEFT JOIN LATERAL (\(EventRepository.overlapping(child: childID, from: "span.day_from", to: "span.day_to", now: now))) AS ev ON true
        """
    }
}

extension EventRepository {
    /// Events overlapping `[from, to)`, newest first: the body of the database's
    /// `timeline_events()` (Migrations/0018), so a DBA and the app read the same day
    /// (`theDBAsTimelineIsTheApps` compares them). Instants (diapers, notes, bottles without an
    /// end) by their start; ended events by their interval; a running sleep until `now`,
    /// whatever its age. Written out rather than called: Citus cannot route a statement through
    /// a SQL function that reads a distributed table, and with the child's id in each branch
    /// it goes whole to the node that holds the child (docs/scale-out.md).
    static func overlapping(child: UUID, from: SQL, to: SQL, now: Date) -> SQL {
        """
        SELECT \(Event.columns) FROM (
            SELECT e.* FROM events AS e
             WHERE e.child_id = \(child) AND e.deleted_at IS NULL
               AND e.start_time < \(to)
               -- exact lower bound for ended events: they last at most 24 h (events_max_duration_24h)
               AND e.start_time >= \(from) - interval '24 hours'
               AND (e.start_time >= \(from) OR e.end_time > \(from)
                    OR (e.end_time IS NULL AND e.event_type = 'sleep' AND \(now)::timestamptz > \(from)))
            UNION ALL
            -- A sleep left running for longer: the child's one running sleep (events_one_active_sleep).
            SELECT e.* FROM events AS e
             WHERE e.child_id = \(child) AND e.event_type = 'sleep' AND e.end_time IS NULL AND e.deleted_at IS NULL
               AND e.start_time < \(from) - interval '24 hours'
               AND \(now)::timestamptz > \(from)
        ) AS e
        ORDER BY e.start_time DESC, e.id
        """
    }

    /// The child's day `day` (by its `day_start_time` and time zone), newest first.
    public func timeline(for childID: UUID, day: PostgresDate, now: Date = Date(), as actingUser: UUID) async throws -> Timeline {
        try await routing.reading(as: actingUser) { pool in
            let rows = try await pool.query(Timeline.statement(child: childID, day: day, now: now, as: actingUser))
            return try Self.timeline(rows, day: day)
        }
    }

    /// Events overlapping `[from, to)`, such as the PRD's 6-hours-back / 3-hours-ahead window.
    public func range(for childID: UUID, from: Date, to: Date, now: Date = Date(), as actingUser: UUID) async throws -> Timeline {
        guard from < to else { throw StoreError.invalid(field: "to", reason: "must be after from") }
        return try await routing.reading(as: actingUser) { pool in
            let rows = try await pool.query("""
                WITH span AS (
                    SELECT \(from)::timestamptz AS day_from, \(to)::timestamptz AS day_to
                    FROM children c WHERE c.id = \(childID) AND \(Authorization.isCaregiver(of: "c.id", for: actingUser))
                )
                SELECT span.day_from, span.day_to, ev.* FROM span
                LEFT JOIN LATERAL (\(Self.overlapping(child: childID, from: "span.day_from", to: "span.day_to", now: now))) AS ev ON true
                """)
            return try Self.timeline(rows, day: nil)
        }
    }

    static func timeline(_ rows: PostgresRows, day: PostgresDate?) throws -> Timeline {
        guard let first = rows.first else { throw StoreError.notFound }
        let start = try Event.Row.start(in: rows.columns)
        let events = try rows.filter { !$0.isNull(at: start) }.map { try Event.Row($0, at: start).event() }
        return Timeline(day: day, from: try first.decode(Date.self, column: "day_from"), to: try first.decode(Date.self, column: "day_to"), events: events)
    }

    // MARK: Dashboard

    /// Everything the dashboard shows, in one statement and one round trip.
    public func dashboard(for childID: UUID, now: Date = Date(), as actingUser: UUID) async throws -> Dashboard {
        try await routing.reading(as: actingUser) { pool in
            let rows = try await pool.query(Dashboard.statement(child: childID, now: now, as: actingUser))
            guard let row = rows.first else { throw StoreError.notFound }
            return try Dashboard.Row(row).dashboard(now: now)
        }
    }

    /// The PRD §9 quick stats: last feed with its amount, last sleep with its duration and how
    /// long ago it ended, last diaper with its type, and "awake for" or "sleeping for".
    public func quickStats(for childID: UUID, now: Date = Date(), as actingUser: UUID) async throws -> QuickStats {
        QuickStats(dashboard: try await dashboard(for: childID, now: now, as: actingUser), now: now)
    }
}

/// The dashboard (000 spec): last feeding with its side indicator, last diaper, last sleep's
/// end, the running sleep, the suggested side, and today's counts by the child's day.
///
/// ```swift
/// let dashboard = try await store.events.dashboard(for: child.id, as: userID)
/// print(dashboard.today.summary)   // "3 feeds · 3 pee · 1 poop"
/// ```
public struct Dashboard: Sendable, Equatable {
    /// The last feeding, with its side indicator and amount.
    ///
    /// ```swift
    /// feedCard.badge = dashboard.lastFeeding?.sideIndicator   // "L+R"
    /// ```
    public struct LastFeeding: Sendable, Equatable {
        public var id: UUID
        public var start: EventTimestamp
        public var feeding: Feeding
        /// "L", "R", "L+R", "R+L"; `nil` for a bottle.
        public var sideIndicator: String?
        /// What the baby drank, when known: the bottle amount, or prepared − remaining.
        public var amountMl: Double?
    }

    /// The last diaper change.
    ///
    /// ```swift
    /// diaperCard.detail = dashboard.lastDiaper?.contents.rawValue
    /// ```
    public struct LastDiaper: Sendable, Equatable {
        public var id: UUID
        public var start: EventTimestamp
        public var contents: DiaperContents
    }

    /// The last finished sleep.
    ///
    /// ```swift
    /// if let sleep = dashboard.lastSleep { print(now.timeIntervalSince(sleep.end.utc)) }
    /// ```
    public struct LastSleep: Sendable, Equatable {
        public var id: UUID
        public var start: EventTimestamp
        public var end: EventTimestamp
        public var minutes: Int { Int((end.utc.timeIntervalSince(start.utc) / 60).rounded(.down)) }
    }

    /// The sleep running now, if any.
    ///
    /// ```swift
    /// if let sleep = dashboard.activeSleep { showTimer(from: sleep.start.utc) }
    /// ```
    public struct ActiveSleep: Sendable, Equatable {
        public var id: UUID
        public var start: EventTimestamp
    }

    /// Today's counts, by the child's day (`day_start_time` in the child's time zone).
    ///
    /// ```swift
    /// summaryLabel.text = dashboard.today.summary
    /// ```
    public struct Today: Sendable, Equatable {
        public var from: Date
        public var to: Date
        public var feeds: Int
        /// Wet and both.
        public var pee: Int
        /// Dirty and both.
        public var poop: Int
        /// Minutes slept inside today's window, clipped at its edges; a running sleep counts to now.
        public var sleepMinutes: Int
        public var notes: Int
        /// "3 feeds · 3 pee · 1 poop".
        public var summary: String { "\(feeds) feeds · \(pee) pee · \(poop) poop" }
    }

    public var lastFeeding: LastFeeding?
    public var lastDiaper: LastDiaper?
    public var lastSleep: LastSleep?
    public var activeSleep: ActiveSleep?
    /// The opposite of the last breast feeding's started side; `nil` if there is none.
    public var suggestedSide: BreastSide?
    public var today: Today

    /// "L", "R", "L+R" or "R+L" for a breast feeding.
    public static func sideIndicator(_ feeding: Feeding) -> String? {
        guard case .breast(let side, let both) = feeding else { return nil }
        switch (side, both) {
        case (.left, false): return "L"
        case (.right, false): return "R"
        case (.left, true): return "L+R"
        case (.right, true): return "R+L"
        }
    }

    /// When a feeding event fed the baby: a prepared bottle at its first sip (NULL while
    /// nobody drank from it), any other feeding at its start. The same rule as
    /// `EventRepository.feedingStarted`.
    static let fedAt: SQL = """
        CASE WHEN e.data ? 'amount_prepared_ml' THEN (e.data ->> 'feeding_started_at')::timestamptz ELSE e.start_time END
        """

    /// The one statement `dashboard(for:now:as:)` runs: its text is `description`, its values
    /// `parameters`. For `EXPLAIN` in psql, or to give another client the same work.
    ///
    /// ```swift
    /// let sql = Dashboard.statement(child: childID, now: Date(), as: userID)
    /// print(sql.parameters.count)
    /// ```
    public static func statement(child: UUID, now: Date, as actingUser: UUID) -> SQL {
        // Every read of events names the child by its value (`e.child_id = $n`), never by
        // `child.id`: on Citus a statement goes whole to the one node that holds the child only
        // when each table in it is filtered by the child's id (docs/scale-out.md).
        """
        WITH child AS (
            SELECT c.id, c.timezone, c.day_start_time FROM children c
            WHERE c.id = \(child) AND \(Authorization.isCaregiver(of: "c.id", for: actingUser))
        ), span AS (
            -- Today is the local day whose start is the latest one at or before now. A start
            -- in a DST gap (02:30 on a spring-forward day in New York) is read by PostgreSQL
            -- with the offset before the gap (03:30 EDT): until then it is still yesterday,
            -- never a day that starts in the future with every count at 0.
            SELECT ((d.local_day + child.day_start_time) AT TIME ZONE child.timezone) AS day_from,
                   ((d.local_day + 1 + child.day_start_time) AT TIME ZONE child.timezone) AS day_to
            FROM child,
            LATERAL (SELECT ((\(now)::timestamptz AT TIME ZONE child.timezone) - child.day_start_time)::date AS guess) AS g,
            LATERAL (SELECT CASE WHEN ((g.guess + child.day_start_time) AT TIME ZONE child.timezone) > \(now)::timestamptz
                                 THEN g.guess - 1 ELSE g.guess END AS local_day) AS d
        )
        SELECT span.day_from, span.day_to,
               lf.id AS feeding_id, lf.fed_at AS feeding_start, lf.start_tz AS feeding_tz, lf.fed_offset AS feeding_offset, lf.data AS feeding_data,
               ld.id AS diaper_id, ld.start_time AS diaper_start, ld.start_tz AS diaper_tz, ld.start_offset_seconds AS diaper_offset, ld.data ->> 'contents' AS diaper_contents,
               ls.id AS sleep_id, ls.start_time AS sleep_start, ls.start_tz AS sleep_tz, ls.start_offset_seconds AS sleep_offset,
               ls.end_time AS sleep_end, ls.end_tz AS sleep_end_tz, ls.end_offset_seconds AS sleep_end_offset,
               act.id AS active_id, act.start_time AS active_start, act.start_tz AS active_tz, act.start_offset_seconds AS active_offset,
               lb.side AS last_breast_side,
               counts.feeds, counts.pee, counts.poop, counts.notes, slept.sleep_seconds
        FROM child CROSS JOIN span
        LEFT JOIN LATERAL (
            -- The last feed is the last time the baby fed: a prepared bottle from its first
            -- sip, never while nobody drank it. Sips come within a bottle's life (24 hours at
            -- most), so the feedings prepared in the 24 hours before the newest one hold it.
            SELECT f.id, f.fed_at, f.start_tz, utc_offset_seconds(f.start_tz, f.fed_at) AS fed_offset, f.data
            FROM (
                SELECT e.id, e.start_tz, e.data, \(Self.fedAt) AS fed_at FROM events e
                WHERE e.child_id = \(child) AND e.event_type = 'feeding' AND e.deleted_at IS NULL AND e.start_time <= \(now)
                  AND e.start_time >= (SELECT max(x.start_time) FROM events x
                                       WHERE x.child_id = \(child) AND x.event_type = 'feeding' AND x.deleted_at IS NULL
                                         AND x.start_time <= \(now)) - interval '24 hours'
            ) AS f
            WHERE f.fed_at <= \(now)
            ORDER BY f.fed_at DESC LIMIT 1
        ) AS lf ON true
        LEFT JOIN LATERAL (
            SELECT e.id, e.start_time, e.start_tz, e.start_offset_seconds, e.data FROM events e
            WHERE e.child_id = \(child) AND e.event_type = 'diaper' AND e.deleted_at IS NULL AND e.start_time <= \(now)
            ORDER BY e.start_time DESC LIMIT 1
        ) AS ld ON true
        LEFT JOIN LATERAL (
            SELECT e.id, e.start_time, e.start_tz, e.start_offset_seconds, e.end_time, e.end_tz, e.end_offset_seconds FROM events e
            WHERE e.child_id = \(child) AND e.event_type = 'sleep' AND e.deleted_at IS NULL AND e.end_time IS NOT NULL AND e.start_time <= \(now)
            ORDER BY e.start_time DESC LIMIT 1
        ) AS ls ON true
        LEFT JOIN LATERAL (
            SELECT e.id, e.start_time, e.start_tz, e.start_offset_seconds FROM events e
            WHERE e.child_id = \(child) AND e.event_type = 'sleep' AND e.end_time IS NULL AND e.deleted_at IS NULL
            LIMIT 1
        ) AS act ON true
        LEFT JOIN LATERAL (
            SELECT e.data ->> 'started_side' AS side FROM events e
            WHERE e.child_id = \(child) AND e.event_type = 'feeding' AND e.deleted_at IS NULL AND e.data ->> 'kind' = 'breast' AND e.start_time <= \(now)
            ORDER BY e.start_time DESC LIMIT 1
        ) AS lb ON true
        CROSS JOIN LATERAL (
            SELECT count(*) FILTER (WHERE e.event_type = 'feeding' AND clip.fed_at >= span.day_from AND clip.fed_at < span.day_to) AS feeds,
                   count(*) FILTER (WHERE e.event_type = 'diaper' AND e.start_time >= span.day_from AND e.data ->> 'contents' IN ('wet', 'both')) AS pee,
                   count(*) FILTER (WHERE e.event_type = 'diaper' AND e.start_time >= span.day_from AND e.data ->> 'contents' IN ('dirty', 'both')) AS poop,
                   count(*) FILTER (WHERE e.event_type = 'note' AND e.start_time >= span.day_from) AS notes,
                   -- Sleeps clipped to the day and merged where they overlap (two caregivers
                   -- logging the same nap count it once): never more than the day is long.
                   range_agg(tstzrange(clip.lo, clip.hi)) FILTER (WHERE e.event_type = 'sleep' AND clip.lo < clip.hi) AS sleeps
            FROM (
                SELECT e.event_type, e.start_time, e.end_time, e.data FROM events e
                WHERE e.child_id = \(child) AND e.deleted_at IS NULL
                  AND e.start_time < span.day_to AND e.start_time >= span.day_from - interval '24 hours'
                UNION ALL
                -- A sleep left running for more than a day counts like any running sleep.
                SELECT e.event_type, e.start_time, e.end_time, e.data FROM events e
                WHERE e.child_id = \(child) AND e.event_type = 'sleep' AND e.end_time IS NULL AND e.deleted_at IS NULL
                  AND e.start_time < span.day_from - interval '24 hours'
            ) AS e
            CROSS JOIN LATERAL (
                SELECT greatest(e.start_time, span.day_from) AS lo,
                       least(coalesce(e.end_time, greatest(\(now)::timestamptz, e.start_time)), span.day_to) AS hi,
                       \(Self.fedAt) AS fed_at
            ) AS clip
        ) AS counts
        CROSS JOIN LATERAL (
            SELECT coalesce(sum(extract(epoch FROM upper(r) - lower(r))), 0)::float8 AS sleep_seconds
            FROM unnest(counts.sleeps) AS r
        ) AS slept
        """
    }

    /// The statement's one row, read by position as `Event.Row` reads a sync page. Matching its
    /// 29 columns to properties by name (`Decodable`) was 8% of a backend's client CPU in the
    /// benchmarks' mix (P=8, C=64), for one row per call.
    struct Row {
        /// `statement`'s columns, in order (checked by name once per call).
        static let columnNames = [
            "day_from", "day_to",
            "feeding_id", "feeding_start", "feeding_tz", "feeding_offset", "feeding_data",
            "diaper_id", "diaper_start", "diaper_tz", "diaper_offset", "diaper_contents",
            "sleep_id", "sleep_start", "sleep_tz", "sleep_offset", "sleep_end", "sleep_end_tz", "sleep_end_offset",
            "active_id", "active_start", "active_tz", "active_offset",
            "last_breast_side", "feeds", "pee", "poop", "notes", "sleep_seconds",
        ]

        init(_ row: PostgresRow) throws {
            try ColumnLayout.check(row.columns, are: Self.columnNames, swiftType: "Dashboard", what: "the dashboard's columns")
            var column = 0
            func next<T: PostgresDecodable>(_ type: T.Type = T.self) throws -> T {
                defer { column += 1 }
                return try row.decode(T.self, at: column)
            }
            dayFrom = try next()
            dayTo = try next()
            feedingId = try next()
            feedingStart = try next()
            feedingTz = try next()
            feedingOffset = try next()
            feedingData = try next()
            diaperId = try next()
            diaperStart = try next()
            diaperTz = try next()
            diaperOffset = try next()
            diaperContents = try next()
            sleepId = try next()
            sleepStart = try next()
            sleepTz = try next()
            sleepOffset = try next()
            sleepEnd = try next()
            sleepEndTz = try next()
            sleepEndOffset = try next()
            activeId = try next()
            activeStart = try next()
            activeTz = try next()
            activeOffset = try next()
            lastBreastSide = try next()
            feeds = try next()
            pee = try next()
            poop = try next()
            notes = try next()
            sleepSeconds = try next()
        }

        var dayFrom: Date
        var dayTo: Date
        var feedingId: UUID?
        var feedingStart: Date?
        var feedingTz: String?
        var feedingOffset: Int?
        var feedingData: EventData?
        var diaperId: UUID?
        var diaperStart: Date?
        var diaperTz: String?
        var diaperOffset: Int?
        var diaperContents: DiaperContents?
        var sleepId: UUID?
        var sleepStart: Date?
        var sleepTz: String?
        var sleepOffset: Int?
        var sleepEnd: Date?
        var sleepEndTz: String?
        var sleepEndOffset: Int?
        var activeId: UUID?
        var activeStart: Date?
        var activeTz: String?
        var activeOffset: Int?
        var lastBreastSide: BreastSide?
        var feeds: Int
        var pee: Int
        var poop: Int
        var notes: Int
        var sleepSeconds: Double

        func dashboard(now: Date) throws -> Dashboard {
            var lastFeeding: LastFeeding?
            if let feedingId, let feedingStart, let feedingTz, let feedingOffset, let feedingData,
               case .feeding(let feeding) = try feedingData.payload(for: .feeding) {
                var amount: Double?
                if case .bottle(let fed, let prepared, let remaining, _, _) = feeding {
                    // What the baby drank: never the prepared amount of a bottle not yet finished.
                    amount = fed ?? remaining.flatMap { remaining in prepared.map { max(0, $0 - remaining) } }
                }
                lastFeeding = LastFeeding(
                    id: feedingId, start: EventTimestamp(utc: feedingStart, timeZone: feedingTz, offsetSeconds: feedingOffset),
                    feeding: feeding, sideIndicator: Dashboard.sideIndicator(feeding), amountMl: amount)
            }
            var lastDiaper: LastDiaper?
            if let diaperId, let diaperStart, let diaperTz, let diaperOffset, let diaperContents {
                lastDiaper = LastDiaper(id: diaperId, start: EventTimestamp(utc: diaperStart, timeZone: diaperTz, offsetSeconds: diaperOffset), contents: diaperContents)
            }
            var lastSleep: LastSleep?
            if let sleepId, let sleepStart, let sleepTz, let sleepOffset, let sleepEnd, let sleepEndTz, let sleepEndOffset {
                lastSleep = LastSleep(
                    id: sleepId, start: EventTimestamp(utc: sleepStart, timeZone: sleepTz, offsetSeconds: sleepOffset),
                    end: EventTimestamp(utc: sleepEnd, timeZone: sleepEndTz, offsetSeconds: sleepEndOffset))
            }
            var activeSleep: ActiveSleep?
            if let activeId, let activeStart, let activeTz, let activeOffset {
                activeSleep = ActiveSleep(id: activeId, start: EventTimestamp(utc: activeStart, timeZone: activeTz, offsetSeconds: activeOffset))
            }
            return Dashboard(
                lastFeeding: lastFeeding, lastDiaper: lastDiaper, lastSleep: lastSleep, activeSleep: activeSleep,
                suggestedSide: lastBreastSide?.opposite,
                today: Today(from: dayFrom, to: dayTo, feeds: feeds, pee: pee, poop: poop,
                             sleepMinutes: Int((sleepSeconds / 60).rounded(.down)), notes: notes))
        }
    }
}

/// PRD §9 quick stats.
///
/// ```swift
/// let stats = try await store.events.quickStats(for: child.id, as: userID)
/// if let awake = stats.awakeMinutes { print("Awake for \(DurationText.hoursMinutes(awake))") }
/// ```
public struct QuickStats: Sendable, Equatable {
    /// When the last feed started, and what was drunk (mL) when known.
    public var lastFeedAt: Date?
    public var lastFeedAmountMl: Double?
    /// Minutes of the last finished sleep, and minutes since it ended.
    public var lastSleepMinutes: Int?
    public var minutesSinceLastSleepEnded: Int?
    /// "Awake for": minutes since the last sleep ended, when no sleep is running.
    public var awakeMinutes: Int?
    /// "Sleeping for": minutes of the running sleep.
    public var sleepingMinutes: Int?
    /// When the last diaper was changed, and what it held (PRD §2.2: "last diaper (time + type)").
    public var lastDiaperAt: Date?
    public var lastDiaperContents: DiaperContents?

    public init(dashboard: Dashboard, now: Date) {
        lastFeedAt = dashboard.lastFeeding?.start.utc
        lastFeedAmountMl = dashboard.lastFeeding?.amountMl
        lastSleepMinutes = dashboard.lastSleep?.minutes
        lastDiaperAt = dashboard.lastDiaper?.start.utc
        lastDiaperContents = dashboard.lastDiaper?.contents
        let sinceEnd = dashboard.lastSleep.map { Int((now.timeIntervalSince($0.end.utc) / 60).rounded(.down)) }
        minutesSinceLastSleepEnded = sinceEnd
        if let active = dashboard.activeSleep {
            sleepingMinutes = Int((now.timeIntervalSince(active.start.utc) / 60).rounded(.down))
        } else {
            awakeMinutes = sinceEnd
        }
    }
}
