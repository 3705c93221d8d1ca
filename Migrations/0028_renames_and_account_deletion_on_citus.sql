-- 0028_renames_and_account_deletion_on_citus.sql
--
-- What a Citus coordinator could not do with 0027's schema, found by
-- the store's suite on a three-node cluster (make citus-check). On a plain
-- PostgreSQL server the behaviour stays what it was.
--
-- 1. delete_user_account() froze every child the user touches with one
--    SELECT ... FOR UPDATE over all of them, and Citus locks rows of one
--    shard per statement ("could not run distributed query with FOR
--    UPDATE/SHARE commands"). It now takes the same locks in the same order
--    (children by id, then each child's caregivers rows by user), one child
--    per statement. On Citus it also asks for one connection per node
--    (citus.multi_shard_modify_mode = sequential, for its transaction): it
--    changes events on several shards and then deletes from users, which
--    Citus refuses after changes made in parallel. Nothing else changes.
--
-- 2. A display name change reaches the feeds of the user's children because
--    trigger users_sync_display_name re-stamps the user's caregivers rows.
--    On Citus, users is a reference table and caregivers is split by child: a
--    reference table's trigger runs on every node's copy, inside the shard's
--    statement, where Citus refuses a query on a distributed table ("cannot
--    execute a distributed query from a query on a shard"); renames failed.
--    set_display_name(user, name) renames, and where that trigger is off it
--    re-stamps the memberships itself, child by child, from the coordinator.
--    On a Citus coordinator this file turns the trigger off; there, rename
--    with set_display_name() (the store does), not with UPDATE users. On a
--    plain server the trigger stays on, and an UPDATE by hand still reaches
--    the feeds.
--
-- 3. On a Citus coordinator, timeline_events() and sync_events_since() (the
--    DBA's readers) become PL/pgSQL with the same queries: Citus cannot plan a
--    SQL-language function that reads a distributed table, even called with
--    values. On a plain server they stay SQL functions that PostgreSQL inlines
--    (EXPLAIN shows their index scans).
--
-- 4. sync_start_new_epoch() wrote gen_random_uuid() in its UPDATE's SET, which
--    Citus refuses on a reference table (a volatile function there would give
--    each node's copy another value). The new epoch is drawn first, then
--    written: one value on every node. Same result on a plain server.
--
-- Locks: none beyond a catalog update and, on Citus, ALTER TABLE users
-- DISABLE TRIGGER (SHARE ROW EXCLUSIVE on users, brief).

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
    -- On Citus: one connection per node for this transaction. It changes rows of
    -- events on several shards and then deletes from users, a reference table,
    -- which Citus refuses after parallel changes (0028).
    IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'citus') THEN
        PERFORM pg_catalog.set_config('citus.multi_shard_modify_mode', 'sequential', true);
    END IF;
    PERFORM 1 FROM public.users WHERE id = p_user_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;

    -- Freeze every child this changes (memberships, and events the user
    -- logged, changed or deleted), in id order, then the caregiver lists,
    -- one child at a time (0028: Citus locks rows of one shard per statement).
    FOR v_child IN
        SELECT cg.child_id FROM public.caregivers AS cg WHERE cg.user_id = p_user_id
        UNION
        SELECT e.child_id FROM public.events AS e
         WHERE e.logged_by = p_user_id OR e.updated_by = p_user_id OR e.deleted_by = p_user_id
        ORDER BY 1
    LOOP
        PERFORM 1 FROM public.children AS c WHERE c.id = v_child FOR UPDATE;
    END LOOP;
    FOR v_child IN
        SELECT m.child_id FROM public.caregivers AS m WHERE m.user_id = p_user_id ORDER BY 1
    LOOP
        PERFORM 1 FROM public.caregivers AS cg WHERE cg.child_id = v_child ORDER BY cg.user_id FOR UPDATE;
    END LOOP;

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

CREATE FUNCTION set_display_name(p_user_id uuid, p_display_name text)
RETURNS SETOF users
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_before  public.users;
    v_renamed public.users;
    v_child   uuid;
BEGIN
    SELECT * INTO v_before FROM public.users WHERE id = p_user_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    UPDATE public.users SET display_name = p_display_name WHERE id = p_user_id
    RETURNING * INTO v_renamed;
    -- What users_sync_display_name does, where it is off (a Citus coordinator).
    IF v_before.display_name IS DISTINCT FROM p_display_name
       AND EXISTS (SELECT FROM pg_catalog.pg_trigger AS t
                    WHERE t.tgrelid = 'public.users'::regclass
                      AND t.tgname = 'users_sync_display_name'
                      AND t.tgenabled = 'D') THEN
        FOR v_child IN
            SELECT cg.child_id FROM public.caregivers AS cg WHERE cg.user_id = p_user_id ORDER BY 1
        LOOP
            UPDATE public.caregivers SET change_seq = change_seq
             WHERE child_id = v_child AND user_id = p_user_id;
        END LOOP;
    END IF;
    RETURN NEXT v_renamed;
END
$$;

COMMENT ON FUNCTION set_display_name(uuid, text) IS
'Renames a user (users.display_name) and returns the row; no row for an unknown user. Where trigger users_sync_display_name is off (a Citus coordinator, 0028) it also re-stamps the user''s caregivers rows child by child in id order, as the trigger does elsewhere, so each child''s sync feed delivers the new name. SECURITY INVOKER. The store renames with it; on Citus a DBA must too.';

CREATE OR REPLACE FUNCTION sync_start_new_epoch() RETURNS uuid
LANGUAGE plpgsql
AS $$
DECLARE
    v_drawn uuid := gen_random_uuid();
    v_epoch uuid;
BEGIN
    UPDATE sync_state SET epoch = v_drawn RETURNING epoch INTO v_epoch;
    RETURN v_epoch;
END
$$;

DO $citus$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus') THEN
        RETURN; -- a plain PostgreSQL server: the trigger stays on
    END IF;
    SET LOCAL citus.enable_ddl_propagation = on;
    SET LOCAL citus.enable_unsafe_triggers = on;
    ALTER TABLE public.users DISABLE TRIGGER users_sync_display_name;

    -- The DBA's readers as PL/pgSQL: Citus cannot plan a SQL function that reads
    -- a distributed table (it inlines it with its arguments as parameters,
    -- "parameterized queries for SQL functions referencing distributed tables
    -- are not supported"), even called with values. The same queries, run from
    -- the coordinator as router queries on the child's node.
    EXECUTE $definition$
CREATE OR REPLACE FUNCTION public.timeline_events(p_child_id uuid, p_from timestamptz, p_to timestamptz, p_now timestamptz DEFAULT now())
RETURNS SETOF public.events
LANGUAGE plpgsql
STABLE
AS $body$
BEGIN
    RETURN QUERY
    SELECT e.*
      FROM public.events AS e
     WHERE e.child_id = p_child_id
       AND e.deleted_at IS NULL
       AND e.start_time < p_to
       AND e.start_time >= p_from - interval '24 hours'
       AND (e.start_time >= p_from
            OR e.end_time > p_from
            OR (e.end_time IS NULL AND e.event_type = 'sleep' AND p_now > p_from))
    UNION ALL
    SELECT e.*
      FROM public.events AS e
     WHERE e.child_id = p_child_id
       AND e.event_type = 'sleep' AND e.end_time IS NULL AND e.deleted_at IS NULL
       AND e.start_time < p_from - interval '24 hours'
       AND p_now > p_from
     ORDER BY start_time DESC, id;
END
$body$
$definition$;
    EXECUTE $definition$
CREATE OR REPLACE FUNCTION public.sync_events_since(p_child_id uuid, p_after bigint DEFAULT 0, p_limit integer DEFAULT 500)
RETURNS SETOF public.events
LANGUAGE plpgsql
STABLE
AS $body$
BEGIN
    RETURN QUERY
    SELECT e.*
      FROM public.events AS e
     WHERE e.child_id = p_child_id
       AND e.change_seq > p_after
     ORDER BY e.change_seq
     LIMIT p_limit;
END
$body$
$definition$;
    COMMENT ON TRIGGER users_sync_display_name ON public.users IS
        'Off on this Citus coordinator (0028): a reference table''s trigger cannot query caregivers. Rename with set_display_name(), which re-stamps the memberships itself.';
END
$citus$;
