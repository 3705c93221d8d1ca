-- 0018_one_definition_of_timeline_and_feed.sql
--
-- A DBA and the app must not disagree about a child's day or about what the
-- feed sends. timeline_events() and sync_events_since() are now the queries
-- the app runs (EventRepository.overlapping and the sync feed call them), so
-- psql and the service read the same rows:
--     SELECT * FROM timeline_events($child, $from, $to);        -- newest first
--     SELECT * FROM sync_events_since($child, $after, 500);    -- oldest stamp first
-- Both are single SQL statements that PostgreSQL inlines into the caller's
-- query: the plans are the index scans they were (idx_events_child_time,
-- events_one_active_sleep, events_child_change_seq_key).
--
-- timeline_events() takes the app's rules: instants (diapers, notes, bottles
-- without an end) by their start, ended events by their interval, a running
-- sleep until p_now whatever its age (a forgotten timer is still running).

DROP FUNCTION timeline_events(uuid, timestamptz, timestamptz);

CREATE FUNCTION timeline_events(p_child_id uuid, p_from timestamptz, p_to timestamptz, p_now timestamptz DEFAULT now())
RETURNS SETOF events
LANGUAGE sql
STABLE
AS $$
    SELECT e.*
      FROM events AS e
     WHERE e.child_id = p_child_id
       AND e.deleted_at IS NULL
       AND e.start_time < p_to
       -- exact lower bound for ended events: they last at most 24 h (events_max_duration_24h)
       AND e.start_time >= p_from - interval '24 hours'
       AND (e.start_time >= p_from
            OR e.end_time > p_from
            OR (e.end_time IS NULL AND e.event_type = 'sleep' AND p_now > p_from))
    UNION ALL
    -- A sleep left running for longer: the child's one running sleep (events_one_active_sleep).
    SELECT e.*
      FROM events AS e
     WHERE e.child_id = p_child_id
       AND e.event_type = 'sleep' AND e.end_time IS NULL AND e.deleted_at IS NULL
       AND e.start_time < p_from - interval '24 hours'
       AND p_now > p_from
     ORDER BY start_time DESC, id
$$;

COMMENT ON FUNCTION timeline_events(uuid, timestamptz, timestamptz, timestamptz) IS
'Timeline (the app''s own query): non-deleted events of a child overlapping [p_from, p_to), newest first. Diapers, notes and bottles without an end are instants at start_time; ended events count by their interval; a running sleep runs until p_now (default now()), whatever its age. Uses idx_events_child_time, and events_one_active_sleep for a sleep running for more than a day.';
COMMENT ON FUNCTION sync_events_since(uuid, bigint, integer) IS
'The sync feed''s event query (the app calls it per child): events (soft-deleted ones included) of a child stamped after p_after, oldest stamp first, at most p_limit (events_child_change_seq_key). The feed also sends the child record, caregivers and sync_tombstones.';
