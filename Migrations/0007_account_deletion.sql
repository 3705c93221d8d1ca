-- 0007_account_deletion.sql
--
-- PRD 11 "Delete Account: removes all user data. If sole caregiver, prompts
-- to transfer or delete baby data."
--
-- The application role has no DELETE on users; accounts are deleted with
-- delete_user_account(), SECURITY DEFINER with a fixed search_path:
--   * sole caregiver of a child (no other caregivers row): refused with
--     SQLSTATE 23001 (restrict_violation), CONSTRAINT
--     'users_sole_caregiver_of_child', DETAIL listing the child ids, unless
--     p_delete_sole_children = true, in which case those children are
--     deleted (with their events, history, invites);
--   * primary caregiver of a child that has other caregivers: the primary
--     role passes to the caregiver who joined first (joined_at, then
--     user_id), through transfer_primary_caregiver();
--   * events the user logged / changed / deleted on children that live on
--     are KEPT (they are the child's record, shared with the other
--     caregivers) and de-attributed: logged_by, deleted_by -> NULL where
--     they named the user, updated_by -> NULL (the last change is now this
--     system change). That UPDATE goes through the normal triggers: revision
--     +1, new sync cursor (clients learn about it), history row with
--     changed_by NULL;
--   * then the users row is deleted: caregivers rows cascade, invites the
--     user created cascade, invites.redeemed_by and
--     event_history.changed_by become NULL (foreign keys).
-- Returns false when the user does not exist (idempotent retries).

CREATE FUNCTION delete_user_account(p_user_id uuid, p_delete_sole_children boolean DEFAULT false)
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

    -- Freeze this user's children and their caregiver lists for the rest of
    -- the transaction (children first, then caregivers: one lock order).
    PERFORM 1
       FROM public.children AS c
      WHERE c.id IN (SELECT cg.child_id FROM public.caregivers AS cg
                      WHERE cg.user_id = p_user_id)
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

    -- Children that live on: hand the primary role to the longest-standing
    -- other caregiver.
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

    -- Keep the events, drop the attribution (system change: updated_by NULL).
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

REVOKE ALL ON FUNCTION delete_user_account(uuid, boolean) FROM PUBLIC;

COMMENT ON FUNCTION delete_user_account(uuid, boolean) IS
'Deletes an account (PRD 11). Refuses with SQLSTATE 23001 (restrict_violation), constraint users_sole_caregiver_of_child, DETAIL "child ids: ...", while the user is the only caregiver of a child, unless p_delete_sole_children is true (those children are then deleted with all their data). Otherwise: primary role handed to the longest-standing other caregiver, the user''s events kept but de-attributed (logged_by / deleted_by / updated_by -> NULL, history kept), memberships and created invites deleted, users row deleted. Returns true, or false if no such user. SECURITY DEFINER, search_path pinned to pg_catalog, public, pg_temp.';
