-- 0011_sync_per_child.sql
--
-- Sync, version 2: one change counter per child, the whole family's state,
-- tombstones for rows that are removed, and a NOTIFY per committed change.
-- It replaces the cursor of 0005/0006, (change_xid, change_seq) read below
-- pg_snapshot_xmin(pg_current_snapshot()), which any open write transaction
-- anywhere in the cluster stalled for every family, which pg_dump/restore
-- broke (restored rows keep the old cluster's transaction ids), and which
-- covered events only.
--
-- ---------------------------------------------------------------------------
-- The counter: children.change_seq
-- ---------------------------------------------------------------------------
-- Every write that changes what a child's caregivers see takes the next
-- value of that child's counter and stamps it on the row it writes:
--     UPDATE children SET change_seq = change_seq + 1
--      WHERE id = $child RETURNING change_seq;          -- sync_next_seq()
-- events          INSERT, UPDATE (edit, soft delete, restore)  events.change_seq
-- caregivers      INSERT, UPDATE (role)                         caregivers.change_seq
-- children        UPDATE of name, birth date, primary, time zone,
--                 day start, settings                           children.record_seq
-- events, caregivers DELETE (purge, removal, leaving)           sync_tombstones.change_seq
--
-- Why counter order is commit order, for one child: the UPDATE takes the
-- child's row lock and keeps it until the transaction ends. A second writer
-- of the same child waits for that lock, so it takes N + 1 only after the
-- first one has COMMITTED (or rolled back, and then it takes N again). A
-- reader that sees N + 1 committed therefore sees N committed too: a
-- reader that has seen every change up to N has seen everything <= N, and
-- anything committed later gets a number > N. No snapshot trick, no
-- transaction ids: an open transaction delays only the child it wrote to
-- (and only its own uncommitted change), never other children, databases
-- or families. A transaction that touches several children takes them in
-- child-id order (delete_user_account locks them all first;
-- purge_deleted_events and a display-name change go one child at a time).
--
-- Lock order: a row, then its child. UPDATE and DELETE lock the row before
-- their triggers run; the INSERT triggers first lock an existing row with
-- the same key (an idempotent retry of a client's event id, a membership
-- removed while it is added again) FOR SHARE, then take the child. Without
-- that, an INSERT holding the child and waiting on the key deadlocks with a
-- DELETE or UPDATE holding the key and waiting on the child. A row committed
-- after the INSERT statement took its snapshot is not seen by that lock, so
-- the race is narrowed, not closed; and a transaction that writes several
-- rows of one child in an order of its own can deadlock too. PostgreSQL
-- detects it (40P01): nothing of the victim is applied, and the store
-- retries it (the sync stress test does the same and counts them).
--
-- What a client keeps: an opaque cursor (the Swift SyncCursor) holding, per
-- child it sees, the counter value it has read up to, plus the database's
-- sync epoch. A page returns, per child, every row whose stamp is above the
-- client's position, oldest stamp first.
--
-- Tombstones and the floor: a DELETE leaves (child, stamp, kind, id) in
-- sync_tombstones. purge_deleted_events() removes tombstones older than its
-- retention and raises children.sync_floor to the highest stamp removed: a
-- cursor below the floor may have missed a removal and must resync the
-- child (the Swift feed answers resyncRequired). Deleting a child removes
-- its counter too: its caregivers learn it from the feed (accessRevoked).
--
-- The epoch (sync_state.epoch) travels in every cursor. It comes with a
-- pg_dump/restore or a physical copy (the counters are ordinary columns, so
-- cursors stay valid). An operator who restores an OLDER state (point-in-
-- time recovery, an old backup) must run SELECT sync_start_new_epoch():
-- clients' counters would otherwise be ahead of the server's, and every
-- client is told to resync. Never restore the data without the counters
-- (for example a data-only copy of events into a fresh schema).
--
-- NOTIFY: every counter step sends pg_notify('child_changed', child_id) in
-- the writing transaction; PostgreSQL delivers it at COMMIT (never for a
-- rollback) and folds duplicates within a transaction.
-- ---------------------------------------------------------------------------

------------------------------------------------------------------------------
-- Columns and tables
------------------------------------------------------------------------------

ALTER TABLE children
    ADD COLUMN change_seq bigint NOT NULL DEFAULT 1,
    ADD COLUMN record_seq bigint NOT NULL DEFAULT 1,
    ADD COLUMN sync_floor bigint NOT NULL DEFAULT 0,
    ADD CONSTRAINT children_sync_counters_valid
        CHECK (record_seq BETWEEN 1 AND change_seq AND sync_floor BETWEEN 0 AND change_seq);

ALTER TABLE caregivers
    ADD COLUMN change_seq bigint NOT NULL DEFAULT 0;

CREATE TABLE sync_tombstones (
    child_id   uuid        NOT NULL,
    change_seq bigint      NOT NULL,
    kind       text        NOT NULL,
    entity_id  uuid        NOT NULL,
    removed_at timestamptz NOT NULL DEFAULT now(),

    CONSTRAINT sync_tombstones_pkey PRIMARY KEY (child_id, change_seq),
    CONSTRAINT sync_tombstones_child_id_fkey
        FOREIGN KEY (child_id) REFERENCES children (id) ON DELETE CASCADE,
    CONSTRAINT sync_tombstones_kind_valid CHECK (kind IN ('event', 'caregiver'))
);

CREATE TABLE sync_state (
    singleton boolean NOT NULL DEFAULT true,
    epoch     uuid    NOT NULL DEFAULT gen_random_uuid(),
    CONSTRAINT sync_state_pkey PRIMARY KEY (singleton),
    CONSTRAINT sync_state_one_row CHECK (singleton)
);
INSERT INTO sync_state DEFAULT VALUES;

------------------------------------------------------------------------------
-- Existing data gets its counters: events in their old feed order, then
-- caregivers, then the child's record. The events triggers are off for the
-- renumbering (it is not an edit: no revision, no history row).
------------------------------------------------------------------------------

-- Exactly these two (not DISABLE TRIGGER USER, whose ENABLE would also
-- re-enable a trigger an operator had disabled on purpose).
ALTER TABLE events DISABLE TRIGGER events_bookkeeping, DISABLE TRIGGER events_record_history;
UPDATE events AS e
   SET change_seq = n.seq
  FROM (SELECT id, row_number() OVER (PARTITION BY child_id ORDER BY change_xid, change_seq) AS seq
          FROM events) AS n
 WHERE e.id = n.id;

ALTER TABLE events ENABLE TRIGGER events_bookkeeping, ENABLE TRIGGER events_record_history;

UPDATE caregivers AS cg
   SET change_seq = n.seq
  FROM (SELECT cg2.child_id, cg2.user_id,
               coalesce((SELECT count(*) FROM events e WHERE e.child_id = cg2.child_id), 0)
                 + row_number() OVER (PARTITION BY cg2.child_id ORDER BY cg2.joined_at, cg2.user_id) AS seq
          FROM caregivers cg2) AS n
 WHERE cg.child_id = n.child_id AND cg.user_id = n.user_id;

ALTER TABLE children DISABLE TRIGGER children_set_updated_at;
UPDATE children AS c
   SET change_seq = n.seq, record_seq = n.seq
  FROM (SELECT c2.id,
               1 + (SELECT count(*) FROM events e WHERE e.child_id = c2.id)
                 + (SELECT count(*) FROM caregivers cg WHERE cg.child_id = c2.id) AS seq
          FROM children c2) AS n
 WHERE c.id = n.id;

------------------------------------------------------------------------------
-- The old cursor goes
------------------------------------------------------------------------------

DROP FUNCTION sync_events_since(uuid, xid8, bigint, integer);
DROP INDEX idx_events_child_change;
ALTER TABLE events DROP COLUMN change_xid;
ALTER TABLE events ALTER COLUMN change_seq DROP DEFAULT;
ALTER SEQUENCE events_change_seq OWNED BY NONE;
DROP SEQUENCE events_change_seq;

-- One stamp per row and child: the invariant, and the feed's range scan.
CREATE UNIQUE INDEX events_child_change_seq_key ON events (child_id, change_seq);
CREATE INDEX idx_caregivers_child_change ON caregivers (child_id, change_seq);

------------------------------------------------------------------------------
-- The counter's functions
------------------------------------------------------------------------------

-- The first stamp of a child in a statement updates the child's row (the
-- lock, held to commit, and the counter). Later stamps of the same child in
-- the same statement count on in one transaction-local setting,
--     bb_sync.counters = '<child id>:<last stamp>:<1 if the row is behind>;...'
-- and the statement's end writes the row once and empties the setting
-- (sync_flush_counters): a COPY or an UPDATE of 10,000 events of one child
-- makes two row versions of the child, not 10,000 (each of which the next
-- would have to walk past: the cost grew with the square of the rows). The
-- setting holds only the children of the running statement; set_config(...,
-- true) values roll back with a savepoint, like the row itself.
--
-- The setting is a cache, never trusted: any session can SET it. A stamp
-- taken from it re-locks the child row (SELECT ... FOR NO KEY UPDATE, which
-- writes nothing when this transaction holds the lock already) and never
-- goes below the row's counter, so a forged or stale value can make a gap
-- in the numbers (harmless: positions are "everything up to N"), never a
-- stamp without the lock or a number already given out.
CREATE FUNCTION sync_next_seq(p_child_id uuid) RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_map  text := coalesce(current_setting('bb_sync.counters', true), '');
    v_last text := substring(v_map from p_child_id::text || ':(\d+):');
    v_seq  bigint;
