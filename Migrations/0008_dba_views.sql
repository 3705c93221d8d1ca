-- 0008_dba_views.sql
--
-- Typed, read-only views over events for DBAs and analytics: one column per
-- data key, durations computed, soft-deleted events excluded.
-- security_invoker = true: a view grants nothing by itself, the reader needs
-- SELECT on the underlying tables (babybasics_readonly has it).
-- *_local columns are the wall-clock time where the event happened, from
-- the stored offset (PRD 12: display in original local time).

CREATE VIEW feedings WITH (security_invoker = true) AS
SELECT e.id,
       e.child_id,
       e.logged_by,
       e.data ->> 'kind'                                     AS kind,
       e.data ->> 'started_side'                             AS started_side,
       (e.data ->> 'both_sides')::boolean                    AS both_sides,
       (e.data ->> 'amount_ml')::numeric                     AS amount_ml,
       (e.data ->> 'amount_prepared_ml')::numeric            AS amount_prepared_ml,
       (e.data ->> 'amount_remaining_ml')::numeric           AS amount_remaining_ml,
       coalesce((e.data ->> 'amount_ml')::numeric,
                (e.data ->> 'amount_prepared_ml')::numeric
                - (e.data ->> 'amount_remaining_ml')::numeric) AS amount_consumed_ml,
       (e.data ->> 'feeding_started_at')::timestamptz        AS feeding_started_at,
       CASE
           WHEN e.data ->> 'kind' <> 'bottle' THEN NULL
           WHEN e.data ->> 'amount_ml' IS NOT NULL OR e.end_time IS NOT NULL THEN 'finished'
           WHEN e.data ->> 'feeding_started_at' IS NOT NULL THEN 'feeding'
           ELSE 'prepared'
       END                                                   AS bottle_state,
       e.start_time,
       e.start_tz,
       e.start_offset_seconds,
       (e.start_time AT TIME ZONE 'UTC') + e.start_offset_seconds * interval '1 second' AS start_local,
       e.end_time,
       e.end_tz,
       e.end_offset_seconds,
       (e.end_time AT TIME ZONE 'UTC') + e.end_offset_seconds * interval '1 second'     AS end_local,
       e.end_time - e.start_time                             AS duration,
       round(extract(epoch FROM e.end_time - e.start_time) / 60, 1) AS duration_minutes,
       e.notes,
       e.created_at,
       e.updated_at,
       e.updated_by,
       e.revision
  FROM events AS e
 WHERE e.event_type = 'feeding'
   AND e.deleted_at IS NULL;

CREATE VIEW diapers WITH (security_invoker = true) AS
SELECT e.id,
       e.child_id,
       e.logged_by,
       e.data ->> 'contents'                          AS contents,
       e.data ->> 'contents' IN ('wet', 'both')       AS is_wet,
       e.data ->> 'contents' IN ('dirty', 'both')     AS is_dirty,
       e.start_time,
       e.start_tz,
       e.start_offset_seconds,
       (e.start_time AT TIME ZONE 'UTC') + e.start_offset_seconds * interval '1 second' AS start_local,
       e.notes,
       e.created_at,
       e.updated_at,
       e.updated_by,
       e.revision
  FROM events AS e
 WHERE e.event_type = 'diaper'
   AND e.deleted_at IS NULL;

CREATE VIEW sleeps WITH (security_invoker = true) AS
SELECT e.id,
       e.child_id,
       e.logged_by,
       e.start_time,
       e.start_tz,
       e.start_offset_seconds,
       (e.start_time AT TIME ZONE 'UTC') + e.start_offset_seconds * interval '1 second' AS start_local,
       e.end_time,
       e.end_tz,
       e.end_offset_seconds,
       (e.end_time AT TIME ZONE 'UTC') + e.end_offset_seconds * interval '1 second'     AS end_local,
       e.end_time IS NULL                                    AS is_active,
       coalesce(e.end_time, now()) - e.start_time            AS duration,
       round(extract(epoch FROM coalesce(e.end_time, now()) - e.start_time) / 60, 1) AS duration_minutes,
       e.notes,
       e.created_at,
       e.updated_at,
       e.updated_by,
       e.revision
  FROM events AS e
 WHERE e.event_type = 'sleep'
   AND e.deleted_at IS NULL;

