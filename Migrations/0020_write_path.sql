-- 0020_write_path.sql
--
-- What a write to events costs, trimmed where the cost protects nothing.
-- Every rule stays; only how it is checked changes.
--
-- 1. Time zone names live in a table, time_zone_names, instead of a session
--    setting. is_valid_timezone() used to copy a 22 kB list of names out of
--    the setting babybasics.timezone_names_cache on every call, and a session
--    without the setting (every new connection, every pooled connection after
--    RESET ALL) first rebuilt it from pg_timezone_names: about 25 ms, paid by
--    the first write of the session. Now it is one primary-key probe, the same
--    for every session. The table is filled from pg_timezone_names here;
--    refresh_time_zone_names() adds the zones of a newer tzdata after a server
--    upgrade (bbmigrate verify does not need it: the names are data).
--
-- 2. One trigger instead of two on events: events_check_timezones() is folded
--    into events_bookkeeping(), which checks the zones first (before it takes
--    any lock) and only when they are new or changed, as before.
--
-- 3. idx_events_updated (child_id, updated_at DESC) goes: no query of the
--    store, the feed or the views reads it (sync reads change_seq), and every
--    insert and every update paid for it.
--
-- Kept on purpose: the foreign keys events_updated_by_fkey and
-- events_deleted_by_fkey. delete_user_account() clears those columns itself,
-- but the keys also refuse an id that is no user at all, written by a DBA or a
-- bug; a schema that DBAs write to by hand keeps that refusal. The key on
-- deleted_by costs nothing on insert (the column is NULL).

------------------------------------------------------------------------------
-- 1. Time zone names
------------------------------------------------------------------------------

CREATE TABLE time_zone_names (
    name text PRIMARY KEY
);

CREATE FUNCTION refresh_time_zone_names() RETURNS integer
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- Adds, never removes: rows already written in a zone that a later
    -- tzdata renamed stay valid (PostgreSQL keeps old names as links).
    WITH added AS (
        INSERT INTO public.time_zone_names (name)
        SELECT n.name
          FROM pg_catalog.pg_timezone_names AS n
         WHERE n.name !~ '^(posix|right)/'
           AND n.name NOT IN ('localtime', 'posixrules', 'Factory')
        ON CONFLICT (name) DO NOTHING
        RETURNING 1)
    SELECT count(*)::integer FROM added;
$$;

REVOKE ALL ON FUNCTION refresh_time_zone_names() FROM PUBLIC;

SELECT refresh_time_zone_names();

-- Reference data, no secret: every role may read it (the trigger checks run as
-- the writing role).
GRANT SELECT ON time_zone_names TO PUBLIC;

-- plpgsql, not sql: called from a trigger, an inlined SQL function with a
-- sub-select was planned on every call (measured: +50 us per insert); this
-- one's statement is planned once per session.
CREATE OR REPLACE FUNCTION is_valid_timezone(tz text) RETURNS boolean
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    IF tz IS NULL THEN
        RETURN false;
    END IF;
    PERFORM FROM public.time_zone_names AS z WHERE z.name = tz;
    RETURN FOUND;
END
$$;

------------------------------------------------------------------------------
-- 2. One trigger on events
------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION events_bookkeeping() RETURNS trigger
LANGUAGE plpgsql
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
        -- Row first, child second, as for UPDATE and DELETE (see "Lock order"
        -- in 0011_sync_per_child.sql): an insert of an id that another
        -- transaction is changing waits for it before it takes the child.
        PERFORM 1 FROM events WHERE id = NEW.id FOR SHARE;
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

    -- Sync stamp (0013_sync_stamps_from_one_sequence.sql). 0 only when the
    -- child does not exist: events_child_id_fkey then refuses the row.
    NEW.change_seq := coalesce(sync_next_seq(NEW.child_id), 0);
    RETURN NEW;
END
$$;

DROP TRIGGER events_check_timezones ON events;
DROP FUNCTION events_check_timezones();

------------------------------------------------------------------------------
-- 3. An index nothing reads
------------------------------------------------------------------------------

DROP INDEX idx_events_updated;

------------------------------------------------------------------------------
-- Comments
------------------------------------------------------------------------------

COMMENT ON TABLE time_zone_names IS
'IANA time zone names this server knows (pg_timezone_names minus the posix/, right/, localtime, posixrules and Factory file-system artefacts): what is_valid_timezone() accepts for children.timezone and events.start_tz / end_tz. Filled by 0020_write_path.sql; after a server or tzdata upgrade, SELECT refresh_time_zone_names() adds new zones (it never removes one).';
COMMENT ON COLUMN time_zone_names.name IS 'The zone name, e.g. America/New_York.';
COMMENT ON INDEX time_zone_names_pkey IS 'One probe per zone check (is_valid_timezone).';
COMMENT ON FUNCTION refresh_time_zone_names() IS
'Adds the zones of pg_timezone_names that time_zone_names lacks (posix/, right/, localtime, posixrules and Factory excepted); returns how many. Never removes a name. Run it as the schema owner after upgrading the server or its tzdata.';
COMMENT ON FUNCTION is_valid_timezone(text) IS
'True when tz is in time_zone_names (IANA names known to this server); false for NULL. One primary-key probe; STABLE.';
COMMENT ON FUNCTION events_bookkeeping() IS
'Trigger function (BEFORE INSERT OR UPDATE on events). Zones: start_tz and end_tz must be in time_zone_names when new or changed (23514, events_start_tz_valid / events_end_tz_valid). INSERT: logged_by required (23502, events_logged_by_required), revision := 1, updated_by defaults to logged_by. UPDATE: id and child_id immutable (23514, events_id_immutable / events_child_id_immutable), created_at kept, revision := OLD.revision + 1, updated_at := now(), deleted_by cleared on restore (deleted_at set -> NULL). Both: change_seq := sync_next_seq(child_id), the child''s next sync stamp (0013).';
