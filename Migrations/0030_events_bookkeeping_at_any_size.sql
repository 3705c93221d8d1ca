-- 0030_events_bookkeeping_at_any_size.sql
--
-- The same rules on events. Two changes to trigger function
-- events_bookkeeping(); nothing a row may hold changes, and no row is read.
--   1. Bulk writes of one child stay linear on a new or small table.
--   2. An event of a child that does not exist is refused as the foreign key
--      refuses it (23503, events_child_id_fkey), however many rows the
--      statement writes.
--
-- 1. Lookups planned for any size
--
-- Why: PL/pgSQL plans each query of a trigger once per session and keeps the
-- plan (a generic plan, after five custom ones) until the table's statistics
-- change. events_bookkeeping's "row first" lock (0022),
--     SELECT 1 FROM events WHERE id = $1 AND child_id = $2 FOR SHARE
-- is meant to be one probe of events_pkey (id, child_id). But planned while
-- events is empty or small, it is not:
--   * on an empty table (a new database, every test database), the planner
--     expects one row from any index that has child_id and picks the smaller
--     one, idx_events_updated (child_id, updated_at), then reads every row of
--     the child to find the key;
--   * on a small table with statistics (after the first few dozen events), it
--     picks a sequential scan.
-- Either plan stays while one transaction writes on, so each row read all the
-- child's rows (or the table) written before it: quadratic. Measured on
-- PostgreSQL 15, 40,000 events of a new child in one INSERT ... SELECT on a
-- fresh database: 160 s; the same on a database with statistics: 8 s.
-- Production heals at the next ANALYZE, but a first import, a restore into an
-- empty schema, and every test database start on the bad plan.
--
-- What changes:
--   * the lock compares the child with IS NOT DISTINCT FROM, which no index
--     serves (child_id is NOT NULL, so it matches the same row as =): only
--     events_pkey, whose first column is id, can find the row;
--   * events_bookkeeping runs with enable_seqscan = off (its SET clause: the
--     setting holds while the function runs, and nowhere else). It decides
--     the plans made there: the function's own, and sync_next_seq's when a
--     session first plans them for an event (PL/pgSQL plans each query of a
--     function once per session, whoever calls it). Each is a lookup by a key
--     (the row, the child, the counter, the zone), and an index is what a
--     lookup by key should use at any size. A sequential scan stays possible
--     where no index fits; it is only costed as a last resort.
-- Tests/SchemaTests/TriggerPlanTests.swift counts the scans a bulk insert makes
-- on a new and on a small analyzed table (no index but the key's, no
-- sequential scan), and checks that an insert still waits for a concurrent
-- change of its key before it takes the child's counter.
--
-- Citus: the lock must name the distribution column with = so that Citus
-- sends it to the one shard that holds the child; there (a database with the
-- citus extension) the function keeps 0022's comparison. The shard plans that
-- query afresh with its values each time, so the generic plan above is not a
-- question there.
--
-- 2. An unknown child is a foreign key error
--
-- sync_next_seq() returns NULL when the child does not exist, and the stamp
-- was then 0, for events_child_id_fkey to refuse the row at the end of the
-- statement. But a statement of two or more rows of that child met the unique
-- key (child_id, change_seq) first, at its second row, and reported a
-- duplicate stamp 0 (23505, events_child_change_seq_key): the wrong error for
-- a DBA's multi-row INSERT or a COPY with a mistyped child id. An INSERT now
-- raises the foreign key's own error there (same SQLSTATE, constraint, message
-- and detail). An UPDATE keeps stamp 0 (its child deleted earlier in the same
-- transaction, the case 0022 kept it for), and so does a row without a child,
-- for child_id's NOT NULL to refuse it (23502). Tested by
-- EventConstraintTests.eventsOfAnUnknownChildAreAForeignKeyError.
--
-- Lock: CREATE OR REPLACE FUNCTION only; no lock on events.

CREATE OR REPLACE FUNCTION events_bookkeeping() RETURNS trigger
LANGUAGE plpgsql
SET enable_seqscan = off
AS $$
BEGIN
    -- Zones first: a refused row takes no lock.
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
        -- Row first, child second (see "Lock order" in 0011 and 0022): an
        -- insert of a key that another transaction is changing waits for it
        -- before it takes the child. The key is (id, child_id); the child is
        -- compared in a form no index serves, so that only events_pkey can
        -- find the row (see 0030).
        PERFORM 1 FROM events WHERE id = NEW.id AND child_id IS NOT DISTINCT FROM NEW.child_id FOR SHARE;
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

    -- Sync stamp: the child's next counter value (0022); NULL when the child
    -- does not exist. An insert is then refused as events_child_id_fkey
    -- refuses it (0030); an update keeps stamp 0.
    NEW.change_seq := sync_next_seq(NEW.child_id);
    IF NEW.change_seq IS NULL THEN
        IF TG_OP = 'INSERT' AND NEW.child_id IS NOT NULL THEN  -- NULL: the NOT NULL says so
            RAISE EXCEPTION 'insert or update on table "events" violates foreign key constraint "events_child_id_fkey"'
                USING ERRCODE    = 'foreign_key_violation',   -- 23503
                      CONSTRAINT = 'events_child_id_fkey',
                      SCHEMA     = TG_TABLE_SCHEMA,
                      TABLE      = TG_TABLE_NAME,
                      DETAIL     = format('Key (child_id)=(%s) is not present in table "children".', NEW.child_id),
                      HINT       = 'Create the child first, in an earlier statement.';
        END IF;
        NEW.change_seq := 0;
    END IF;
    RETURN NEW;
END
$$;

COMMENT ON FUNCTION events_bookkeeping() IS
'Trigger function (BEFORE INSERT OR UPDATE on events). Zones: start_tz and end_tz must be in time_zone_names when new or changed (23514, events_start_tz_valid / events_end_tz_valid). INSERT: logged_by required (23502, events_logged_by_required), revision := 1, updated_by defaults to logged_by; a child that does not exist is refused as its foreign key refuses it (23503, events_child_id_fkey; 0030). UPDATE: id and child_id immutable (23514, events_id_immutable / events_child_id_immutable), created_at kept, revision := OLD.revision + 1, updated_at := now(), deleted_by cleared on restore (deleted_at set -> NULL). Both: change_seq := sync_next_seq(child_id), the child''s next sync stamp (its counter, 0022). Runs with enable_seqscan = off: its lookups by key use their index however small the table was when the session planned them (0030).';

DO $citus$
DECLARE
    definition text;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus') THEN
        RETURN; -- a plain PostgreSQL server: the function above as it is
    END IF;
    SET LOCAL citus.enable_ddl_propagation = on;
    definition := pg_get_functiondef('events_bookkeeping()'::regprocedure);
    EXECUTE replace(definition, 'AND child_id IS NOT DISTINCT FROM NEW.child_id FOR SHARE;',
                    'AND child_id = NEW.child_id FOR SHARE; -- = for Citus routing (0030)');
    IF pg_get_functiondef('events_bookkeeping()'::regprocedure) = definition THEN
        RAISE EXCEPTION 'events_bookkeeping has no IS NOT DISTINCT FROM lock to change for Citus: update 0030 for its current definition';
    END IF;
END
$citus$;