CREATE VIEW notes WITH (security_invoker = true) AS
SELECT e.id,
       e.child_id,
       e.logged_by,
       e.data ->> 'category'                          AS category,
       e.notes,
       e.start_time,
       e.start_tz,
       e.start_offset_seconds,
       (e.start_time AT TIME ZONE 'UTC') + e.start_offset_seconds * interval '1 second' AS start_local,
       e.created_at,
       e.updated_at,
       e.updated_by,
       e.revision
  FROM events AS e
 WHERE e.event_type = 'note'
   AND e.deleted_at IS NULL;

CREATE VIEW active_sleeps WITH (security_invoker = true) AS
SELECT e.id,
       e.child_id,
       c.name                                         AS child_name,
       e.logged_by,
       e.start_time,
       e.start_tz,
       e.start_offset_seconds,
       (e.start_time AT TIME ZONE 'UTC') + e.start_offset_seconds * interval '1 second' AS start_local,
       now() - e.start_time                           AS elapsed,
       round(extract(epoch FROM now() - e.start_time) / 60, 1) AS elapsed_minutes,
       e.notes,
       e.updated_at,
       e.revision
  FROM events AS e
  JOIN children AS c ON c.id = e.child_id
 WHERE e.event_type = 'sleep'
   AND e.end_time IS NULL
   AND e.deleted_at IS NULL;

-- PRD 13 CSV export columns (plus child_id / event_id / start_time to filter
-- and order: WHERE child_id = $1 AND start_time >= $since ORDER BY start_time).
CREATE VIEW events_export WITH (security_invoker = true) AS
SELECT e.child_id,
       e.id                                            AS event_id,
       e.start_time,
       ((e.start_time AT TIME ZONE 'UTC') + e.start_offset_seconds * interval '1 second')::date AS date,
       ((e.start_time AT TIME ZONE 'UTC') + e.start_offset_seconds * interval '1 second')::time(0) AS time,
       e.event_type,
       round(extract(epoch FROM e.end_time - e.start_time) / 60)::integer AS duration_minutes,
       round((e.data ->> 'amount_prepared_ml')::numeric / 29.5735, 1) AS amount_prepared_oz,
       round(coalesce((e.data ->> 'amount_ml')::numeric,
                      (e.data ->> 'amount_prepared_ml')::numeric
                      - (e.data ->> 'amount_remaining_ml')::numeric) / 29.5735, 1) AS amount_consumed_oz,
       e.data ->> 'contents'                           AS diaper_contents,
       u.display_name                                  AS logged_by,
       e.notes
  FROM events AS e
  LEFT JOIN users AS u ON u.id = e.logged_by
 WHERE e.deleted_at IS NULL;

------------------------------------------------------------------------------
-- Comments
------------------------------------------------------------------------------