BEGIN
    IF v_last IS NULL THEN
        UPDATE public.children SET change_seq = change_seq + 1
         WHERE id = p_child_id
        RETURNING change_seq INTO v_seq;
        IF v_seq IS NULL THEN
            RETURN NULL;     -- no such child (being deleted in this transaction)
        END IF;
        PERFORM pg_notify('child_changed', p_child_id::text);
        v_map := v_map || p_child_id::text || ':' || v_seq || ':0;';
    ELSE
        SELECT change_seq INTO v_seq FROM public.children
         WHERE id = p_child_id
           FOR NO KEY UPDATE;
        IF v_seq IS NULL THEN
            RETURN NULL;
        END IF;
        v_seq := greatest(v_seq, v_last::bigint) + 1;
        v_map := regexp_replace(v_map, p_child_id::text || ':\d+:[01];', p_child_id::text || ':' || v_seq || ':1;');
    END IF;
    PERFORM set_config('bb_sync.counters', v_map, true);
    RETURN v_seq;
END
$$;

REVOKE ALL ON FUNCTION sync_next_seq(uuid) FROM PUBLIC;

CREATE FUNCTION sync_flush_counters() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_map   text := current_setting('bb_sync.counters', true);
    v_entry text[];
BEGIN
    IF v_map IS NULL OR v_map = '' THEN
        RETURN NULL;
    END IF;
    FOR v_entry IN SELECT regexp_matches(v_map, '([0-9a-f-]{36}):(\d+):1;', 'g') LOOP
        UPDATE public.children SET change_seq = v_entry[2]::bigint
         WHERE id = v_entry[1]::uuid AND change_seq < v_entry[2]::bigint;
    END LOOP;
    PERFORM set_config('bb_sync.counters', '', true);
    RETURN NULL;
