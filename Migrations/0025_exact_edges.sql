-- 0025_exact_edges.sql
--
-- What the data looks like at its edges: when an event may happen, how long
-- its texts may be, what the CSV export shows a spreadsheet, and which rule
-- makes an event id unique.
--
-- 1. Events start in 1900 or later (events_start_from_1900). The app accepts
--    starts from 1900-01-01 to one day after now ("not in the future", PRD §12,
--    with a day for clocks and zones); the upper bound moves with the clock, so
--    only the app checks it (a CHECK must give the same answer tomorrow), the
--    lower one is here for every writer. Ends follow starts (at most 24 hours
--    later, events_max_duration_24h).
--
-- 2. Texts are counted in Unicode scalars (char_length): notes at most 5000
--    (events_notes_length), a note's category at most 100
--    (events_note_category_length). The app counts the same way; a grapheme
--    count let "e" plus 60,000 combining accents pass as one character.
--
-- 3. The CSV view (events_export) as a spreadsheet reads it:
--    - utc_offset is written UTC-05:00 / UTC+00:00 (and UTC-00:44:30 for the
--      few historical offsets with seconds): a cell that begins with
--      "-" or "+" is a number or a formula to a spreadsheet (OWASP's CSV
--      injection rule covers = + - @ TAB CR), and no cell of the export may
--      begin with one;
--    - start_utc is the start as an instant, exact: ISO 8601 in UTC to the
--      microsecond (date and time are the local wall clock to the minute, as
--      PRD §13 shows them), so a row read back is the event that was stored;
--    - amount_consumed_oz stays empty until the remainder of a prepared bottle
--      is known (greatest(0, x - NULL) is 0 in PostgreSQL, not NULL: a bottle
--      only prepared showed "0 oz drunk").
--
-- 4. An event id is unique per child: events_pkey (id, child_id) says so, and
--    nothing else does. The same id sent for two children is two events, in
--    whatever order the requests arrive. A global (or per-family) rule cannot
--    be a constraint once events are distributed by child across a Citus
--    cluster (every unique key must contain the distribution column), and a
--    NOT EXISTS check beside the INSERT is not one: two parallel requests both
--    passed it. Clients address events by child and id (the API's paths, the
--    sync feed's rows), so nothing needs more.

ALTER TABLE events
    ADD CONSTRAINT events_start_from_1900 CHECK (start_time >= timestamptz '1900-01-01 00:00:00+00') NOT VALID,
    ADD CONSTRAINT events_notes_length CHECK (char_length(notes) <= 5000) NOT VALID,
    ADD CONSTRAINT events_note_category_length CHECK (event_type <> 'note' OR char_length(data ->> 'category') <= 100) NOT VALID;

-- NOT VALID: adding them is a brief change of the catalog. 0026 validates them in a
-- transaction of its own, under a lock that lets writes go on while it scans (here, this
-- file's ACCESS EXCLUSIVE lock would be held for the whole scan: bbmigrate plan says so).

COMMENT ON CONSTRAINT events_start_from_1900 ON events IS 'An event starts in 1900 or later (0025); the app also refuses starts more than a day after now.';
COMMENT ON CONSTRAINT events_notes_length ON events IS 'Notes hold at most 5000 Unicode scalars (char_length), as the app counts them (0025).';
COMMENT ON CONSTRAINT events_note_category_length ON events IS 'A note''s category holds at most 100 Unicode scalars (0025).';
COMMENT ON CONSTRAINT events_pkey ON events IS 'An event id is unique per child (0022, 0025): the same id for two children is two events. The only rule a Citus cluster distributed by child can enforce.';

CREATE OR REPLACE VIEW events_export WITH (security_invoker = true) AS
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
       'UTC' || CASE WHEN e.start_offset_seconds < 0 THEN '-' ELSE '+' END
         || to_char(make_interval(secs => abs(e.start_offset_seconds)), 'HH24:MI')
         || CASE WHEN e.start_offset_seconds % 60 <> 0
                 THEN to_char(make_interval(secs => abs(e.start_offset_seconds)), ':SS') ELSE '' END AS utc_offset,
       to_char(e.start_time AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS start_utc
  FROM events AS e
  LEFT JOIN users AS u ON u.id = e.logged_by
 CROSS JOIN LATERAL (
       SELECT (e.start_time AT TIME ZONE 'UTC') + make_interval(secs => e.start_offset_seconds) AS start_local
       ) AS l
 CROSS JOIN LATERAL (
       -- A bottle: the simple form (amount_ml) was prepared and drunk whole; the
       -- prepared form is drunk once the remainder is known, and not before.
       SELECT CASE WHEN e.data ->> 'kind' = 'bottle'
                   THEN coalesce((e.data ->> 'amount_ml')::numeric, (e.data ->> 'amount_prepared_ml')::numeric)
              END AS prepared_ml,
              CASE WHEN e.data ->> 'kind' = 'bottle' AND e.data ? 'amount_ml'
                   THEN (e.data ->> 'amount_ml')::numeric
                   WHEN e.data ->> 'kind' = 'bottle' AND e.data ->> 'amount_remaining_ml' IS NOT NULL
                   THEN greatest(0, (e.data ->> 'amount_prepared_ml')::numeric - (e.data ->> 'amount_remaining_ml')::numeric)
              END AS consumed_ml
       ) AS a
 WHERE e.deleted_at IS NULL;

COMMENT ON COLUMN events_export.amount_consumed_oz IS 'Bottles: amount drunk in oz to the nearest 0.5: amount_ml, or prepared - remaining (never below 0); empty (NULL) until the remainder is known.';
COMMENT ON COLUMN events_export.utc_offset IS 'UTC offset of that zone at the start, written UTC+hh:mm or UTC-hh:mm (UTC-hh:mm:ss when it has seconds) so that a spreadsheet keeps it as text (a cell beginning with + or - is a number or a formula to it).';
COMMENT ON COLUMN events_export.start_utc IS 'The start as an instant, exact: ISO 8601 in UTC to the microsecond (2026-11-20T13:00:00.000000Z). date and time are the local wall clock to the minute.';
