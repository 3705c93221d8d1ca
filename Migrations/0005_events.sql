-- 0005_events.sql
--
-- Tracking events (PRD 8 "Event"): feeding, diaper, sleep, note.
-- Soft-deleted (deleted_at), versioned (revision), attributed (logged_by,
-- updated_by, deleted_by) and carrying a change cursor for sync
-- (change_xid, change_seq). event_history, the sync reader and the purge
-- function follow in 0006_event_history_and_sync.sql.
--
-- ---------------------------------------------------------------------------
-- The sync change cursor: (change_xid xid8, change_seq bigint)
-- ---------------------------------------------------------------------------
-- Every INSERT and UPDATE (soft delete and restore included) stamps the row,
-- in trigger events_bookkeeping, with
--     change_xid = pg_current_xact_id()          -- the writing transaction
--     change_seq = nextval('events_change_seq')  -- order inside it
-- A client keeps the (change_xid, change_seq) of the last row it received
-- (initially ('0', 0)) and pages with
--     SELECT * FROM events
--      WHERE child_id = $child
--        AND (change_xid, change_seq) > ($cursor_xid::xid8, $cursor_seq)
--        AND change_xid < pg_snapshot_xmin(pg_current_snapshot())
--      ORDER BY change_xid, change_seq
--      LIMIT $n;
-- (sync_events_since() in 0006 wraps exactly this.) Soft-deleted rows are
-- returned too: they are the tombstones clients need.
--
-- Why not a plain sequence or a timestamp: both are assigned when a row is
-- WRITTEN, but rows become visible when the transaction COMMITS, and the two
-- orders differ. Transaction A takes seq 100 (or updated_at 12:00:00.1),
-- transaction B takes seq 101 and commits first; a reader sees 101,
-- advances its cursor to 101, then A commits: row 100 is behind every
-- cursor and is never sent. now() is even worse (it is the transaction
-- START time, and clocks move). No "safety margin" on a timestamp fixes this
-- for a transaction that stays open longer than the margin.
--
-- Why (xid, seq) with the xmin filter is safe: pg_snapshot_xmin of the
-- reader's snapshot is the oldest transaction id still running (cluster
-- wide). Every transaction with a smaller xid has finished, so its rows are
-- either visible to the reader or rolled back: nothing below xmin can still
-- appear. Any transaction that commits later has an xid >= that xmin (it
-- was running, or had no xid yet and will get a larger one), hence a
-- cursor value greater than anything already returned. So a late committer
-- is delivered late, never skipped. change_seq only orders rows inside one
-- transaction (LIMIT may cut a page in the middle of it). pg_current_xact_id
-- returns the top-level xid, also inside savepoints.
--
-- Cost: a long-running transaction anywhere in the cluster (including an
-- "idle in transaction" session) holds xmin back and delays (never loses)
-- sync. Watch pg_stat_activity.backend_xid / xact_start.
-- Hard deletes (purge, child deletion) are not visible to the cursor; a
-- client whose cursor is older than the purge horizon (30 days) must do a
-- full resync.
-- ---------------------------------------------------------------------------

CREATE SEQUENCE events_change_seq AS bigint;

COMMENT ON SEQUENCE events_change_seq IS
'Orders changes inside one transaction for the sync cursor (events.change_seq). Never used alone as a cursor: see 0005_events.sql.';