END
$$;

REVOKE ALL ON FUNCTION sync_flush_counters() FROM PUBLIC;

CREATE FUNCTION sync_record_removal() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_seq bigint;
BEGIN
    -- A child deleted in this transaction (its rows cascade) keeps no tombstones.
    IF NOT EXISTS (SELECT 1 FROM public.children WHERE id = OLD.child_id) THEN
        RETURN NULL;
    END IF;
    v_seq := public.sync_next_seq(OLD.child_id);
    IF v_seq IS NOT NULL THEN
        INSERT INTO public.sync_tombstones (child_id, change_seq, kind, entity_id)
        VALUES (OLD.child_id, v_seq, TG_ARGV[0], (to_jsonb(OLD) ->> TG_ARGV[1])::uuid);
    END IF;
    RETURN NULL;
END
$$;

REVOKE ALL ON FUNCTION sync_record_removal() FROM PUBLIC;

CREATE FUNCTION sync_stamp_row() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        -- Row first, child second, as for UPDATE and DELETE (see "Lock order").
        PERFORM 1 FROM caregivers
         WHERE child_id = NEW.child_id AND user_id = NEW.user_id
           FOR SHARE;
    END IF;
    -- 0 only when the child does not exist: its foreign key refuses the row.
    NEW.change_seq := coalesce(sync_next_seq(NEW.child_id), 0);
    RETURN NEW;
END
$$;

