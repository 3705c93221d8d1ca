-- 0022_citus_ready_keys_and_counters.sql
--
-- The schema obeys Citus's rules for distributed tables, on one server, now:
-- later, moving to Citus needs no change of keys, of the sync cursor, or of
-- data. The plan is docs/scale-out.md; the rules are checked by
-- Tests/SchemaTests/DistributionRulesTests.swift on every test run.
--
-- ---------------------------------------------------------------------------
-- The rules
-- ---------------------------------------------------------------------------
-- Child-scoped tables are the tables with a child_id column, plus children
-- itself. Under Citus they are split by child (the distribution column:
-- child_id, or children.id) and a child's rows of every table live on the
-- same node. The other tables (users, sync_state, time_zone_names) are
-- reference tables: a full copy on every node.
--   1. Every primary key and unique index of a child-scoped table includes
--      the distribution column (a node can only check uniqueness among the
--      rows it holds).
--   2. A foreign key between two child-scoped tables goes distribution
--      column to distribution column (the check stays on one node). A key
--      to a reference table is fine; a key from a reference table to a
--      child-scoped table is not.
--   3. No sequence hands out numbers to child-scoped rows: Citus gives each
--      node its own range of a sequence, so numbers drawn on two nodes are
--      not in commit order.
--
-- Before this migration the schema broke them five times:
--   events_pkey              PRIMARY KEY (id)
--   invites_pkey             PRIMARY KEY (code)
--   event_history            id bigint GENERATED ALWAYS AS IDENTITY, its
--                            PRIMARY KEY (id), UNIQUE (event_id, revision),
--                            and FOREIGN KEY (event_id) REFERENCES events (id)
--   sync_next_seq()          nextval('sync_stamp_seq'): one sequence gives the
--                            sync stamps of every child (0013).
--
-- ---------------------------------------------------------------------------
-- 1. Keys that include the child
-- ---------------------------------------------------------------------------
-- events: PRIMARY KEY (id, child_id). Event ids stay client-generated UUIDs
-- (a retry of the same id is answered with the stored event: ON CONFLICT
-- (child_id, id) DO NOTHING). Unique per child is enough:
--   * a random UUID does not collide by chance;
--   * every store query also filters by the acting user's children
--     (caregivers), so a row of another family is never read or changed,
--     whatever its id. Before, a client could even learn that an id was
--     taken in a family it does not belong to (its insert was refused);
--   * the store refuses (conflict) an id the user already used for another
--     of their own children, so "event by id" finds one row for a user;
--   * id comes first in the key: "event by id" (get, edit, delete) stays
--     one probe of events_pkey without the child.
-- event_history: the identity column id goes (its sequence served every
-- child). PRIMARY KEY (event_id, revision, child_id) replaces the old key
-- and the unique index (event_id, revision); "history of this event, newest
-- first" (WHERE event_id = $1 ORDER BY revision DESC) reads the same prefix.
-- The foreign key to events is now (event_id, child_id) -> (id, child_id),
-- still ON DELETE CASCADE. history rows copy the event's child (the trigger
-- events_record_history), so every existing row already matches.
-- invites: PRIMARY KEY (code, child_id). The invitee types the code alone,
-- so redeem looks it up by code (the key's first column). The store draws a
-- new code while the code is used by any invite, and refuses a code that
-- matches invites of two children (by chance, practically never: 31^8
-- codes, and two creators would have to draw the same one at once).
--
-- ---------------------------------------------------------------------------
-- 2. The sync stamp: one counter per child (sync_counters)
-- ---------------------------------------------------------------------------
--     sync_counters (child_id PRIMARY KEY -> children ON DELETE CASCADE,
--                    last_stamp)
-- sync_next_seq(child) now does:
--     SELECT FROM children WHERE id = $child FOR KEY SHARE;
--     UPDATE sync_counters SET last_stamp = last_stamp + 1
--      WHERE child_id = $child RETURNING last_stamp;
--     pg_notify('child_changed', $child)
-- The counter row's lock is the per-child lock of 0011 and 0013: the UPDATE
-- locks it until the transaction ends. So the rules of 0011 hold, argued as
-- there:
--   * stamp order is commit order, per child: a second writer of the child
--     waits for the first writer's lock, so it takes N + 1 only after the
--     first one committed (or rolled back: then it takes N again);
--   * a reader that sees stamp N of a child sees every stamp below it: the
--     writer of a smaller stamp had ended before the writer of N could
--     take N;
--   * the child's position is now the counter itself, as the reader's
--     snapshot sees it (sync_child_position(): one primary-key probe,
--     instead of one probe each of children, events, caregivers and
--     sync_tombstones).
-- Why not a counter column on children (0011): that UPDATE wrote a new
-- version of the wide child row (its CHECKs, the WHEN of its record trigger,
-- its foreign keys): 1.3-1.4x the cost of an insert. sync_counters is
-- narrow: two columns, one index, no trigger, fillfactor 50 so that the
-- update stays on its page (HOT: no index entry is written). Its foreign key
-- is not checked again when last_stamp alone changes (except for the later
-- stamps of one transaction, whose child is locked already). Measured with
-- pgbench, one event insert per transaction, this migration as a whole costs
-- about 10% per insert (351 -> 384 us with fsync; server CPU 182 -> 202 us);
-- details in docs/scale-out.md ("What the per-child counter costs").
-- Where the number comes from no longer matters to Citus: the counter lives
-- with the child, on the child's node, and moves with it.
--
-- Lock order: a row, then its child, then its counter. sync_next_seq()
-- takes the child row FOR KEY SHARE before the counter: the lock the
-- foreign key of the written row (events, caregivers, sync_tombstones to
-- children) takes anyway, so it costs one index probe, and taking it first
-- means that nothing waits for the child row while holding a counter.
-- (Without it, an insert holding the counter and waiting on its foreign key
-- deadlocks with a child deletion or delete_user_account(), which hold the
-- child FOR UPDATE and then reach the counter.) Writers that lock the child
-- more strongly (a change of the child record, transfer_primary_caregiver,
-- delete_user_account, a child deletion) take it before the counter too.
-- purge_deleted_events() raises children.sync_floor after it stamped the
-- tombstones, so it now locks the child FOR NO KEY UPDATE first, before
-- the events it deletes: otherwise it would hold the counter and wait for
-- the child while a change of the child record holds the child and waits
-- for the counter. Taking the child before its rows is safe here: the
-- writers that take a row first (inserts, edits, deletes of events) take
-- the child only FOR KEY SHARE, which does not conflict with NO KEY
-- UPDATE, so none of them waits for the purge's child lock while holding a
-- row the purge needs.
--
-- Many stamps of one child in one transaction (a COPY, an UPDATE of many
-- events, the purge) write one counter version each. Found by its key,
-- each would walk past every version the transaction wrote before it (they
-- are not dead to anyone yet): the cost grew with the square of the rows
-- (measured: 8,000 events of one child in one INSERT took 2.6x 0021's
-- time; 1.4x with what follows, and linear). So the stamp function keeps,
-- in the transaction-local setting
-- bb_sync.last_counter ('<child id>@<ctid>'), where the version it wrote
-- last is, and the next stamp of that child updates exactly that version
-- (WHERE ctid = ... AND child_id = ...). The setting is only a hint: any
-- session can SET it, and a forged value matches no visible version of the
-- child's counter (or another child's, which the child_id check refuses),
-- and the stamp is then taken by the key as usual. It cannot skip the
-- lock or reuse a number.
--
-- Existing cursors stay valid: every counter starts at the sequence's last
-- value (at or above every stamp ever drawn, for any child), or at the
-- child's own position if that were higher. Every child's next stamp is
-- above any position a client holds. No stamp may be drawn meanwhile:
-- the first statements below take, on every table whose writes draw a
-- stamp (children, caregivers, events), a lock that waits for the writers
-- in flight and makes new writes wait until this migration commits, before
-- their triggers run (so none of them is left inside the old stamp function
-- when the sequence goes). Reads of children and caregivers go on; events
-- is rebuilt under an exclusive lock anyway. (The file runs in one
-- transaction, as bbmigrate runs every file.)
--
-- A new child starts at 1 (its record_seq), as before: a client meets it at
-- position 0 and gets its record first. A child without a counter (inserted
-- by the same statement as its first caregiver, whose stamp comes before the
-- child's AFTER INSERT trigger; or rows loaded with triggers off) gets one
-- at its first stamp, above every stamp its rows carry (0013's position
-- function, renamed sync_rows_position()). A deleted child's counter goes with
-- it; its caregivers learn it from the feed (accessRevoked) and drop its
-- position.
--
-- Restores: the counters are ordinary rows; pg_dump takes them with the
-- data, so cursors stay valid after a dump and restore. After restoring an
-- OLDER state (point-in-time recovery, an old backup) run
-- SELECT sync_start_new_epoch(), as before. Never restore data without its
-- counters, and never set a counter back: new writes would take stamps
-- below clients' positions and never be sent.
--
-- This migration rebuilds the keys of events, event_history and invites
-- (an index build each, under an exclusive lock of that table): 0.14 s for
-- 100,000 events on the development machine. Run it in a quiet hour.
-- ---------------------------------------------------------------------------

------------------------------------------------------------------------------
-- Writers that draw stamps wait from here to the commit (see "Existing
-- cursors stay valid"): each of these takes SHARE ROW EXCLUSIVE or more.
------------------------------------------------------------------------------

-- children: a new foreign key locks the table it references.
CREATE TABLE sync_counters (
    child_id   uuid   NOT NULL,
    last_stamp bigint NOT NULL,

    CONSTRAINT sync_counters_pkey PRIMARY KEY (child_id),
    CONSTRAINT sync_counters_child_id_fkey
        FOREIGN KEY (child_id) REFERENCES children (id) ON DELETE CASCADE,
    CONSTRAINT sync_counters_last_stamp_valid CHECK (last_stamp >= 1)
) WITH (fillfactor = 50);

-- events (and event_history): the old key to events goes first.
ALTER TABLE event_history DROP CONSTRAINT event_history_event_id_fkey;

-- caregivers: its stamp trigger, restated unchanged for its lock.
CREATE OR REPLACE TRIGGER caregivers_sync_stamp
    BEFORE INSERT OR UPDATE ON caregivers
    FOR EACH ROW EXECUTE FUNCTION sync_stamp_row();

------------------------------------------------------------------------------
-- 1. Keys
------------------------------------------------------------------------------

ALTER TABLE events
    DROP CONSTRAINT events_pkey,
    ADD CONSTRAINT events_pkey PRIMARY KEY (id, child_id);

ALTER TABLE event_history DROP CONSTRAINT event_history_pkey;
ALTER TABLE event_history DROP COLUMN id;
DROP INDEX event_history_event_revision_key;
ALTER TABLE event_history
    ADD CONSTRAINT event_history_pkey PRIMARY KEY (event_id, revision, child_id),
    ADD CONSTRAINT event_history_event_fkey
        FOREIGN KEY (event_id, child_id) REFERENCES events (id, child_id) ON DELETE CASCADE;

ALTER TABLE invites
    DROP CONSTRAINT invites_pkey,
    ADD CONSTRAINT invites_pkey PRIMARY KEY (code, child_id);

------------------------------------------------------------------------------
-- 2. The counters, filled above every stamp drawn so far
------------------------------------------------------------------------------

-- 0013's position, read from the rows, keeps a use: the start of a counter
-- that is missing (see sync_next_seq below).
ALTER FUNCTION sync_child_position(uuid) RENAME TO sync_rows_position;

INSERT INTO sync_counters (child_id, last_stamp)
SELECT c.id, greatest((SELECT s.last_value FROM sync_stamp_seq AS s), sync_rows_position(c.id), 1)
  FROM children AS c;

------------------------------------------------------------------------------
-- The stamp and the position
------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION sync_next_seq(p_child_id uuid) RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_last  text := current_setting('bb_sync.last_counter', true);
    v_stamp bigint;
    v_at    tid;
BEGIN
    -- The child before its counter (see "Lock order"): the lock the row's
    -- foreign key check takes anyway, which then finds it held.
    PERFORM FROM public.children AS c WHERE c.id = p_child_id FOR KEY SHARE;
    IF NOT FOUND THEN
        RETURN NULL;         -- no such child (being deleted in this transaction)
    END IF;
    -- A later stamp of the same child in this transaction: straight to the
    -- counter version this transaction wrote last (see "Many stamps in one
    -- transaction"). Only a visible version of this child's counter matches.
    -- (One constant pattern, compiled once per session; the child is
    -- compared as text.)
    IF left(v_last, 37) = p_child_id::text || '@' AND v_last ~ '^.{37}\(\d{1,9},\d{1,4}\)$' THEN
        UPDATE public.sync_counters AS k
           SET last_stamp = k.last_stamp + 1
         WHERE k.ctid = substr(v_last, 38)::tid AND k.child_id = p_child_id
        RETURNING k.last_stamp, k.ctid INTO v_stamp, v_at;
    END IF;
    IF v_stamp IS NULL THEN
        UPDATE public.sync_counters AS k
           SET last_stamp = k.last_stamp + 1
         WHERE k.child_id = p_child_id
        RETURNING k.last_stamp, k.ctid INTO v_stamp, v_at;
    END IF;
    IF v_stamp IS NULL THEN
        -- No counter yet: a child inserted by this same statement (its
        -- counter comes after the statement), or rows loaded with triggers
        -- off. Start above every stamp the child's rows carry. Two first
        -- writers meet on the key: the second waits and counts on.
        INSERT INTO public.sync_counters AS k (child_id, last_stamp)
        VALUES (p_child_id, coalesce(public.sync_rows_position(p_child_id), 1) + 1)
        ON CONFLICT (child_id) DO UPDATE SET last_stamp = k.last_stamp + 1
        RETURNING k.last_stamp, k.ctid INTO v_stamp, v_at;
    END IF;
    PERFORM set_config('bb_sync.last_counter', p_child_id::text || '@' || v_at::text, true);
    PERFORM pg_notify('child_changed', p_child_id::text);
    RETURN v_stamp;
END
$$;

CREATE OR REPLACE FUNCTION sync_child_position(p_child_id uuid) RETURNS bigint
LANGUAGE plpgsql
STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    -- A child without a counter (see sync_next_seq): the highest stamp of its rows.
    RETURN coalesce((SELECT k.last_stamp FROM sync_counters AS k WHERE k.child_id = p_child_id),
                    sync_rows_position(p_child_id));
END
$$;

CREATE FUNCTION children_sync_counter_start() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- At the record's stamp (1): the next stamp of a new child is 2. A write
    -- of the same statement may have started it already (sync_next_seq).
    INSERT INTO public.sync_counters (child_id, last_stamp) VALUES (NEW.id, NEW.record_seq)
    ON CONFLICT (child_id) DO NOTHING;
    RETURN NULL;
END
$$;

REVOKE ALL ON FUNCTION children_sync_counter_start() FROM PUBLIC;

CREATE TRIGGER children_sync_counter_start
    AFTER INSERT ON children
    FOR EACH ROW EXECUTE FUNCTION children_sync_counter_start();

DROP SEQUENCE sync_stamp_seq;

------------------------------------------------------------------------------
-- Writers: the insert's "row first" lock names the child; the purge takes
-- the child before its rows
------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION events_bookkeeping() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    -- Zones first: a refused row takes no lock.
    IF (TG_OP = 'INSERT' OR NEW.start_tz IS DISTINCT FROM OLD.start_tz)
       AND NOT is_valid_timezone(NEW.start_tz) THEN
        RAISE EXCEPTION 'invalid time zone "%" for events.start_tz', NEW.start_tz
            USING ERRCODE    = 'check_violation',             -- 23514
                  CONSTRAINT = 'events_start_tz_valid',
                  SCHEMA     = TG_TABLE_SCHEMA,
                  TABLE      = TG_TABLE_NAME,
                  COLUMN     = 'start_tz',
                  HINT       = 'Use an IANA time zone name listed in pg_timezone_names, e.g. America/New_York.';
    END IF;
    IF NEW.end_tz IS NOT NULL
       AND (TG_OP = 'INSERT' OR NEW.end_tz IS DISTINCT FROM OLD.end_tz)
       AND NOT is_valid_timezone(NEW.end_tz) THEN
        RAISE EXCEPTION 'invalid time zone "%" for events.end_tz', NEW.end_tz
            USING ERRCODE    = 'check_violation',             -- 23514
                  CONSTRAINT = 'events_end_tz_valid',
                  SCHEMA     = TG_TABLE_SCHEMA,
                  TABLE      = TG_TABLE_NAME,
                  COLUMN     = 'end_tz',
                  HINT       = 'Use an IANA time zone name listed in pg_timezone_names, e.g. America/New_York.';
    END IF;

    IF TG_OP = 'INSERT' THEN
        IF NEW.logged_by IS NULL THEN
            RAISE EXCEPTION 'events.logged_by is required when an event is created'
                USING ERRCODE    = 'not_null_violation',      -- 23502
                      CONSTRAINT = 'events_logged_by_required',
                      SCHEMA     = TG_TABLE_SCHEMA,
                      TABLE      = TG_TABLE_NAME,
                      COLUMN     = 'logged_by';
        END IF;
        NEW.revision   := 1;
        NEW.updated_by := coalesce(NEW.updated_by, NEW.logged_by);
        -- Row first, child second (see "Lock order" in 0011 and 0022): an
        -- insert of a key that another transaction is changing waits for it
        -- before it takes the child. The key is (id, child_id).
        PERFORM 1 FROM events WHERE id = NEW.id AND child_id = NEW.child_id FOR SHARE;
    ELSE
        IF NEW.id <> OLD.id THEN
            RAISE EXCEPTION 'events.id cannot be changed'
                USING ERRCODE    = 'check_violation',         -- 23514
                      CONSTRAINT = 'events_id_immutable',
                      SCHEMA     = TG_TABLE_SCHEMA,
                      TABLE      = TG_TABLE_NAME,
                      COLUMN     = 'id';
        END IF;
        IF NEW.child_id <> OLD.child_id THEN
            RAISE EXCEPTION 'events.child_id cannot be changed (event %)', OLD.id
                USING ERRCODE    = 'check_violation',         -- 23514
                      CONSTRAINT = 'events_child_id_immutable',
                      SCHEMA     = TG_TABLE_SCHEMA,
                      TABLE      = TG_TABLE_NAME,
                      COLUMN     = 'child_id',
                      HINT       = 'Soft-delete the event and log a new one for the other child.';
        END IF;
        NEW.created_at := OLD.created_at;
        NEW.revision   := OLD.revision + 1;
        NEW.updated_at := now();
        IF OLD.deleted_at IS NOT NULL AND NEW.deleted_at IS NULL THEN
            NEW.deleted_by := NULL;        -- restore clears the deleter
        END IF;
    END IF;

    -- Sync stamp: the child's next counter value (0022). 0 only when the
    -- child does not exist: events_child_id_fkey then refuses the row.
    NEW.change_seq := coalesce(sync_next_seq(NEW.child_id), 0);
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION purge_deleted_events(older_than interval DEFAULT '30 days')
RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_cutoff  timestamptz;
    v_child   uuid;
    v_deleted bigint;
    v_count   bigint := 0;
BEGIN
    IF older_than IS NULL OR older_than < interval '30 days' THEN
        RAISE EXCEPTION 'purge_deleted_events: older_than must be at least 30 days (PRD 11 recovery window), got %',
                        coalesce(older_than::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';      -- 22023
    END IF;
    v_cutoff := now() - older_than;

    -- One child at a time, in id order. The child first (FOR NO KEY UPDATE:
    -- its sync_floor is written below), then its rows, then its counter (the
    -- tombstones' stamps): see "Lock order" in 0022. Edits hold a child FOR
    -- KEY SHARE only, so they do not wait for this lock. A concurrent
    -- restore wins: the row no longer matches when re-checked.
    FOR v_child IN
        SELECT e.child_id FROM public.events AS e WHERE e.deleted_at < v_cutoff
        UNION
        SELECT t.child_id FROM public.sync_tombstones AS t WHERE t.removed_at < v_cutoff
        ORDER BY 1
    LOOP
        PERFORM FROM public.children AS c WHERE c.id = v_child FOR NO KEY UPDATE;
        CONTINUE WHEN NOT FOUND;     -- deleted meanwhile, with its rows

        -- event_history rows go with their event (ON DELETE CASCADE); each
        -- purged event leaves a tombstone (trigger events_sync_removal).
        DELETE FROM public.events
         WHERE child_id = v_child AND deleted_at < v_cutoff;
        GET DIAGNOSTICS v_deleted = ROW_COUNT;
        v_count := v_count + v_deleted;

        -- Tombstones older than the same window go; a cursor below the
        -- highest stamp removed may have missed a removal: sync_floor.
        WITH pruned AS (
            DELETE FROM public.sync_tombstones
             WHERE child_id = v_child AND removed_at < v_cutoff
            RETURNING change_seq
        )
        UPDATE public.children AS c
           SET sync_floor = greatest(c.sync_floor, p.highest)
          FROM (SELECT max(change_seq) AS highest FROM pruned) AS p
         WHERE c.id = v_child AND p.highest IS NOT NULL;
    END LOOP;

    RETURN v_count;
END
$$;

------------------------------------------------------------------------------
-- Grants: sync_child_position() runs as the caller, who now reads the
-- counter; nobody but the stamp function writes it.
------------------------------------------------------------------------------

REVOKE ALL ON TABLE sync_counters FROM PUBLIC;

CREATE OR REPLACE FUNCTION setup_roles_and_grants() RETURNS void
LANGUAGE plpgsql
AS $fn$
BEGIN
    PERFORM setup_base_roles_and_grants();
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'babybasics_analytics') THEN
        BEGIN
            CREATE ROLE babybasics_analytics NOLOGIN;
            RAISE NOTICE 'created role babybasics_analytics';
        EXCEPTION
            WHEN insufficient_privilege THEN
                RAISE NOTICE 'role babybasics_analytics was not created (%); an administrator must run "CREATE ROLE babybasics_analytics NOLOGIN" and then run SELECT setup_roles_and_grants() as the schema owner', SQLERRM;
            WHEN duplicate_object OR unique_violation THEN
                NULL;
        END;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'babybasics_analytics') THEN
        GRANT SELECT ON analytics_events, analytics_children, analytics_caregivers TO babybasics_analytics;
    ELSE
        RAISE NOTICE 'role babybasics_analytics does not exist: its grants were skipped';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'babybasics_readonly') THEN
        GRANT SELECT ON analytics_events, analytics_children, analytics_caregivers TO babybasics_readonly;
        GRANT SELECT ON sync_counters TO babybasics_readonly;
    END IF;
    -- 0022: the sync position is read from the counters (sync_child_position).
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'babybasics_app') THEN
        GRANT SELECT ON sync_counters TO babybasics_app;
        REVOKE INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON sync_counters FROM babybasics_app;
    END IF;
END
$fn$;

DO $$ BEGIN PERFORM setup_roles_and_grants(); END $$;

------------------------------------------------------------------------------
-- Comments
------------------------------------------------------------------------------

COMMENT ON TABLE sync_counters IS
'One sync counter per child (0022_citus_ready_keys_and_counters.sql): the last stamp taken for the child. Written only by sync_next_seq() (UPDATE ... SET last_stamp = last_stamp + 1 RETURNING, whose row lock, held to the end of the transaction, makes per-child stamp order commit order) and started by trigger children_sync_counter_start. Narrow and fillfactor 50 so the update stays on its page (HOT). Never set a counter back.';
COMMENT ON COLUMN sync_counters.child_id IS 'The child (children.id); the row goes with the child (ON DELETE CASCADE).';
COMMENT ON COLUMN sync_counters.last_stamp IS 'The last sync stamp taken for this child; the child''s position as a snapshot sees it (sync_child_position). Every stamp of the child at or below it that a snapshot sees is committed.';
COMMENT ON INDEX sync_counters_pkey IS 'The counter of a child: WHERE child_id = $1 (sync_next_seq, sync_child_position). The table''s only index, so its update is HOT.';
COMMENT ON CONSTRAINT sync_counters_last_stamp_valid ON sync_counters IS 'A counter is a stamp: at least 1 (a new child''s record_seq).';
COMMENT ON CONSTRAINT sync_counters_child_id_fkey ON sync_counters IS 'The counter belongs to a child and is deleted with it. Not re-checked when last_stamp alone changes.';
COMMENT ON FUNCTION sync_next_seq(uuid) IS
'The next sync stamp of a child: locks the child row FOR KEY SHARE (the lock the written row''s foreign key takes anyway), then UPDATE sync_counters SET last_stamp = last_stamp + 1 RETURNING, whose row lock is held to the end of the transaction (so per child stamp order is commit order), and sends pg_notify(''child_changed'', child_id), delivered at COMMIT. A child without a counter (inserted by the same statement, or loaded with triggers off) gets one above every stamp of its rows (sync_rows_position). NULL when the child does not exist. SECURITY DEFINER: the application role cannot write the counters; calling it directly only leaves a gap.';
COMMENT ON FUNCTION sync_child_position(uuid) IS
'The child''s sync position as the caller''s snapshot sees it: sync_counters.last_stamp (one primary-key probe); for a child without a counter yet, the highest stamp of its rows (sync_rows_position). Every stamp of the child below it is committed and visible in the same snapshot. NULL when the child does not exist.';
COMMENT ON FUNCTION sync_rows_position(uuid) IS
'The highest sync stamp carried by a child''s rows in the caller''s snapshot: greatest of record_seq, sync_floor and the newest stamp of its events, caregivers and tombstones (one index probe each; 0013''s sync_child_position). Since 0022 only the start of a missing counter (sync_next_seq) and the position of a child without one. NULL when the child does not exist.';
COMMENT ON FUNCTION children_sync_counter_start() IS
'Trigger function (AFTER INSERT on children): creates the child''s sync counter at its record_seq (1). SECURITY DEFINER: only the triggers write sync_counters.';
COMMENT ON TRIGGER children_sync_counter_start ON children IS 'Starts the child''s sync counter (sync_counters).';
COMMENT ON FUNCTION events_bookkeeping() IS
'Trigger function (BEFORE INSERT OR UPDATE on events). Zones: start_tz and end_tz must be in time_zone_names when new or changed (23514, events_start_tz_valid / events_end_tz_valid). INSERT: logged_by required (23502, events_logged_by_required), revision := 1, updated_by defaults to logged_by. UPDATE: id and child_id immutable (23514, events_id_immutable / events_child_id_immutable), created_at kept, revision := OLD.revision + 1, updated_at := now(), deleted_by cleared on restore (deleted_at set -> NULL). Both: change_seq := sync_next_seq(child_id), the child''s next sync stamp (its counter, 0022).';
COMMENT ON FUNCTION purge_deleted_events(interval) IS
'Hard-deletes events soft-deleted more than older_than ago (default and minimum 30 days, PRD 11) together with their event_history, each leaving a sync tombstone; then removes sync tombstones older than older_than and raises children.sync_floor to the highest stamp removed (older cursors must resync the child). Returns the number of events deleted. Works one child at a time in id order: the child (FOR NO KEY UPDATE), its rows, its counter (0022). SECURITY DEFINER with search_path pinned to pg_catalog, public, pg_temp. older_than NULL or < 30 days: SQLSTATE 22023. Run it from a daily job.';
COMMENT ON FUNCTION setup_roles_and_grants() IS
'Creates babybasics_app, babybasics_readonly (DBAs: everything but secrets) and babybasics_analytics (the analytics views only) as NOLOGIN roles if missing and allowed (NOTICE otherwise), then grants each its least-privilege set (0022: SELECT on sync_counters to the app and DBA roles, for sync_child_position). Idempotent; run it as the schema owner again after an administrator created the roles by hand (managed databases without CREATEROLE).';

COMMENT ON INDEX events_pkey IS 'Primary key (id, child_id): an event id is unique per child (0022; Citus needs the child in every unique key). Event by id, with or without its child (id comes first): edits, the idempotent INSERT ... ON CONFLICT (child_id, id) DO NOTHING, optimistic UPDATE ... WHERE id = $1 AND revision = $2.';
COMMENT ON COLUMN events.id IS 'Client-generated UUID (idempotent retries); unique per child (events_pkey (id, child_id)). The store also refuses an id the user already used for another of their children.';
COMMENT ON INDEX event_history_pkey IS 'History of one event, newest first / undo: WHERE event_id = $1 ORDER BY revision DESC; also the ON DELETE CASCADE from events (purge). Refuses two snapshots of the same revision of an event (23505). Includes child_id (0022: Citus).';
COMMENT ON CONSTRAINT event_history_event_fkey ON event_history IS 'The event this is a version of, by (event_id, child_id) -> events (id, child_id): child to child (0022: Citus). Deleted with the event (purge, child deletion).';
COMMENT ON COLUMN event_history.child_id IS 'The event''s child (events.child_id never changes); part of the key and of the foreign key to events.';
COMMENT ON COLUMN event_history.revision IS 'events.revision of the stored version; the change produced revision + 1. Unique per event (event_history_pkey).';
COMMENT ON TABLE event_history IS
'Previous versions of events: one row per UPDATE (edit, soft delete, restore) with who and when (PRD 7.4 "never lose data silently"; base of undo, PRD 14 #5). Written only by trigger events_record_history; deleted with its event (purge, child deletion). Serves "history of this event": WHERE event_id = $1 ORDER BY revision DESC (event_history_pkey).';
COMMENT ON INDEX invites_pkey IS 'Redeem / look up an invite by code: WHERE code = $1 (the key''s first column). Unique per child (0022: Citus); the store draws another code while any invite uses it (23505 for a duplicate in one child).';
COMMENT ON COLUMN invites.code IS 'The code the invitee types or opens as a link: 4-64 characters of [A-Za-z0-9_-], compared exactly. Unique per child (invites_pkey (code, child_id)); the store never gives out a code another invite uses, and refuses one that matches two.';
COMMENT ON TABLE invites IS
'Invite codes created by a child''s primary caregiver and redeemed once by another user (PRD 7.3). Serves redemption (by code: invites_pkey) and the "pending invites of this child" list (idx_invites_child).';
