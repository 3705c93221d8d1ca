-- 0013_sync_stamps_from_one_sequence.sql
--
-- Sync stamps come from one sequence, taken while the child's row is locked.
-- The rules of 0011 hold (per child, stamp order is commit order; an open
-- transaction delays only its own child); what changes is where the number
-- comes from and what it costs a write.
--
-- ---------------------------------------------------------------------------
-- Why: the cost of a counter row
-- ---------------------------------------------------------------------------
-- 0011 took each stamp with UPDATE children SET change_seq = change_seq + 1.
-- Measured with pgbench on this schema (one insert per transaction), that
-- UPDATE is most of what sync added to a write: a new version of the child
-- row, its three CHECK constraints evaluated again (the settings CHECK plans
-- an SQL helper each time), the WHEN of its record trigger and seven
-- foreign-key checks for a row whose keys did not change. A single event
-- insert cost 1.3-1.4x what it cost before 0011, a COPY 1.7x. The statement
-- cache that 0011 used to count on within a statement (bb_sync.counters) was
-- itself a setting any session could forge, so it had to lock again anyway.
--
-- ---------------------------------------------------------------------------
-- The stamp: sync_next_seq(child)
-- ---------------------------------------------------------------------------
--     SELECT FROM children WHERE id = $child FOR NO KEY UPDATE;
--     then pg_notify('child_changed', $child) and nextval('sync_stamp_seq').
-- The lock is the one 0011's UPDATE took (the child row, NO KEY UPDATE, held
-- to the end of the transaction); it writes no new row version. The number
-- is the next value of one sequence for the whole database.
--
-- Why stamp order is still commit order, for one child: a writer holds the
-- child's lock from before it draws its number until it commits or rolls
-- back. The next writer of that child draws only after it got the lock, so
-- after the first one ended, and nextval only grows: its number is larger.
-- Numbers are not consecutive per child (other children draw in between)
-- and never were promised to be: a position means "everything of this child
-- up to N". A rolled-back writer leaves a gap, as before.
--
-- Why a reader that saw stamp N of a child saw every stamp below it: the
-- writer of a smaller stamp of that child released the lock, so it had
-- committed (or rolled back) and left the set of running transactions,
-- before the writer of N could draw N; a snapshot that sees N's commit sees
-- the smaller one's too.
--
-- ---------------------------------------------------------------------------
-- The child's position: sync_child_position(child)
-- ---------------------------------------------------------------------------
-- With no counter column, the highest stamp of a child is read, in the
-- reader's snapshot, from the rows that carry stamps: the child record
-- (record_seq), events, caregivers, tombstones, and sync_floor (which keeps
-- the position of tombstones that purge_deleted_events() pruned). Each is
-- one backward probe of the index the feed pages with. The highest stamp a
-- snapshot sees of a child is a position where the client may stand: by the
-- argument above, everything of that child below it is committed and
-- visible. Rows only gain higher stamps (an edit re-stamps its row; a
-- removal leaves a tombstone with a new stamp), so the position never goes
-- back, except by restoring an older state (sync_start_new_epoch()).
--
-- Existing cursors stay valid: the sequence starts above every stamp of
-- every child, so each child's next stamp is above any position a client
-- holds.
--
-- purge_deleted_events() keeps its steps (one child at a time, rows before
-- the child); the "counter cache" its body mentions is gone.
--
-- What an operator must never do, in addition to 0011's list: set the
-- sequence back (setval to a smaller value, or restore the tables without
-- it): new writes would take numbers below clients' positions and never be
-- sent. pg_dump includes the sequence with its value.
-- ---------------------------------------------------------------------------

CREATE SEQUENCE sync_stamp_seq AS bigint;

-- Above every stamp of every child (children.change_seq was each child's
-- highest; the row maxima are belt and braces).
SELECT setval('sync_stamp_seq',
              greatest(1,
                       (SELECT max(change_seq) FROM children),
                       (SELECT max(change_seq) FROM events),
                       (SELECT max(change_seq) FROM caregivers),
                       (SELECT max(change_seq) FROM sync_tombstones)));

------------------------------------------------------------------------------
-- The cache of 0011 goes
------------------------------------------------------------------------------

DROP TRIGGER events_sync_flush ON events;
DROP TRIGGER caregivers_sync_flush ON caregivers;
DROP FUNCTION sync_flush_counters();

------------------------------------------------------------------------------
-- The stamp
------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION sync_next_seq(p_child_id uuid) RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- The lock first, in a statement of its own. (In one statement,
    -- SELECT nextval(...) ... FOR NO KEY UPDATE, PostgreSQL computes the
    -- select list before it locks the row: the number would be drawn before
    -- waiting for the lock, and a writer holding the lock could commit a
    -- larger one first.) Locking a row this transaction holds already (the
    -- next row of a COPY, the record trigger of an UPDATE of this child)
    -- writes nothing.
    PERFORM FROM public.children AS c WHERE c.id = p_child_id FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;         -- no such child (being deleted in this transaction)
    END IF;
    PERFORM pg_notify('child_changed', p_child_id::text);
    RETURN nextval('public.sync_stamp_seq');