CREATE FUNCTION children_sync_record() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_map  text;
    v_last text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        NEW.change_seq := 1;
        NEW.record_seq := 1;
        NEW.sync_floor := 0;
    ELSE
        -- The row is locked by this UPDATE: the same argument as sync_next_seq(),
        -- counting on from the transaction's own stamps of this child if any.
        v_map  := coalesce(current_setting('bb_sync.counters', true), '');
        v_last := substring(v_map from NEW.id::text || ':(\d+):');
        NEW.change_seq := greatest(OLD.change_seq, coalesce(v_last::bigint, 0)) + 1;
        NEW.record_seq := NEW.change_seq;
        NEW.sync_floor := OLD.sync_floor;
        NEW.updated_at := now();
        IF v_last IS NULL THEN
            v_map := v_map || NEW.id::text || ':' || NEW.change_seq || ':0;';
        ELSE
            v_map := regexp_replace(v_map, NEW.id::text || ':\d+:[01];', NEW.id::text || ':' || NEW.change_seq || ':0;');
        END IF;
        PERFORM set_config('bb_sync.counters', v_map, true);
        PERFORM pg_notify('child_changed', NEW.id::text);
    END IF;
    RETURN NEW;
END
$$;

CREATE FUNCTION sync_start_new_epoch() RETURNS uuid
LANGUAGE sql
AS $$
    UPDATE sync_state SET epoch = gen_random_uuid() RETURNING epoch
$$;

REVOKE ALL ON FUNCTION sync_start_new_epoch() FROM PUBLIC;

------------------------------------------------------------------------------
-- Triggers
------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION events_bookkeeping() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
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
        -- Row first, child second, as for UPDATE and DELETE (see "Lock order"
        -- in 0011_sync_per_child.sql): an insert of an id that another
        -- transaction is changing waits for it before it takes the child.
        PERFORM 1 FROM events WHERE id = NEW.id FOR SHARE;
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

    -- Sync stamp: the child's next counter value (see 0011_sync_per_child.sql).
    -- 0 only when the child does not exist: events_child_id_fkey refuses the row.
    NEW.change_seq := coalesce(sync_next_seq(NEW.child_id), 0);
    RETURN NEW;
END
$$;

COMMENT ON FUNCTION events_bookkeeping() IS
'Trigger function (BEFORE INSERT OR UPDATE on events). INSERT: logged_by required (23502, events_logged_by_required), revision := 1, updated_by defaults to logged_by. UPDATE: id and child_id immutable (23514, events_id_immutable / events_child_id_immutable), created_at kept, revision := OLD.revision + 1, updated_at := now(), deleted_by cleared on restore (deleted_at set -> NULL). Both: change_seq := sync_next_seq(child_id), the child''s next sync counter value (0011_sync_per_child.sql).';

CREATE TRIGGER events_sync_removal
    AFTER DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION sync_record_removal('event', 'id');

CREATE TRIGGER caregivers_sync_stamp
    BEFORE INSERT OR UPDATE ON caregivers
    FOR EACH ROW EXECUTE FUNCTION sync_stamp_row();

CREATE TRIGGER caregivers_sync_removal
    AFTER DELETE ON caregivers
    FOR EACH ROW EXECUTE FUNCTION sync_record_removal('caregiver', 'user_id');

-- The counter rows of the children a statement stamped more than once.
CREATE TRIGGER events_sync_flush
    AFTER INSERT OR UPDATE OR DELETE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION sync_flush_counters();

CREATE TRIGGER caregivers_sync_flush
    AFTER INSERT OR UPDATE OR DELETE ON caregivers
    FOR EACH STATEMENT EXECUTE FUNCTION sync_flush_counters();

-- The record's own columns: a counter bump (change_seq) or a floor change
-- alone is not a change of the record and must not move updated_at.
DROP TRIGGER children_set_updated_at ON children;

CREATE TRIGGER children_sync_record_insert
    BEFORE INSERT ON children
    FOR EACH ROW EXECUTE FUNCTION children_sync_record();

CREATE TRIGGER children_sync_record_update
    BEFORE UPDATE ON children
    FOR EACH ROW
    WHEN ((OLD.name, OLD.birth_date, OLD.primary_caregiver_id, OLD.timezone, OLD.day_start_time, OLD.settings)
          IS DISTINCT FROM
          (NEW.name, NEW.birth_date, NEW.primary_caregiver_id, NEW.timezone, NEW.day_start_time, NEW.settings))
    EXECUTE FUNCTION children_sync_record();

------------------------------------------------------------------------------
-- Writers of several children take them in id order
------------------------------------------------------------------------------

