-- 0010_dashboard_indexes.sql
--
-- The dashboard's "suggested side" reads the child's last breast feeding. With only
-- idx_events_child_time the planner cannot tell how rare breast feedings are among a child's
-- events (jsonb selectivity), and on two years of data it scanned and sorted the whole
-- history of the child (0.7 ms of a 1 ms dashboard at 60 days; more as history grows). This
-- partial index answers it with one index probe. Measured by `make bench`.
--
-- Built CONCURRENTLY, so that adding it to a live database does not block the app's writes
-- to events; that cannot run inside a transaction, hence:
-- bbmigrate:no-transaction

CREATE INDEX CONCURRENTLY idx_events_child_last_breast
    ON events (child_id, start_time DESC)
    WHERE event_type = 'feeding' AND deleted_at IS NULL AND (data ->> 'kind') = 'breast';

COMMENT ON INDEX idx_events_child_last_breast IS
'Dashboard suggested side: the last breast feeding of a child, WHERE child_id = $1 AND event_type = ''feeding'' AND deleted_at IS NULL AND data ->> ''kind'' = ''breast'' ORDER BY start_time DESC LIMIT 1.';
