-- 0029_rules_prepared_once_per_session.sql
--
-- The same rules on events, cheaper to prepare. Nothing a row may hold
-- changes; no constraint is renamed; no row is re-checked.
--
-- Why: PostgreSQL prepares every CHECK of a table again for each INSERT or
-- UPDATE statement, prepared statements included. It reads the stored
-- expression back, and inlines each SQL-language function the expression
-- calls: it parses and analyzes that function's body, every statement. A
-- PL/pgSQL function is compiled once per session and its expressions are
-- planned once per session, so a CHECK that calls one costs a function call
-- per row and nothing more per statement.
--
-- Measured on PostgreSQL 15 (server CPU of a backend running one-row diaper
-- inserts, each its own transaction, the bench's insert): the CHECKs of
-- events cost about 90 of 150 µs per insert, while a 20,000-row
-- INSERT ... SELECT paid them almost nothing per row. The five SQL functions
-- inlined into CHECKs (the zone offset, twice, and the diaper, sleep and
-- note validators) were most of it, then the size of the first-sip rule's
-- expression (4.5 kB of stored tree, a quarter of all). After this file:
-- 110 µs instead of 163 in the same run, a third less; the per-row cost of a
-- large INSERT is unchanged (45-46 µs). make bench reports the server time.
--
-- What changes:
--   * utc_offset_seconds, event_diaper_data_is_valid,
--     event_sleep_data_is_valid and event_note_data_is_valid: the same
--     expressions, in PL/pgSQL instead of SQL.
--   * events_bottle_first_sip_within_life: the same rule, its body in
--     event_bottle_first_sip_is_within_life(data, start_time, end_time).
--     The CHECK still decides first whether there is a first sip at all,
--     so rows without one never call the function.
--
-- Restore: a pg_dump restore evaluates every CHECK with an empty search
-- path. The diaper, sleep and zone functions call only pg_catalog; the note
-- validator and the first-sip function call helpers of this schema, so their
-- search_path stays pinned to it (as 0012 did). Tested by
-- SyncFeedTests.aCursorSurvivesDumpAndRestore with one event of each kind.
--
-- Lock: the first-sip constraint is dropped and added back NOT VALID in one
-- ALTER TABLE: ACCESS EXCLUSIVE on events for a moment, no row is read. New
-- and updated rows are checked at once, as before. A DBA who had validated
-- the old constraint can validate the new one when convenient (it reads the
-- table under SHARE UPDATE EXCLUSIVE: writes go on):
--     ALTER TABLE events VALIDATE CONSTRAINT events_bottle_first_sip_within_life;

CREATE OR REPLACE FUNCTION utc_offset_seconds(zone text, instant timestamptz) RETURNS integer
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
BEGIN
    RETURN extract(epoch FROM (instant AT TIME ZONE zone) - (instant AT TIME ZONE 'UTC'))::integer;
END
$$;

CREATE OR REPLACE FUNCTION event_diaper_data_is_valid(d jsonb) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    RETURN coalesce(
               jsonb_typeof(d) = 'object'
               AND (d - 'contents') = '{}'::jsonb
               AND d -> 'contents' IN ('"wet"'::jsonb, '"dirty"'::jsonb, '"both"'::jsonb),
           false);
END
$$;

CREATE OR REPLACE FUNCTION event_sleep_data_is_valid(d jsonb) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    RETURN coalesce(d = '{}'::jsonb, false);
END
$$;

CREATE OR REPLACE FUNCTION event_note_data_is_valid(d jsonb) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN coalesce(
               jsonb_typeof(d) = 'object'
               AND (d - 'category') = '{}'::jsonb
               AND jsonb_is_nonblank_string(d -> 'category'),
           false);
END
$$;

CREATE FUNCTION event_bottle_first_sip_is_within_life(d jsonb, made timestamptz, finished timestamptz) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path FROM CURRENT
AS $$
DECLARE
    first_sip timestamptz;
BEGIN
    -- Only a well-formed first sip is placed in time; its form is
    -- events_feeding_data_valid's to refuse (no cast of anything else).
    IF d ->> 'feeding_started_at' IS NULL OR NOT jsonb_is_iso_timestamp(d -> 'feeding_started_at') THEN
        RETURN true;
    END IF;
    first_sip := (d ->> 'feeding_started_at')::timestamptz;
    RETURN first_sip >= made
       AND first_sip <= made + interval '24 hours'
       AND (finished IS NULL OR first_sip <= finished);
END
$$;

COMMENT ON FUNCTION event_bottle_first_sip_is_within_life(jsonb, timestamptz, timestamptz) IS
'events_bottle_first_sip_within_life: data.feeding_started_at, when it is an ISO 8601 timestamp, lies between "made" (start_time) and 24 hours later, and not after "finished" (end_time, NULL while unfinished).';

ALTER TABLE events
    DROP CONSTRAINT events_bottle_first_sip_within_life,
    ADD CONSTRAINT events_bottle_first_sip_within_life CHECK (
        data ->> 'feeding_started_at' IS NULL
        OR event_bottle_first_sip_is_within_life(data, start_time, end_time)
    ) NOT VALID;

COMMENT ON CONSTRAINT events_bottle_first_sip_within_life ON events IS
'A bottle''s first sip (data.feeding_started_at) is not before it was made (start_time), not more than 24 hours after, nor after it was finished (end_time) (23514). NOT VALID: rows older than 0017 are checked when next updated.';
