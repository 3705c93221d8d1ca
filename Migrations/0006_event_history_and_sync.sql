-- 0006_event_history_and_sync.sql
--
-- event_history (PRD 7.4 "never lose data silently", base of a later undo),
-- the sync reader, the timeline reader and the purge of soft-deleted events.
--
-- History format: one row per UPDATE of an event (soft delete and restore
-- are UPDATEs too), holding the PREVIOUS version of the row as a jsonb
-- snapshot (row_before = to_jsonb(OLD), every column of events) plus typed
-- key columns (event_id, child_id, revision, operation, changed_by,
-- changed_at). A snapshot rather than a mirror of every column because:
--   * adding a column to events needs no change here, and old snapshots
--     keep the shape they had;
--   * a version is turned back into a typed row with
--       jsonb_populate_record(NULL::events, row_before)
--     which is what an undo needs.
-- Rows are written only by the SECURITY DEFINER trigger function below; the
-- application role can read history but not write, change or delete it.
-- Snapshots may keep the uuid of a since-deleted account (logged_by etc.);
-- it no longer resolves to any person (the users row is gone).

CREATE TABLE event_history (
    id          bigint      GENERATED ALWAYS AS IDENTITY,
    event_id    uuid        NOT NULL,
    child_id    uuid        NOT NULL,
    revision    integer     NOT NULL,
    operation   text        NOT NULL,
    changed_by  uuid        NULL,
    changed_at  timestamptz NOT NULL DEFAULT now(),
    row_before  jsonb       NOT NULL,

    CONSTRAINT event_history_pkey PRIMARY KEY (id),
    CONSTRAINT event_history_event_id_fkey
        FOREIGN KEY (event_id) REFERENCES events (id) ON DELETE CASCADE,
    CONSTRAINT event_history_changed_by_fkey
        FOREIGN KEY (changed_by) REFERENCES users (id) ON DELETE SET NULL,
    CONSTRAINT event_history_operation_valid
        CHECK (operation IN ('update', 'soft_delete', 'restore')),
    CONSTRAINT event_history_row_before_is_object
        CHECK (jsonb_typeof(row_before) = 'object')
);

-- One snapshot per revision of an event; also the "history of this event,
-- newest first" / undo lookup.
CREATE UNIQUE INDEX event_history_event_revision_key
    ON event_history (event_id, revision);

CREATE INDEX idx_event_history_changed_by
    ON event_history (changed_by)
    WHERE changed_by IS NOT NULL;

CREATE FUNCTION events_record_history() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_operation text;
BEGIN
    v_operation := CASE
        WHEN OLD.deleted_at IS NULL AND NEW.deleted_at IS NOT NULL THEN 'soft_delete'
        WHEN OLD.deleted_at IS NOT NULL AND NEW.deleted_at IS NULL THEN 'restore'
        ELSE 'update'
    END;

    INSERT INTO public.event_history
           (event_id, child_id, revision, operation, changed_by, changed_at, row_before)
    VALUES (OLD.id, OLD.child_id, OLD.revision, v_operation,
            CASE WHEN v_operation = 'soft_delete'
                 THEN coalesce(NEW.deleted_by, NEW.updated_by)
                 ELSE NEW.updated_by
            END,
            NEW.updated_at,
            to_jsonb(OLD));
    RETURN NULL;
END
$$;

REVOKE ALL ON FUNCTION events_record_history() FROM PUBLIC;

COMMENT ON FUNCTION events_record_history() IS
'Trigger function (AFTER UPDATE on events, SECURITY DEFINER, fixed search_path): stores the previous version of the row in event_history with operation update / soft_delete / restore, changed_by = NEW.deleted_by (soft delete) or NEW.updated_by, changed_at = NEW.updated_at.';

CREATE TRIGGER events_record_history
    AFTER UPDATE ON events
    FOR EACH ROW EXECUTE FUNCTION events_record_history();

------------------------------------------------------------------------------
-- Readers (convenience; the columns are the contract)
------------------------------------------------------------------------------

CREATE FUNCTION sync_events_since(
    p_child_id  uuid,
    p_after_xid xid8    DEFAULT '0',
    p_after_seq bigint  DEFAULT 0,
    p_limit     integer DEFAULT 500
) RETURNS SETOF events
LANGUAGE sql
STABLE
AS $$
    SELECT e.*
      FROM events AS e
     WHERE e.child_id = p_child_id
       AND (e.change_xid, e.change_seq) > (p_after_xid, p_after_seq)
       AND e.change_xid < pg_snapshot_xmin(pg_current_snapshot())
     ORDER BY e.change_xid, e.change_seq
     LIMIT p_limit
$$;

COMMENT ON FUNCTION sync_events_since(uuid, xid8, bigint, integer) IS
'Incremental sync page for one child: events (deleted ones included, as tombstones) whose (change_xid, change_seq) is after the cursor, restricted to transactions older than the oldest running one so that a late committer is never skipped (reasoning in 0005_events.sql). The next cursor is the (change_xid, change_seq) of the last row returned; an empty page means "up to date for now". Start with (''0'', 0). Uses idx_events_child_change.';