-- A caregiver's display name is part of each of their children's family
-- state (ChildCaregiver): a rename re-stamps their memberships, one child at
-- a time in id order (sync_stamp_row takes each stamp).
CREATE FUNCTION users_sync_display_name() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_child uuid;
BEGIN
    FOR v_child IN
        SELECT cg.child_id FROM caregivers AS cg WHERE cg.user_id = NEW.id ORDER BY cg.child_id
    LOOP
        UPDATE caregivers SET change_seq = change_seq
         WHERE child_id = v_child AND user_id = NEW.id;
    END LOOP;
    RETURN NULL;
END
$$;

CREATE TRIGGER users_sync_display_name
    AFTER UPDATE OF display_name ON users
    FOR EACH ROW
    WHEN (OLD.display_name IS DISTINCT FROM NEW.display_name)
    EXECUTE FUNCTION users_sync_display_name();

COMMENT ON FUNCTION users_sync_display_name() IS
'Trigger function (AFTER UPDATE OF display_name on users): re-stamps the user''s caregivers rows child by child in id order, so each child''s sync feed delivers the new name.';
COMMENT ON TRIGGER users_sync_display_name ON users IS
'A display name change reaches every child''s sync feed the user belongs to (users_sync_display_name).';

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

    -- One child at a time, in id order, one statement per step: each DELETE
    -- locks its rows, then (its first tombstone) the child, the same order as
    -- an edit or a restore, and the counter cache holds one child. A
    -- concurrent restore wins: the row no longer matches when re-checked.
    FOR v_child IN
        SELECT e.child_id FROM public.events AS e WHERE e.deleted_at < v_cutoff
        UNION
        SELECT t.child_id FROM public.sync_tombstones AS t WHERE t.removed_at < v_cutoff
        ORDER BY 1
    LOOP
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

COMMENT ON FUNCTION purge_deleted_events(interval) IS
'Hard-deletes events soft-deleted more than older_than ago (default and minimum 30 days, PRD 11) together with their event_history, each leaving a sync tombstone; then removes sync tombstones older than older_than and raises children.sync_floor to the highest stamp removed (older cursors must resync the child). Returns the number of events deleted. Works one child at a time in id order (rows, then the child, like an edit). SECURITY DEFINER with search_path pinned to pg_catalog, public, pg_temp. older_than NULL or < 30 days: SQLSTATE 22023. Run it from a daily job.';

-- delete_user_account: as in 0007, plus the children of events it
-- de-attributes (children the user may have left) in the first lock.
CREATE OR REPLACE FUNCTION delete_user_account(p_user_id uuid, p_delete_sole_children boolean DEFAULT false)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_sole      uuid[];
    v_child     uuid;
    v_successor uuid;
BEGIN
    PERFORM 1 FROM public.users WHERE id = p_user_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;

    -- Freeze every child this changes (memberships, and events the user
    -- logged, changed or deleted), in id order, then the caregiver lists.
    PERFORM 1
       FROM public.children AS c
      WHERE c.id IN (SELECT cg.child_id FROM public.caregivers AS cg WHERE cg.user_id = p_user_id
                     UNION
                     SELECT e.child_id FROM public.events AS e
                      WHERE e.logged_by = p_user_id OR e.updated_by = p_user_id OR e.deleted_by = p_user_id)
      ORDER BY c.id
        FOR UPDATE;
    PERFORM 1
       FROM public.caregivers AS cg
      WHERE cg.child_id IN (SELECT m.child_id FROM public.caregivers AS m
                             WHERE m.user_id = p_user_id)
      ORDER BY cg.child_id, cg.user_id
        FOR UPDATE;

    SELECT array_agg(cg.child_id ORDER BY cg.child_id)
      INTO v_sole
      FROM public.caregivers AS cg
     WHERE cg.user_id = p_user_id
       AND NOT EXISTS (SELECT 1 FROM public.caregivers AS o
                        WHERE o.child_id = cg.child_id
                          AND o.user_id <> p_user_id);

    IF v_sole IS NOT NULL THEN
        IF NOT p_delete_sole_children THEN
            RAISE EXCEPTION 'user % is the sole caregiver of % child(ren)',
                            p_user_id, cardinality(v_sole)
                USING ERRCODE    = 'restrict_violation',    -- 23001
                      CONSTRAINT = 'users_sole_caregiver_of_child',
                      SCHEMA     = 'public',
                      TABLE      = 'users',
                      DETAIL     = 'child ids: ' || array_to_string(v_sole, ', '),
                      HINT       = 'Invite another caregiver and transfer the primary role, delete the children, or call delete_user_account(id, true) to delete them with the account.';
        END IF;
        DELETE FROM public.children WHERE id = ANY (v_sole);
    END IF;

    FOR v_child IN
        SELECT c.id FROM public.children AS c
         WHERE c.primary_caregiver_id = p_user_id
         ORDER BY c.id
    LOOP
        SELECT o.user_id INTO v_successor
          FROM public.caregivers AS o
         WHERE o.child_id = v_child AND o.user_id <> p_user_id
         ORDER BY o.joined_at, o.user_id
         LIMIT 1;
        PERFORM public.transfer_primary_caregiver(v_child, v_successor);
    END LOOP;

    UPDATE public.events
       SET logged_by  = NULLIF(logged_by, p_user_id),
           deleted_by = NULLIF(deleted_by, p_user_id),
           updated_by = NULL
     WHERE logged_by = p_user_id
        OR updated_by = p_user_id
        OR deleted_by = p_user_id;

    DELETE FROM public.users WHERE id = p_user_id;
    RETURN true;