CREATE TABLE events (
    id                   uuid        NOT NULL DEFAULT gen_random_uuid(),
    child_id             uuid        NOT NULL,
    logged_by            uuid        NULL,   -- required on INSERT (trigger); NULL after account deletion
    event_type           text        NOT NULL,
    start_time           timestamptz NOT NULL,
    start_tz             text        NOT NULL,
    start_offset_seconds integer     NOT NULL,
    end_time             timestamptz NULL,
    end_tz               text        NULL,
    end_offset_seconds   integer     NULL,
    data                 jsonb       NOT NULL DEFAULT '{}',
    notes                text        NULL,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    deleted_at           timestamptz NULL,
    updated_by           uuid        NULL,
    deleted_by           uuid        NULL,
    revision             integer     NOT NULL DEFAULT 1,
    change_xid           xid8        NOT NULL,   -- set by trigger events_bookkeeping
    change_seq           bigint      NOT NULL,   -- set by trigger events_bookkeeping

    CONSTRAINT events_pkey PRIMARY KEY (id),
    CONSTRAINT events_child_id_fkey
        FOREIGN KEY (child_id) REFERENCES children (id) ON DELETE CASCADE,
    CONSTRAINT events_logged_by_fkey
        FOREIGN KEY (logged_by) REFERENCES users (id) ON DELETE SET NULL,
    CONSTRAINT events_updated_by_fkey
        FOREIGN KEY (updated_by) REFERENCES users (id) ON DELETE SET NULL,
    CONSTRAINT events_deleted_by_fkey
        FOREIGN KEY (deleted_by) REFERENCES users (id) ON DELETE SET NULL,

    CONSTRAINT events_event_type_valid
        CHECK (event_type IN ('feeding', 'diaper', 'sleep', 'note')),

    -- Timestamps (PRD 8 EventTimestamp: UTC instant + IANA zone + offset).
    -- Offsets beyond +-18 h do not exist in tzdata (real range -12..+14 h).
    CONSTRAINT events_start_offset_valid
        CHECK (start_offset_seconds BETWEEN -64800 AND 64800),
    CONSTRAINT events_end_offset_valid
        CHECK (end_offset_seconds BETWEEN -64800 AND 64800),
    CONSTRAINT events_end_all_or_none
        CHECK ((end_time IS NULL) = (end_tz IS NULL)
           AND (end_time IS NULL) = (end_offset_seconds IS NULL)),
    CONSTRAINT events_end_after_start
        CHECK (end_time >= start_time),
    CONSTRAINT events_max_duration_24h
        CHECK (end_time - start_time <= interval '24 hours'),

    -- Soft delete bookkeeping.
    CONSTRAINT events_deleted_by_requires_deleted_at
        CHECK (deleted_by IS NULL OR deleted_at IS NOT NULL),
    CONSTRAINT events_revision_positive
        CHECK (revision >= 1),

    -- data, per event_type (unknown keys refused; see the functions below).
    CONSTRAINT events_data_is_object
        CHECK (jsonb_typeof(data) = 'object')
    -- events_feeding_data_valid, events_diaper_data_valid,
    -- events_sleep_data_valid, events_note_data_valid: added below, once
    -- their helper functions exist.
);

ALTER SEQUENCE events_change_seq OWNED BY events.change_seq;

------------------------------------------------------------------------------
-- data validation, one IMMUTABLE function per event_type
------------------------------------------------------------------------------
-- Optional keys may be absent or JSON null (null = absent). Numbers are mL.

CREATE FUNCTION event_feeding_data_is_valid(d jsonb) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    IF d IS NULL OR jsonb_typeof(d) <> 'object' THEN
        RETURN false;
    END IF;

    IF d -> 'kind' = '"breast"' THEN
        -- {"kind":"breast","started_side":"left"|"right","both_sides":bool}
        RETURN (d - ARRAY['kind', 'started_side', 'both_sides']) = '{}'::jsonb
           AND coalesce(d -> 'started_side' IN ('"left"'::jsonb, '"right"'::jsonb), false)
           AND coalesce(jsonb_typeof(d -> 'both_sides') = 'boolean', false);
    END IF;

    IF d -> 'kind' = '"bottle"' THEN
        IF coalesce(jsonb_typeof(d -> 'amount_ml'), 'null') <> 'null' THEN
            -- Simple form: {"kind":"bottle","amount_ml":120} (amount fed).
            RETURN (d - ARRAY['kind', 'amount_ml']) = '{}'::jsonb
               AND jsonb_is_positive_number(d -> 'amount_ml');
        END IF;
        -- Prepared-bottle form (PRD 4.2 / 8):
        -- {"kind":"bottle","amount_prepared_ml":150,
        --  "amount_remaining_ml":20 (optional, 0..prepared),
        --  "feeding_started_at":"2026-01-02T08:20:00Z" (optional)}
        IF (d - ARRAY['kind', 'amount_ml', 'amount_prepared_ml',
                      'amount_remaining_ml', 'feeding_started_at']) <> '{}'::jsonb THEN
            RETURN false;
        END IF;
        IF NOT jsonb_is_positive_number(d -> 'amount_prepared_ml') THEN
            RETURN false;
        END IF;
        IF coalesce(jsonb_typeof(d -> 'amount_remaining_ml'), 'null') <> 'null' THEN
            IF NOT jsonb_is_nonnegative_number(d -> 'amount_remaining_ml') THEN
                RETURN false;
            END IF;
            IF (d ->> 'amount_remaining_ml')::numeric > (d ->> 'amount_prepared_ml')::numeric THEN
                RETURN false;
            END IF;
        END IF;
        IF coalesce(jsonb_typeof(d -> 'feeding_started_at'), 'null') <> 'null'
           AND NOT jsonb_is_iso_timestamp(d -> 'feeding_started_at') THEN
            RETURN false;
        END IF;
        RETURN true;
    END IF;

    RETURN false;   -- kind missing or not breast/bottle
