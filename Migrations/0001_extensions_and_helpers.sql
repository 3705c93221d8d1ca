-- 0001_extensions_and_helpers.sql
--
-- Baby Basics: shared helper functions used by the later migrations.
--
-- Extensions: none. Everything used here is core PostgreSQL 15:
--   gen_random_uuid()                       (core since 13)
--   xid8, pg_current_xact_id(),
--   pg_current_snapshot(), pg_snapshot_xmin  (core since 13)
--
-- Every file in this directory runs both with `psql -v ON_ERROR_STOP=1 -f`
-- and inside one BEGIN/COMMIT: no CONCURRENTLY, no VACUUM, no BEGIN/COMMIT.
-- Objects are created in the first schema of the search_path (normally
-- "public"); the SECURITY DEFINER functions pin search_path to
-- "pg_catalog, public, pg_temp", so this schema is expected to be public.

------------------------------------------------------------------------------
-- updated_at maintenance
------------------------------------------------------------------------------

CREATE FUNCTION set_updated_at() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    NEW.updated_at := now();
    RETURN NEW;
END
$$;

COMMENT ON FUNCTION set_updated_at() IS
'Trigger function (BEFORE UPDATE): sets NEW.updated_at to now() (transaction time). Used by users_set_updated_at and children_set_updated_at; events does the same inside events_bookkeeping().';

------------------------------------------------------------------------------
-- Time zone validation
------------------------------------------------------------------------------
-- Why a trigger and not a CHECK constraint:
--  * A CHECK cannot contain a sub-query, and pg_timezone_names is a view.
--  * Wrapping the lookup in a function falsely declared IMMUTABLE would
--    "work", but pg_timezone_names follows the server's tz database, which
--    changes with OS / PostgreSQL minor upgrades. pg_dump restores CHECK
--    constraints together with CREATE TABLE, i.e. BEFORE the data is
--    loaded, so a zone that disappeared from tzdata would make a restore
--    fail. Triggers are restored after the data (post-data section), so the
--    check only applies to new writes, which is what we want.
--  * Reading pg_timezone_names costs ~40 ms (it loads every zone file), far
--    too slow for every event insert. The list is therefore cached once per
--    session in the custom setting babybasics.timezone_names_cache
--    (~22 kB). The cache is only a cache: RESET ALL / DISCARD ALL or a new
--    connection rebuilds it. A role that can run SET could poison its own
--    session's cache; only trusted roles (the app) connect, so this is an
--    accepted trade-off.
--  * Files that the Debian/Ubuntu system tz directory exposes but that are
--    not IANA zone names are refused: "posix/..." and "right/..." copies,
--    "localtime", "posixrules" and "Factory".
-- Violations are raised by the table triggers with SQLSTATE 23514
-- (check_violation) and a constraint name such as children_timezone_valid.

CREATE FUNCTION is_valid_timezone(tz text) RETURNS boolean
LANGUAGE plpgsql
VOLATILE   -- writes a session setting (the cache); never use it in a CHECK
AS $$
DECLARE
    names text;
BEGIN
    IF tz IS NULL OR tz = '' OR pg_catalog.strpos(tz, '|') > 0 THEN
        RETURN false;
    END IF;

    names := pg_catalog.current_setting('babybasics.timezone_names_cache', true);
    IF names IS NULL OR names = '' THEN
        SELECT '|' || pg_catalog.string_agg(n.name, '|') || '|'
          INTO names
          FROM pg_catalog.pg_timezone_names AS n
         WHERE n.name !~ '^(posix|right)/'
           AND n.name NOT IN ('localtime', 'posixrules', 'Factory');
        PERFORM pg_catalog.set_config('babybasics.timezone_names_cache', names, false);
    END IF;

    RETURN pg_catalog.strpos(names, '|' || tz || '|') > 0;
END
$$;

COMMENT ON FUNCTION is_valid_timezone(text) IS
'True when tz is an IANA time zone name known to this server (pg_timezone_names, minus the posix/, right/, localtime, posixrules and Factory file-system artefacts). Cached per session in the setting babybasics.timezone_names_cache. VOLATILE: call it from triggers, never from a CHECK constraint (see 0001_extensions_and_helpers.sql for why).';

------------------------------------------------------------------------------
-- jsonb helpers for the per-event_type CHECK constraints on events.data
------------------------------------------------------------------------------
-- They return false (never NULL) for missing or mistyped values, because a
-- CHECK constraint that evaluates to NULL passes. The casts sit behind a
-- CASE so they only run once the JSON type is known to be right (AND does
-- not guarantee evaluation order).

CREATE FUNCTION jsonb_is_positive_number(v jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN pg_catalog.jsonb_typeof(v) = 'number'
                THEN (v #>> '{}')::numeric > 0
                ELSE false
           END
$$;

COMMENT ON FUNCTION jsonb_is_positive_number(jsonb) IS
'True when v is a JSON number > 0; false for NULL, missing keys and other JSON types. Used by events_feeding_data_valid.';

CREATE FUNCTION jsonb_is_nonnegative_number(v jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN pg_catalog.jsonb_typeof(v) = 'number'
                THEN (v #>> '{}')::numeric >= 0
                ELSE false
           END
$$;

COMMENT ON FUNCTION jsonb_is_nonnegative_number(jsonb) IS
'True when v is a JSON number >= 0; false for NULL, missing keys and other JSON types. Used by events_feeding_data_valid.';

CREATE FUNCTION jsonb_is_nonblank_string(v jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN pg_catalog.jsonb_typeof(v) = 'string'
                THEN pg_catalog.btrim(v #>> '{}') <> ''
                ELSE false
           END
$$;

COMMENT ON FUNCTION jsonb_is_nonblank_string(jsonb) IS
'True when v is a JSON string that is not empty or only white space. Used by events_note_data_valid.';

CREATE FUNCTION jsonb_is_iso_timestamp(v jsonb) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    s text;
BEGIN
    IF v IS NULL OR pg_catalog.jsonb_typeof(v) <> 'string' THEN
        RETURN false;
    END IF;
    s := v #>> '{}';
    -- ISO 8601 / RFC 3339 with an explicit offset ("Z" or +hh:mm), as
    -- produced by Swift's ISO8601DateFormatter / JSONEncoder(.iso8601).
    -- The explicit offset is what makes the result independent of the
    -- session TimeZone and DateStyle, and so honestly IMMUTABLE.
    IF s !~ '^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}(:?\d{2})?)$' THEN
        RETURN false;
    END IF;
    PERFORM s::timestamptz;     -- refuses 2026-02-30, 25:00, ...
    RETURN true;
EXCEPTION
    WHEN invalid_datetime_format OR datetime_field_overflow THEN
        RETURN false;
END
$$;

COMMENT ON FUNCTION jsonb_is_iso_timestamp(jsonb) IS
'True when v is a JSON string holding a valid ISO 8601 timestamp with an explicit offset, e.g. "2026-01-02T08:20:00Z" or "2026-01-02T09:20:00.123+01:00". Used by events_feeding_data_valid for feeding_started_at.';