END
$$;

------------------------------------------------------------------------------
-- A reader for DBAs (the Swift feed is the client API)
------------------------------------------------------------------------------

CREATE FUNCTION sync_events_since(p_child_id uuid, p_after bigint DEFAULT 0, p_limit integer DEFAULT 500)
RETURNS SETOF events
LANGUAGE sql
STABLE
AS $$
    SELECT e.*
      FROM events AS e
     WHERE e.child_id = p_child_id
       AND e.change_seq > p_after
     ORDER BY e.change_seq
     LIMIT p_limit
$$;

------------------------------------------------------------------------------
-- Grants: the counters are written only by the triggers above
------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION setup_roles_and_grants() RETURNS void
LANGUAGE plpgsql
AS $fn$
DECLARE
    r text;
    s text := current_schema();
BEGIN
    FOREACH r IN ARRAY ARRAY['babybasics_app', 'babybasics_readonly'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = r) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r);
                RAISE NOTICE 'created role %', r;
            EXCEPTION
                WHEN insufficient_privilege THEN
                    RAISE NOTICE 'role % was not created (%); an administrator must run "CREATE ROLE % NOLOGIN" and then run SELECT setup_roles_and_grants() as the schema owner', r, SQLERRM, r;
                WHEN duplicate_object OR unique_violation THEN
                    NULL;
            END;
        END IF;
    END LOOP;

    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'babybasics_app') THEN
        EXECUTE format('GRANT USAGE ON SCHEMA %I TO babybasics_app', s);

        GRANT SELECT, INSERT, UPDATE ON users, caregivers, invites, events TO babybasics_app;
        -- children: every column but the sync counters (written by triggers only).
        REVOKE INSERT, UPDATE ON children FROM babybasics_app;
        GRANT SELECT ON children TO babybasics_app;
        GRANT INSERT (id, name, birth_date, primary_caregiver_id, timezone, day_start_time, settings, created_at, updated_at),
              UPDATE (name, birth_date, primary_caregiver_id, timezone, day_start_time, settings, updated_at)
           ON children TO babybasics_app;
        GRANT DELETE ON children, caregivers, invites TO babybasics_app;
        GRANT SELECT ON event_history, sync_tombstones, sync_state TO babybasics_app;
        GRANT SELECT ON feedings, diapers, sleeps, notes, active_sleeps, events_export
            TO babybasics_app;
        GRANT EXECUTE ON FUNCTION purge_deleted_events(interval),
                                  delete_user_account(uuid, boolean)
            TO babybasics_app;
        -- Called by the events and caregivers triggers, which run as the
        -- caller. Calling it directly only leaves a gap in the counter.
        GRANT EXECUTE ON FUNCTION sync_next_seq(uuid) TO babybasics_app;

        REVOKE DELETE, TRUNCATE, REFERENCES, TRIGGER ON users, events FROM babybasics_app;
        REVOKE INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER
            ON event_history, sync_tombstones, sync_state FROM babybasics_app;
        REVOKE TRUNCATE, REFERENCES, TRIGGER ON children, caregivers, invites FROM babybasics_app;
    ELSE
        RAISE NOTICE 'role babybasics_app does not exist: its grants were skipped';
    END IF;

    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'babybasics_readonly') THEN
        EXECUTE format('GRANT USAGE ON SCHEMA %I TO babybasics_readonly', s);

        GRANT SELECT ON children, caregivers, events, event_history, sync_tombstones, sync_state
            TO babybasics_readonly;
        GRANT SELECT ON feedings, diapers, sleeps, notes, active_sleeps, events_export
            TO babybasics_readonly;
        REVOKE SELECT ON users, invites FROM babybasics_readonly;
        GRANT SELECT (id, email, display_name, created_at, updated_at)
            ON users TO babybasics_readonly;
        GRANT SELECT (child_id, created_by, created_at, expires_at, redeemed_by, redeemed_at)
            ON invites TO babybasics_readonly;

        REVOKE INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER
            ON users, children, caregivers, invites, events, event_history, sync_tombstones, sync_state
            FROM babybasics_readonly;
    ELSE
        RAISE NOTICE 'role babybasics_readonly does not exist: its grants were skipped';
    END IF;

    IF pg_catalog.has_schema_privilege('public', s, 'CREATE') THEN
        EXECUTE format('REVOKE CREATE ON SCHEMA %I FROM PUBLIC', s);
        IF pg_catalog.has_schema_privilege('public', s, 'CREATE') THEN
            RAISE WARNING 'PUBLIC still has CREATE on schema %: revoke it as the schema owner', s;
        ELSE
            RAISE NOTICE 'revoked CREATE on schema % from PUBLIC', s;
        END IF;
    END IF;
