-- 0016_offsets_match_zones.sql
--
-- An event stores its instant (UTC), its IANA zone and the UTC offset of
-- that zone at that instant, so that it can be shown on the wall clock where
-- it happened. The offset was not checked: New York with +01:00 in July is
-- garbage that shifts every local display of the event by five hours. Now
-- the offset must be the zone's at that instant. A repeated hour (fall back)
-- is not ambiguous here: each of its two instants has its own offset, so a
-- client that picked either reading of 01:30 stored a consistent pair.
--
-- NOT VALID: rows written before this migration are not re-checked now (a
-- deploy must not fail on old data), but any UPDATE of such a row must fix
-- its offsets. To find them, then check them all:
--     SELECT id, start_tz, start_offset_seconds, utc_offset_seconds(start_tz, start_time)
--       FROM events WHERE start_offset_seconds <> utc_offset_seconds(start_tz, start_time)
--          OR end_offset_seconds <> utc_offset_seconds(end_tz, end_time);
--     ALTER TABLE events VALIDATE CONSTRAINT events_start_offset_matches_zone,
--                        VALIDATE CONSTRAINT events_end_offset_matches_zone;
--
-- The zone rules are the server's tz database. Its updates change offsets of
-- future instants (a country ends DST); events are logged at or before now,
-- so rows stay valid across updates, and a pg_dump restores on a server whose
-- tz database is at least as new.

CREATE FUNCTION utc_offset_seconds(zone text, instant timestamptz) RETURNS integer
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT extract(epoch FROM (instant AT TIME ZONE zone) - (instant AT TIME ZONE 'UTC'))::integer
$$;

COMMENT ON FUNCTION utc_offset_seconds(text, timestamptz) IS
'The UTC offset in seconds of IANA zone "zone" at "instant" (America/New_York in July: -14400). Used by events_start_offset_matches_zone / events_end_offset_matches_zone.';

ALTER TABLE events
    ADD CONSTRAINT events_start_offset_matches_zone
        CHECK (start_offset_seconds = utc_offset_seconds(start_tz, start_time)) NOT VALID,
    ADD CONSTRAINT events_end_offset_matches_zone
        CHECK (end_offset_seconds = utc_offset_seconds(end_tz, end_time)) NOT VALID;

COMMENT ON CONSTRAINT events_start_offset_matches_zone ON events IS 'start_offset_seconds is start_tz''s offset at start_time (23514). NOT VALID: rows older than 0016 are checked when next updated.';
COMMENT ON CONSTRAINT events_end_offset_matches_zone ON events IS 'end_offset_seconds is end_tz''s offset at end_time (23514); NULL while running. NOT VALID: rows older than 0016 are checked when next updated.';