END
$$;

COMMENT ON FUNCTION event_feeding_data_is_valid(jsonb) IS
'events_feeding_data_valid: kind "breast" with started_side ("left"|"right") and both_sides (boolean), both required; or kind "bottle" with either amount_ml > 0 alone, or amount_prepared_ml > 0 plus optional amount_remaining_ml (0..amount_prepared_ml) and optional feeding_started_at (ISO 8601 with offset). Amounts in mL. Any other key is refused. JSON null = absent for optional keys.';

CREATE FUNCTION event_diaper_data_is_valid(d jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT coalesce(
               jsonb_typeof(d) = 'object'
               AND (d - 'contents') = '{}'::jsonb
               AND d -> 'contents' IN ('"wet"'::jsonb, '"dirty"'::jsonb, '"both"'::jsonb),
           false)
$$;

COMMENT ON FUNCTION event_diaper_data_is_valid(jsonb) IS
'events_diaper_data_valid: exactly {"contents": "wet"|"dirty"|"both"}.';

CREATE FUNCTION event_sleep_data_is_valid(d jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT coalesce(d = '{}'::jsonb, false)
$$;

COMMENT ON FUNCTION event_sleep_data_is_valid(jsonb) IS
'events_sleep_data_valid: a sleep has no data keys, data = {}. Timing is start_time/end_time.';

CREATE FUNCTION event_note_data_is_valid(d jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT coalesce(
               jsonb_typeof(d) = 'object'
               AND (d - 'category') = '{}'::jsonb
               AND jsonb_is_nonblank_string(d -> 'category'),
           false)
$$;

COMMENT ON FUNCTION event_note_data_is_valid(jsonb) IS
'events_note_data_valid: exactly {"category": non-blank string}. The note text itself lives in events.notes.';

ALTER TABLE events
    ADD CONSTRAINT events_feeding_data_valid
        CHECK (event_type <> 'feeding' OR event_feeding_data_is_valid(data)),
    ADD CONSTRAINT events_diaper_data_valid
        CHECK (event_type <> 'diaper' OR event_diaper_data_is_valid(data)),
    ADD CONSTRAINT events_sleep_data_valid
        CHECK (event_type <> 'sleep' OR event_sleep_data_is_valid(data)),
    ADD CONSTRAINT events_note_data_valid
        CHECK (event_type <> 'note' OR event_note_data_is_valid(data));

------------------------------------------------------------------------------
-- Indexes
------------------------------------------------------------------------------

-- PRD 8, baby_id -> child_id, same columns / order / direction / predicate.
CREATE INDEX idx_events_child_time
    ON events (child_id, start_time DESC);
CREATE INDEX idx_events_child_active
    ON events (child_id, event_type, end_time)
    WHERE end_time IS NULL AND deleted_at IS NULL;
CREATE INDEX idx_events_updated
    ON events (child_id, updated_at DESC);

-- Sync cursor, per child.
CREATE INDEX idx_events_child_change
    ON events (child_id, change_xid, change_seq);

-- PRD 4.3 / 12: never two active sleeps for one child. Ended or
-- soft-deleted sleeps do not count.
CREATE UNIQUE INDEX events_one_active_sleep
    ON events (child_id)
    WHERE event_type = 'sleep' AND end_time IS NULL AND deleted_at IS NULL;

-- PRD 12: only one bottle feeding in progress per child (feeding started,
-- not ended). Any number of prepared bottles (no feeding_started_at) is fine.
CREATE UNIQUE INDEX events_one_bottle_in_progress
    ON events (child_id)
    WHERE event_type = 'feeding'
      AND (data ->> 'kind') = 'bottle'
      AND (data ->> 'feeding_started_at') IS NOT NULL
      AND end_time IS NULL
      AND deleted_at IS NULL;

-- Purge of soft-deleted events (purge_deleted_events).
CREATE INDEX idx_events_deleted_at
    ON events (deleted_at)
    WHERE deleted_at IS NOT NULL;

-- Foreign keys to users with ON DELETE SET NULL: account deletion must not
-- scan the whole table.
CREATE INDEX idx_events_logged_by  ON events (logged_by);
CREATE INDEX idx_events_updated_by ON events (updated_by);
CREATE INDEX idx_events_deleted_by ON events (deleted_by) WHERE deleted_by IS NOT NULL;

------------------------------------------------------------------------------
-- Triggers
------------------------------------------------------------------------------

CREATE FUNCTION events_bookkeeping() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.logged_by IS NULL THEN
            RAISE EXCEPTION 'events.logged_by is required when an event is created'
                USING ERRCODE    = 'not_null_violation',      -- 23502
                      CONSTRAINT = 'events_logged_by_required',
                      SCHEMA     = TG_TABLE_SCHEMA,
                      TABLE      = TG_TABLE_NAME,
                      COLUMN     = 'logged_by';
        END IF;
        NEW.revision   := 1;
        NEW.updated_by := coalesce(NEW.updated_by, NEW.logged_by);
    ELSE
        IF NEW.id <> OLD.id THEN
            RAISE EXCEPTION 'events.id cannot be changed'
                USING ERRCODE    = 'check_violation',         -- 23514
                      CONSTRAINT = 'events_id_immutable',
                      SCHEMA     = TG_TABLE_SCHEMA,
                      TABLE      = TG_TABLE_NAME,
                      COLUMN     = 'id';
        END IF;
        IF NEW.child_id <> OLD.child_id THEN
            RAISE EXCEPTION 'events.child_id cannot be changed (event %)', OLD.id
                USING ERRCODE    = 'check_violation',         -- 23514
                      CONSTRAINT = 'events_child_id_immutable',
                      SCHEMA     = TG_TABLE_SCHEMA,
                      TABLE      = TG_TABLE_NAME,
                      COLUMN     = 'child_id',
                      HINT       = 'Soft-delete the event and log a new one for the other child.';
        END IF;
        NEW.created_at := OLD.created_at;
        NEW.revision   := OLD.revision + 1;
        NEW.updated_at := now();
        IF OLD.deleted_at IS NOT NULL AND NEW.deleted_at IS NULL THEN
            NEW.deleted_by := NULL;        -- restore clears the deleter
        END IF;
    END IF;

    -- Sync cursor (see the header of 0005_events.sql).
    NEW.change_xid := pg_current_xact_id();
    NEW.change_seq := nextval('events_change_seq');
    RETURN NEW;
END
$$;

COMMENT ON FUNCTION events_bookkeeping() IS
'Trigger function (BEFORE INSERT OR UPDATE on events). INSERT: logged_by required (23502, events_logged_by_required), revision := 1, updated_by defaults to logged_by. UPDATE: id and child_id immutable (23514, events_id_immutable / events_child_id_immutable), created_at kept, revision := OLD.revision + 1, updated_at := now(), deleted_by cleared on restore (deleted_at set -> NULL). Both: change_xid := pg_current_xact_id(), change_seq := nextval(events_change_seq).';

CREATE TRIGGER events_bookkeeping
    BEFORE INSERT OR UPDATE ON events
    FOR EACH ROW EXECUTE FUNCTION events_bookkeeping();

CREATE FUNCTION events_check_timezones() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF (TG_OP = 'INSERT' OR NEW.start_tz IS DISTINCT FROM OLD.start_tz)
       AND NOT is_valid_timezone(NEW.start_tz) THEN
        RAISE EXCEPTION 'invalid time zone "%" for events.start_tz', NEW.start_tz
            USING ERRCODE    = 'check_violation',             -- 23514
                  CONSTRAINT = 'events_start_tz_valid',
                  SCHEMA     = TG_TABLE_SCHEMA,
                  TABLE      = TG_TABLE_NAME,
                  COLUMN     = 'start_tz',
                  HINT       = 'Use an IANA time zone name listed in pg_timezone_names, e.g. America/New_York.';
    END IF;
    IF NEW.end_tz IS NOT NULL
       AND (TG_OP = 'INSERT' OR NEW.end_tz IS DISTINCT FROM OLD.end_tz)
       AND NOT is_valid_timezone(NEW.end_tz) THEN
        RAISE EXCEPTION 'invalid time zone "%" for events.end_tz', NEW.end_tz
            USING ERRCODE    = 'check_violation',             -- 23514
                  CONSTRAINT = 'events_end_tz_valid',
                  SCHEMA     = TG_TABLE_SCHEMA,
                  TABLE      = TG_TABLE_NAME,
                  COLUMN     = 'end_tz',
                  HINT       = 'Use an IANA time zone name listed in pg_timezone_names, e.g. America/New_York.';
    END IF;
    RETURN NEW;
END
$$;

COMMENT ON FUNCTION events_check_timezones() IS
'Trigger function for events_check_timezones: refuses start_tz / end_tz values that are not IANA names known to pg_timezone_names (23514, events_start_tz_valid / events_end_tz_valid). Only checks values that are new or changed.';

CREATE TRIGGER events_check_timezones
    BEFORE INSERT OR UPDATE OF start_tz, end_tz ON events
    FOR EACH ROW EXECUTE FUNCTION events_check_timezones();

------------------------------------------------------------------------------
-- Comments
------------------------------------------------------------------------------

COMMENT ON TABLE events IS
'Every tracked event of a child: feeding, diaper, sleep, note (PRD 8 "Event"). Soft-deleted (deleted_at), purged 30 days later by purge_deleted_events(). Serves the timeline (idx_events_child_time), the dashboard''s active events (idx_events_child_active), sync (idx_events_child_change) and the typed DBA views feedings / diapers / sleeps / notes / active_sleeps. The id is generated by the client so that retried INSERTs are idempotent (INSERT ... ON CONFLICT (id) DO NOTHING).';
COMMENT ON COLUMN events.id IS 'Primary key, generated by the client (UUID) so that retries are idempotent; gen_random_uuid() only as a default for manual inserts.';
COMMENT ON COLUMN events.child_id IS 'The child this event belongs to; cannot change after insert (events_child_id_immutable).';
COMMENT ON COLUMN events.logged_by IS 'User who logged the event (caregiver attribution, PRD 4.5). Required on INSERT; set to NULL when that account is deleted.';
COMMENT ON COLUMN events.event_type IS '''feeding'', ''diaper'', ''sleep'' or ''note''. Decides which keys data may hold.';
COMMENT ON COLUMN events.start_time IS 'Start instant (UTC). Feeding/bottle: when the bottle was made (expiry reference); diaper/note: when it happened; sleep: when the baby fell asleep.';
COMMENT ON COLUMN events.start_tz IS 'IANA time zone of the device when the event started, for display in original local time (PRD 12).';
COMMENT ON COLUMN events.start_offset_seconds IS 'UTC offset in seconds of start_tz at start_time as seen by the device (handles the repeated DST hour).';
COMMENT ON COLUMN events.end_time IS 'End instant (UTC); NULL while ongoing (active sleep, bottle not finished) and for instant events. end_time >= start_time, at most 24 hours after it.';
COMMENT ON COLUMN events.end_tz IS 'IANA time zone at end_time; NULL exactly when end_time is NULL.';
COMMENT ON COLUMN events.end_offset_seconds IS 'UTC offset in seconds at end_time; NULL exactly when end_time is NULL.';
COMMENT ON COLUMN events.data IS 'Type-specific fields, checked per event_type (unknown keys refused). feeding: {"kind":"breast","started_side":"left|right","both_sides":bool} or {"kind":"bottle","amount_ml":n} or {"kind":"bottle","amount_prepared_ml":n,"amount_remaining_ml":n?,"feeding_started_at":"ISO 8601"?}; diaper: {"contents":"wet|dirty|both"}; sleep: {}; note: {"category":"..."}. Amounts in mL.';
COMMENT ON COLUMN events.notes IS 'Optional free text (for a note event: the note''s text).';
COMMENT ON COLUMN events.created_at IS 'When the server first stored the row; never changes.';
COMMENT ON COLUMN events.updated_at IS 'Last change on the server, set by trigger on every UPDATE. Not a sync cursor (see change_xid).';
COMMENT ON COLUMN events.deleted_at IS 'Soft delete: non-NULL = deleted (hidden from views and the timeline, still sent by sync as a tombstone). Purged 30 days later.';
COMMENT ON COLUMN events.updated_by IS 'User who made the last change. Defaults to logged_by on INSERT; the app must set it on every UPDATE (event_history.changed_by is taken from it). NULL after that account is deleted.';
COMMENT ON COLUMN events.deleted_by IS 'User who soft-deleted the event; only with deleted_at (events_deleted_by_requires_deleted_at), cleared on restore.';
COMMENT ON COLUMN events.revision IS 'Optimistic concurrency: 1 on INSERT, +1 on every UPDATE (trigger; the value written by the client is ignored). Update with WHERE id = $1 AND revision = $expected; 0 rows = someone else changed it.';
COMMENT ON COLUMN events.change_xid IS 'Sync cursor, part 1: top-level transaction id of the last INSERT/UPDATE (trigger). Read only rows with change_xid < pg_snapshot_xmin(pg_current_snapshot()); see 0005_events.sql. Send to clients as text (change_xid::text) and back as $1::xid8.';
COMMENT ON COLUMN events.change_seq IS 'Sync cursor, part 2: nextval(events_change_seq) at the last INSERT/UPDATE; orders rows inside one transaction. Page by (change_xid, change_seq).';

COMMENT ON INDEX events_pkey IS 'Event by id: edits, idempotent INSERT ... ON CONFLICT (id) DO NOTHING, optimistic UPDATE ... WHERE id = $1 AND revision = $2.';
COMMENT ON INDEX idx_events_child_time IS 'PRD 8 timeline: events of one child overlapping a window, newest first: WHERE child_id = $1 AND deleted_at IS NULL AND start_time < $to AND start_time >= $from - interval ''24 hours'' AND ... ORDER BY start_time DESC (see timeline_events()). The 24 h lower bound is exact because an event lasts at most 24 h (events_max_duration_24h). Also "last feed / last diaper" (ORDER BY start_time DESC LIMIT 1).';
COMMENT ON INDEX idx_events_child_active IS 'PRD 8 active/ongoing events: WHERE child_id = $1 AND event_type = ''sleep'' (or IN (...)) AND end_time IS NULL AND deleted_at IS NULL: dashboard active_sleep, bottles in progress.';
COMMENT ON INDEX idx_events_updated IS 'PRD 8 "sync queries": events of a child by last server change, WHERE child_id = $1 ORDER BY updated_at DESC (recent edits, conflict review). Incremental sync itself uses idx_events_child_change.';
COMMENT ON INDEX idx_events_child_change IS 'Incremental sync: WHERE child_id = $1 AND (change_xid, change_seq) > ($2, $3) AND change_xid < pg_snapshot_xmin(pg_current_snapshot()) ORDER BY change_xid, change_seq LIMIT $4 (sync_events_since()).';
COMMENT ON INDEX events_one_active_sleep IS 'Partial unique: refuses a second active sleep (event_type = sleep, end_time IS NULL, deleted_at IS NULL) for a child (23505). Also answers "active sleep of this child".';
COMMENT ON INDEX events_one_bottle_in_progress IS 'Partial unique (PRD 12): refuses a second bottle feeding in progress for a child (kind = bottle, feeding_started_at set, end_time IS NULL, not deleted) (23505). Prepared bottles without feeding_started_at are not limited.';
COMMENT ON INDEX idx_events_deleted_at IS 'Purge: WHERE deleted_at < now() - interval ''30 days'' (purge_deleted_events()).';
COMMENT ON INDEX idx_events_logged_by IS 'Events logged by a user: account deletion (delete_user_account, ON DELETE SET NULL of events_logged_by_fkey).';
COMMENT ON INDEX idx_events_updated_by IS 'Events last changed by a user: account deletion (ON DELETE SET NULL of events_updated_by_fkey).';
COMMENT ON INDEX idx_events_deleted_by IS 'Events soft-deleted by a user: account deletion (ON DELETE SET NULL of events_deleted_by_fkey).';

COMMENT ON TRIGGER events_bookkeeping ON events IS 'Maintains revision, updated_at, updated_by default, created_at, deleted_by and the sync cursor (change_xid, change_seq); refuses a missing logged_by and changes of id / child_id.';
COMMENT ON TRIGGER events_check_timezones ON events IS 'Refuses start_tz / end_tz unknown to pg_timezone_names (23514, events_start_tz_valid / events_end_tz_valid).';