END
$fn$;

DO $$ BEGIN PERFORM setup_roles_and_grants(); END $$;

------------------------------------------------------------------------------
-- Comments
------------------------------------------------------------------------------

COMMENT ON FUNCTION setup_roles_and_grants() IS
'Creates babybasics_app and babybasics_readonly (NOLOGIN) if missing and allowed (NOTICE otherwise), then grants the least-privilege set to the roles that exist (children: no INSERT/UPDATE of the sync counters). Idempotent; run it as the schema owner again after an administrator created the roles by hand (managed databases without CREATEROLE).';
COMMENT ON FUNCTION sync_next_seq(uuid) IS
'Takes the child''s next sync counter value. The first time in a transaction: UPDATE children SET change_seq = change_seq + 1 ... RETURNING, which locks the child row to the end of the transaction (so per child counter order is commit order), and pg_notify(''child_changed'', child_id), delivered at COMMIT. Later times in the same statement: counts on from the transaction-local setting bb_sync.counters (a cache: the child row is locked again FOR NO KEY UPDATE and the stamp never goes below its counter, so a forged setting cannot skip the lock or reuse a number), written to the row at the end of the statement (sync_flush_counters). NULL when the child does not exist. SECURITY DEFINER: the application role cannot write the counters itself.';
COMMENT ON FUNCTION sync_flush_counters() IS
'Statement trigger function (AFTER each statement on events and caregivers): writes children.change_seq for the children whose later stamps in this statement were counted in the transaction-local setting bb_sync.counters (see sync_next_seq), once per child and statement, then empties the setting.';
COMMENT ON TRIGGER events_sync_flush ON events IS 'Writes the counters of the children this statement stamped more than once (sync_flush_counters).';
COMMENT ON TRIGGER caregivers_sync_flush ON caregivers IS 'Writes the counters of the children this statement stamped more than once (sync_flush_counters).';
COMMENT ON FUNCTION sync_record_removal() IS
'Trigger function (AFTER DELETE on events and caregivers; arguments: the kind, the id column): stamps the removal with the child''s next counter value and stores it in sync_tombstones. Nothing when the child itself is being deleted (its caregivers learn that from the feed).';
COMMENT ON FUNCTION sync_stamp_row() IS
'Trigger function (BEFORE INSERT OR UPDATE on caregivers): NEW.change_seq := the child''s next counter value.';
COMMENT ON FUNCTION children_sync_record() IS
'Trigger function on children. INSERT: counters start at change_seq = record_seq = 1, sync_floor = 0. UPDATE of the record (name, birth_date, primary_caregiver_id, timezone, day_start_time, settings; see the WHEN of children_sync_record_update): change_seq + 1, record_seq := change_seq, updated_at := now(), pg_notify(''child_changed'').';
COMMENT ON FUNCTION sync_start_new_epoch() IS
'Starts a new sync epoch: every client cursor then gets resyncRequired for all its children. Run it after restoring an OLDER state of the database (point-in-time recovery, an old backup), never needed after a pg_dump/restore of the current state. Returns the new epoch.';
COMMENT ON FUNCTION sync_events_since(uuid, bigint, integer) IS
'For DBAs: the events (tombstones included) of a child stamped after p_after, oldest stamp first (events_child_change_seq_key). The client feed (Swift) also covers the child record, caregivers and sync_tombstones.';

