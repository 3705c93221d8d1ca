-- bbmigrate:no-transaction
--
-- 0024_spec_index_events_updated.sql
--
-- Restores PRD §8's "sync queries" index, idx_events_updated (child_id,
-- updated_at DESC), which 0020 dropped to save write time. The product's
-- design lists four indexes and the schema keeps all four: a DBA's "what
-- changed recently for this child" (ORDER BY updated_at DESC LIMIT n) reads it,
-- and a stated requirement is not traded away for a write-path figure. Its cost
-- on each insert and update is measured in BENCHMARKS.md (write path).
--
-- Built CONCURRENTLY (this file runs outside a transaction): on a live events
-- table a plain CREATE INDEX would block every write for as long as the build
-- takes. IF NOT EXISTS makes a rerun after a failure safe; a build that failed
-- half way leaves an INVALID index, which a DBA drops before rerunning
-- (SELECT indexrelid::regclass FROM pg_index WHERE NOT indisvalid).

CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_events_updated ON events (child_id, updated_at DESC);

COMMENT ON INDEX idx_events_updated IS 'PRD 8 "sync queries": events of a child by last server change, WHERE child_id = $1 ORDER BY updated_at DESC (what changed recently for this child; conflict review). Incremental sync itself reads idx_events_child_change. Dropped by 0020, restored by 0024.';