COMMENT ON VIEW feedings IS 'DBA view: non-deleted feeding events, one typed column per data key, consumed amount and bottle state computed. Filter by child_id and start_time (idx_events_child_time).';
COMMENT ON COLUMN feedings.kind IS '''breast'' or ''bottle''.';
COMMENT ON COLUMN feedings.started_side IS 'Breast: side started on, ''left'' or ''right''.';
COMMENT ON COLUMN feedings.both_sides IS 'Breast: both sides were used.';
COMMENT ON COLUMN feedings.amount_ml IS 'Bottle, simple form: amount fed in mL.';
COMMENT ON COLUMN feedings.amount_prepared_ml IS 'Bottle, prepared form: amount prepared in mL.';
COMMENT ON COLUMN feedings.amount_remaining_ml IS 'Bottle, prepared form: amount left over in mL (NULL until finished).';
COMMENT ON COLUMN feedings.amount_consumed_ml IS 'amount_ml, or amount_prepared_ml - amount_remaining_ml; NULL while unknown.';
COMMENT ON COLUMN feedings.feeding_started_at IS 'Bottle: when the feeding started (expiry becomes 1 h from then, PRD 5).';
COMMENT ON COLUMN feedings.bottle_state IS 'Bottle: ''prepared'' (not started), ''feeding'' (started, not ended), ''finished''. Expiry is time- and settings-dependent and not computed here. NULL for breast feedings.';
COMMENT ON COLUMN feedings.start_time IS 'Breast: start of feeding. Bottle: when the bottle was made.';
COMMENT ON COLUMN feedings.start_local IS 'start_time as local wall-clock time where it was logged (start_offset_seconds).';
COMMENT ON COLUMN feedings.end_local IS 'end_time as local wall-clock time (end_offset_seconds).';
COMMENT ON COLUMN feedings.duration IS 'end_time - start_time; NULL while ongoing.';
COMMENT ON COLUMN feedings.duration_minutes IS 'duration in minutes (1 decimal).';

COMMENT ON VIEW diapers IS 'DBA view: non-deleted diaper events with contents and pee/poop flags (dashboard counts: pee = is_wet, poop = is_dirty).';
COMMENT ON COLUMN diapers.contents IS '''wet'', ''dirty'' or ''both''.';
COMMENT ON COLUMN diapers.is_wet IS 'Counts as a pee: contents wet or both.';
COMMENT ON COLUMN diapers.is_dirty IS 'Counts as a poop: contents dirty or both.';
COMMENT ON COLUMN diapers.start_local IS 'start_time as local wall-clock time where it was logged.';

COMMENT ON VIEW sleeps IS 'DBA view: non-deleted sleeps with duration (running duration up to now() for the active one).';
COMMENT ON COLUMN sleeps.is_active IS 'True while the sleep has no end_time.';
COMMENT ON COLUMN sleeps.duration IS 'end_time - start_time, or now() - start_time while active.';
COMMENT ON COLUMN sleeps.duration_minutes IS 'duration in minutes (1 decimal).';
COMMENT ON COLUMN sleeps.start_local IS 'start_time as local wall-clock time where it was logged.';
COMMENT ON COLUMN sleeps.end_local IS 'end_time as local wall-clock time.';

COMMENT ON VIEW notes IS 'DBA view: non-deleted note events with their category and text.';
COMMENT ON COLUMN notes.category IS 'Note category (non-blank), e.g. Medication.';
COMMENT ON COLUMN notes.notes IS 'The note''s text (events.notes).';
COMMENT ON COLUMN notes.start_local IS 'start_time as local wall-clock time where it was logged.';

COMMENT ON VIEW active_sleeps IS 'DBA view: sleeps in progress (no end_time, not deleted) with child name and elapsed time; at most one per child (events_one_active_sleep).';
COMMENT ON COLUMN active_sleeps.child_name IS 'children.name.';
COMMENT ON COLUMN active_sleeps.elapsed IS 'now() - start_time.';
COMMENT ON COLUMN active_sleeps.elapsed_minutes IS 'elapsed in minutes (1 decimal).';

COMMENT ON VIEW events_export IS 'PRD 13 CSV export rows (date, time, event_type, duration_minutes, amount_prepared_oz, amount_consumed_oz, diaper_contents, logged_by, notes) of non-deleted events; date/time are local to where the event was logged; oz = mL / 29.5735 (1 decimal). Filter by child_id and start_time, order by start_time.';
COMMENT ON COLUMN events_export.date IS 'Local date of start_time.';
COMMENT ON COLUMN events_export.time IS 'Local time of start_time (seconds precision).';
COMMENT ON COLUMN events_export.duration_minutes IS 'Whole minutes between start_time and end_time; NULL without end_time.';
COMMENT ON COLUMN events_export.amount_prepared_oz IS 'Bottle amount prepared in oz.';
COMMENT ON COLUMN events_export.amount_consumed_oz IS 'Bottle amount consumed in oz (amount_ml, or prepared - remaining).';
COMMENT ON COLUMN events_export.diaper_contents IS 'wet / dirty / both for diapers.';
COMMENT ON COLUMN events_export.logged_by IS 'display_name of the user who logged the event (NULL if that account was deleted).';
