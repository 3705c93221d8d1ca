-- 0012_restore_safe_checks.sql
--
-- A pg_dump of this database must restore. pg_dump runs the restore with
-- search_path = '' and creates CHECK constraints before it loads the data,
-- so every CHECK is evaluated for every restored row with an empty search
-- path. The constraints themselves are dumped schema-qualified, but two of
-- the functions they call name helper functions without a schema
-- (jsonb_is_positive_number, jsonb_is_nonblank_string, ...): the restore
-- stopped at the first feeding or note with
--     ERROR: function jsonb_is_nonblank_string(jsonb) does not exist
-- Pinning their search_path to the schema they were created in (FROM
-- CURRENT: the migration's own) makes them independent of the caller's.
-- Tested by a pg_dump / psql restore into a fresh cluster
-- (SyncFeedTests.aCursorSurvivesDumpAndRestore).
--
-- Cost: event_feeding_data_is_valid is plpgsql (never inlined anyway);
-- event_note_data_is_valid is no longer inlined into its CHECK (notes are
-- rare). The other CHECK functions call only pg_catalog.

ALTER FUNCTION event_feeding_data_is_valid(jsonb) SET search_path FROM CURRENT;
ALTER FUNCTION event_note_data_is_valid(jsonb) SET search_path FROM CURRENT;