END
$$;

CREATE OR REPLACE FUNCTION children_sync_record() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        -- Below every stamp: a client meets a new child at position 0, and
        -- the feed sends its record first.
        NEW.record_seq := 1;
        NEW.sync_floor := 0;
    ELSE
        -- The UPDATE holds the row lock already; sync_next_seq() draws the
        -- number and notifies.
        NEW.record_seq := sync_next_seq(NEW.id);
        NEW.sync_floor := OLD.sync_floor;
        NEW.updated_at := now();
    END IF;
    RETURN NEW;
END
$$;

------------------------------------------------------------------------------
-- The position
------------------------------------------------------------------------------

ALTER TABLE children DROP CONSTRAINT children_sync_counters_valid;
ALTER TABLE children DROP COLUMN change_seq;
ALTER TABLE children
    ADD CONSTRAINT children_sync_stamps_valid CHECK (record_seq >= 1 AND sync_floor >= 0);

CREATE FUNCTION sync_child_position(p_child_id uuid) RETURNS bigint
LANGUAGE plpgsql
STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN greatest(
        (SELECT greatest(c.record_seq, c.sync_floor) FROM children AS c WHERE c.id = p_child_id),
        (SELECT max(e.change_seq) FROM events AS e WHERE e.child_id = p_child_id),
        (SELECT max(cg.change_seq) FROM caregivers AS cg WHERE cg.child_id = p_child_id),
        (SELECT max(t.change_seq) FROM sync_tombstones AS t WHERE t.child_id = p_child_id));
END
$$;

------------------------------------------------------------------------------
-- Grants: the sequence is the stamp function's alone (no role but the owner
-- can set it back). sync_child_position() keeps PostgreSQL's default EXECUTE
-- for everyone: it runs as the caller and reads only what the caller may.
------------------------------------------------------------------------------

REVOKE ALL ON SEQUENCE sync_stamp_seq FROM PUBLIC;

------------------------------------------------------------------------------
-- Comments
------------------------------------------------------------------------------

COMMENT ON SEQUENCE sync_stamp_seq IS
'Sync stamps of every child (0013_sync_stamps_from_one_sequence.sql), drawn only by sync_next_seq() under the child''s row lock. Never set it back: new writes would sort below clients'' positions.';
COMMENT ON FUNCTION sync_next_seq(uuid) IS
'The next sync stamp of a child: locks the child row FOR NO KEY UPDATE to the end of the transaction (so per child stamp order is commit order), draws nextval(''sync_stamp_seq'') and sends pg_notify(''child_changed'', child_id), delivered at COMMIT. NULL when the child does not exist. SECURITY DEFINER: the application role has no right on the sequence; calling it directly only leaves a gap.';
COMMENT ON FUNCTION children_sync_record() IS
'Trigger function on children. INSERT: record_seq = 1 (below every stamp: a new child reaches a client first), sync_floor = 0. UPDATE of the record (name, birth_date, primary_caregiver_id, timezone, day_start_time, settings; see the WHEN of children_sync_record_update): record_seq := sync_next_seq(id), updated_at := now().';
COMMENT ON FUNCTION sync_child_position(uuid) IS
'The highest sync stamp of a child visible to the caller''s snapshot: greatest of record_seq, sync_floor and the newest stamp of its events, caregivers and tombstones (one index probe each). Every stamp of the child below it is committed and visible in the same snapshot. NULL when the child does not exist.';
COMMENT ON CONSTRAINT children_sync_stamps_valid ON children IS 'record_seq is a stamp (>= 1); sync_floor is a stamp or 0.';
COMMENT ON COLUMN children.record_seq IS 'Sync stamp of the child record itself (name, birth date, primary, time zone, day start, settings); 1 until its first change.';
COMMENT ON COLUMN children.sync_floor IS 'Highest tombstone stamp removed by purge_deleted_events(): a client cursor below it must resync the child. Part of the child''s position (sync_child_position).';
COMMENT ON COLUMN caregivers.change_seq IS 'Sync stamp of the last INSERT/UPDATE of this membership (sync_next_seq).';
COMMENT ON COLUMN events.change_seq IS 'Sync stamp of the last INSERT/UPDATE (edit, soft delete, restore), from sync_next_seq(); unique per child (events_child_change_seq_key). Page with WHERE child_id = $1 AND change_seq > $2 ORDER BY change_seq.';
COMMENT ON COLUMN sync_tombstones.change_seq IS 'The removal''s stamp (sync_next_seq).';
COMMENT ON TRIGGER children_sync_record_update ON children IS 'A change of the child record takes the next stamp (record_seq) and sets updated_at; a floor move alone does not.';
COMMENT ON TRIGGER children_sync_record_insert ON children IS 'Starts the child''s record stamp (record_seq = 1, sync_floor = 0).';
