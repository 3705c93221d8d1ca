-- 0014_csv_export_one_definition.sql
--
-- The CSV export (PRD 13) has one definition: this view. The app's export
-- reads it (EventRepository.exportCSV) and writes its rows as they are, so a
-- DBA running
--     SELECT * FROM events_export WHERE child_id = $1 ORDER BY start_time, event_id;
-- sees exactly the rows a parent downloads. Until now the app computed the
-- CSV in Swift and the view of 0008 disagreed with it: durations for bottles,
-- amounts to 0.1 oz instead of the nearest 0.5 oz, a simple bottle's amount
-- missing from amount_prepared_oz, the note category missing, times with
-- seconds.
--
-- Two columns follow the PRD's nine: time_zone (IANA) and utc_offset
-- (+hh:mm) of the start. The rows are ordered by instant, but date and time
-- are the wall clock where each event was logged: after travel (or across a
-- DST change) two rows can show times out of order, and these two columns
-- say why.
--
-- Formula neutralisation (a note or display name beginning with =, +, -, @,
-- tab or CR gets a leading ') is the CSV writer's job, not the view's: the
-- view holds the values as logged.

DROP VIEW events_export;

CREATE VIEW events_export WITH (security_invoker = true) AS
SELECT e.child_id,
       e.id                                               AS event_id,
       e.start_time,
       to_char(l.start_local, 'YYYY-MM-DD')               AS date,
       to_char(l.start_local, 'HH24:MI')                  AS time,
       e.event_type,
       CASE WHEN e.end_time IS NOT NULL
             AND (e.event_type = 'sleep' OR e.data ->> 'kind' = 'breast')
            THEN round(extract(epoch FROM e.end_time - e.start_time) / 60)::integer
       END                                                AS duration_minutes,
       trim_scale(round(a.prepared_ml / 29.5735 * 2) / 2) AS amount_prepared_oz,
       trim_scale(round(a.consumed_ml / 29.5735 * 2) / 2) AS amount_consumed_oz,
       e.data ->> 'contents'                              AS diaper_contents,
       u.display_name                                     AS logged_by,
       CASE WHEN e.event_type = 'note' AND e.data ->> 'category' IS NOT NULL
            THEN CASE WHEN coalesce(e.notes, '') = '' THEN e.data ->> 'category'
                      ELSE (e.data ->> 'category') || ': ' || e.notes END
            ELSE e.notes
       END                                                AS notes,
       e.start_tz                                         AS time_zone,
       CASE WHEN e.start_offset_seconds < 0 THEN '-' ELSE '+' END
         || to_char(make_interval(secs => abs(e.start_offset_seconds)), 'HH24:MI') AS utc_offset
  FROM events AS e
  LEFT JOIN users AS u ON u.id = e.logged_by
 CROSS JOIN LATERAL (
       SELECT (e.start_time AT TIME ZONE 'UTC') + make_interval(secs => e.start_offset_seconds) AS start_local
       ) AS l
 CROSS JOIN LATERAL (
       -- A bottle: the simple form (amount_ml) was prepared and drunk whole; the
       -- prepared form is drunk once the remainder is known.
       SELECT CASE WHEN e.data ->> 'kind' = 'bottle'
                   THEN coalesce((e.data ->> 'amount_ml')::numeric, (e.data ->> 'amount_prepared_ml')::numeric)
              END AS prepared_ml,
              CASE WHEN e.data ->> 'kind' = 'bottle'
                   THEN coalesce((e.data ->> 'amount_ml')::numeric,
                                 greatest(0, (e.data ->> 'amount_prepared_ml')::numeric
                                             - (e.data ->> 'amount_remaining_ml')::numeric))
              END AS consumed_ml
       ) AS a
 WHERE e.deleted_at IS NULL;

-- The grants went with the old view.
DO $$ BEGIN PERFORM setup_roles_and_grants(); END $$;

COMMENT ON VIEW events_export IS
'The CSV export of PRD 13, one row per non-deleted event: the app writes these rows as they are (EventRepository.exportCSV). Columns date .. notes are the PRD''s, as text or numbers exactly as written; time_zone and utc_offset follow. Filter by child_id and start_time, order by start_time, event_id (idx_events_child_time).';
COMMENT ON COLUMN events_export.child_id IS 'The child (filter).';
COMMENT ON COLUMN events_export.event_id IS 'The event (ties in start_time are ordered by it).';
COMMENT ON COLUMN events_export.start_time IS 'The instant the event started (filter and order).';
COMMENT ON COLUMN events_export.date IS 'Local date of the start where it was logged, YYYY-MM-DD.';
COMMENT ON COLUMN events_export.time IS 'Local time of the start where it was logged, HH24:MI.';
COMMENT ON COLUMN events_export.event_type IS 'feeding, diaper, sleep or note.';
COMMENT ON COLUMN events_export.duration_minutes IS 'Sleeps and breast feedings: whole minutes from start to end; NULL while running and for other events.';
COMMENT ON COLUMN events_export.amount_prepared_oz IS 'Bottles: amount prepared (amount_ml, or amount_prepared_ml) in oz to the nearest 0.5 (1 oz = 29.5735 mL).';
COMMENT ON COLUMN events_export.amount_consumed_oz IS 'Bottles: amount drunk in oz to the nearest 0.5: amount_ml, or prepared - remaining (never below 0); NULL until the remainder is known.';
COMMENT ON COLUMN events_export.diaper_contents IS 'Diapers: wet, dirty or both.';
COMMENT ON COLUMN events_export.logged_by IS 'Display name of the user who logged the event (NULL if that account was deleted).';
COMMENT ON COLUMN events_export.notes IS 'The notes; for a note event "category: notes" (or the category alone).';
COMMENT ON COLUMN events_export.time_zone IS 'IANA zone where the event started (start_tz).';
COMMENT ON COLUMN events_export.utc_offset IS 'UTC offset of that zone at the start, +hh:mm or -hh:mm.';