CREATE FUNCTION timeline_events(p_child_id uuid, p_from timestamptz, p_to timestamptz)
RETURNS SETOF events
LANGUAGE sql
STABLE
AS $$
    SELECT e.*
      FROM events AS e
     WHERE e.child_id = p_child_id
       AND e.deleted_at IS NULL
       AND e.start_time < p_to
       -- exact lower bound: an event lasts at most 24 h (events_max_duration_24h)
       AND e.start_time >= p_from - interval '24 hours'
       AND (coalesce(e.end_time, e.start_time) >= p_from
            OR (e.end_time IS NULL AND e.event_type IN ('sleep', 'feeding')))
     ORDER BY e.start_time DESC
$$;

COMMENT ON FUNCTION timeline_events(uuid, timestamptz, timestamptz) IS
'Timeline: non-deleted events of a child overlapping [p_from, p_to), newest first. Diapers/notes are instants at start_time; sleeps/feedings without end_time are ongoing. An ongoing event that started more than 24 h before p_from is not returned (it can no longer be ended validly); the dashboard''s active-event query (idx_events_child_active) still finds it. Uses idx_events_child_time.';

------------------------------------------------------------------------------
-- Purge (PRD 11: soft delete with a 30-day recovery window)
------------------------------------------------------------------------------

CREATE FUNCTION purge_deleted_events(older_than interval DEFAULT '30 days')
RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_count bigint;
BEGIN
    IF older_than IS NULL OR older_than < interval '30 days' THEN
        RAISE EXCEPTION 'purge_deleted_events: older_than must be at least 30 days (PRD 11 recovery window), got %',
                        coalesce(older_than::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';      -- 22023
    END IF;

    -- event_history rows go with their event (event_history_event_id_fkey
    -- ON DELETE CASCADE), in the same statement. A concurrent restore wins:
    -- the row no longer matches when the DELETE re-checks it.
    WITH purged AS (
        DELETE FROM public.events
         WHERE deleted_at < now() - older_than
        RETURNING 1
    )
    SELECT count(*) INTO v_count FROM purged;

    RETURN v_count;
END
$$;

REVOKE ALL ON FUNCTION purge_deleted_events(interval) FROM PUBLIC;

COMMENT ON FUNCTION purge_deleted_events(interval) IS
'Hard-deletes events soft-deleted more than older_than ago (default and minimum 30 days, PRD 11) together with their event_history; returns the number of events deleted. SECURITY DEFINER with search_path pinned to pg_catalog, public, pg_temp: the only way the application role can hard-delete events. older_than NULL or < 30 days: SQLSTATE 22023. Run it from a daily job.';

------------------------------------------------------------------------------
-- Comments
------------------------------------------------------------------------------

COMMENT ON TABLE event_history IS
'Previous versions of events: one row per UPDATE (edit, soft delete, restore) with who and when (PRD 7.4 "never lose data silently"; base of undo, PRD 14 #5). Written only by trigger events_record_history; deleted with its event (purge, child deletion). Serves "history of this event": WHERE event_id = $1 ORDER BY revision DESC.';
COMMENT ON COLUMN event_history.id IS 'Surrogate key, in insertion order.';
COMMENT ON COLUMN event_history.event_id IS 'The event (events.id) this is a previous version of.';
COMMENT ON COLUMN event_history.child_id IS 'The event''s child (copied for DBA queries; events.child_id never changes).';
COMMENT ON COLUMN event_history.revision IS 'events.revision of the stored version; the change produced revision + 1. Unique per event.';
COMMENT ON COLUMN event_history.operation IS '''update'', ''soft_delete'' (deleted_at NULL -> set) or ''restore'' (deleted_at set -> NULL).';
COMMENT ON COLUMN event_history.changed_by IS 'Who made the change: the new row''s deleted_by for a soft delete, else its updated_by. NULL for system changes (account deletion) or when that account has been deleted.';
COMMENT ON COLUMN event_history.changed_at IS 'When the change was made (the new row''s updated_at).';
COMMENT ON COLUMN event_history.row_before IS 'The complete previous row, to_jsonb(OLD). Typed: jsonb_populate_record(NULL::events, row_before); one field: row_before ->> ''start_time''.';

COMMENT ON SEQUENCE event_history_id_seq IS 'Identity sequence of event_history.id.';

COMMENT ON INDEX event_history_pkey IS 'History row by id.';
COMMENT ON INDEX event_history_event_revision_key IS 'History of one event, newest first / undo: WHERE event_id = $1 ORDER BY revision DESC; also the ON DELETE CASCADE from events (purge). Refuses two snapshots of the same revision (23505).';
COMMENT ON INDEX idx_event_history_changed_by IS 'Changes made by a user: account deletion (ON DELETE SET NULL of event_history_changed_by_fkey), audits.';

COMMENT ON TRIGGER events_record_history ON events IS 'Keeps the previous version of every updated / soft-deleted / restored event in event_history.';