COMMENT ON COLUMN children.change_seq IS 'Sync counter: the last stamp taken for this child (0011_sync_per_child.sql). Moved only by sync_next_seq() and the record trigger; per child, stamp order is commit order.';
COMMENT ON COLUMN children.record_seq IS 'Sync stamp of the child record itself (name, birth date, primary, time zone, day start, settings).';
COMMENT ON COLUMN children.sync_floor IS 'Highest tombstone stamp removed by purge_deleted_events(): a client cursor below it must resync the child.';
COMMENT ON COLUMN caregivers.change_seq IS 'Sync stamp of the last INSERT/UPDATE of this membership (the child''s counter).';
COMMENT ON COLUMN events.change_seq IS 'Sync stamp of the last INSERT/UPDATE (edit, soft delete, restore): the child''s counter value, unique per child (events_child_change_seq_key). Page with WHERE child_id = $1 AND change_seq > $2 ORDER BY change_seq.';
COMMENT ON COLUMN events.updated_at IS 'Last change on the server, set by trigger on every UPDATE. Not a sync cursor (see change_seq).';
COMMENT ON TABLE sync_tombstones IS
'Rows removed from a child''s family state (a purged event, a caregiver removed or leaving), with the stamp of the removal, delivered by the sync feed. Pruned by purge_deleted_events() after its retention, which raises children.sync_floor. Written only by trigger sync_record_removal.';
COMMENT ON COLUMN sync_tombstones.child_id IS 'The child whose state lost the row.';
COMMENT ON COLUMN sync_tombstones.change_seq IS 'The removal''s stamp (the child''s counter).';
COMMENT ON COLUMN sync_tombstones.kind IS '''event'' (entity_id = events.id) or ''caregiver'' (entity_id = users.id).';
COMMENT ON COLUMN sync_tombstones.entity_id IS 'The removed row''s id (event id, or the caregiver''s user id).';
COMMENT ON COLUMN sync_tombstones.removed_at IS 'When it was removed (retention).';
COMMENT ON INDEX sync_tombstones_pkey IS 'Sync feed: WHERE child_id = $1 AND change_seq > $2 ORDER BY change_seq.';
COMMENT ON CONSTRAINT children_sync_counters_valid ON children IS 'record_seq and sync_floor never exceed the counter.';
COMMENT ON TABLE sync_state IS 'One row: the sync epoch carried by every client cursor (sync_start_new_epoch()).';
COMMENT ON COLUMN sync_state.singleton IS 'Always true: the table has one row.';
COMMENT ON COLUMN sync_state.epoch IS 'Changes only with sync_start_new_epoch(); a cursor of another epoch resyncs.';
COMMENT ON INDEX sync_state_pkey IS 'The single row.';
COMMENT ON INDEX events_child_change_seq_key IS 'Sync feed: WHERE child_id = $1 AND change_seq > $2 ORDER BY change_seq LIMIT $3 (one bounded range scan per child). Unique: one stamp per row and child.';
COMMENT ON INDEX idx_caregivers_child_change IS 'Sync feed: caregivers of a child stamped after the client''s position.';
COMMENT ON TRIGGER events_sync_removal ON events IS 'A hard-deleted event (purge) leaves a sync tombstone.';
COMMENT ON TRIGGER caregivers_sync_stamp ON caregivers IS 'Stamps a new or changed membership with the child''s next counter value.';
COMMENT ON TRIGGER caregivers_sync_removal ON caregivers IS 'A removed membership leaves a sync tombstone.';
COMMENT ON TRIGGER children_sync_record_insert ON children IS 'Starts the child''s sync counters.';
COMMENT ON TRIGGER children_sync_record_update ON children IS 'A change of the child record takes the next stamp (record_seq) and sets updated_at; counter and floor moves alone do not.';
COMMENT ON TRIGGER events_bookkeeping ON events IS 'Maintains revision, updated_at, updated_by default, created_at, deleted_by and the sync stamp change_seq; refuses a missing logged_by and changes of id / child_id.';
