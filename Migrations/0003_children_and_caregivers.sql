-- 0003_children_and_caregivers.sql
--
-- Children (PRD 8 "Baby") and the caregivers join table (PRD 8
-- "BabyCaregiver").
--
-- "Each child has exactly one primary caregiver, and that primary is
-- children.primary_caregiver_id" is enforced declaratively:
--   * caregivers_one_primary_per_child: partial UNIQUE index, at most one
--     role = 'primary' row per child (checked immediately, 23505);
--   * caregivers.primary_user_id is a stored generated column equal to
--     user_id on the primary row and NULL otherwise;
--   * children_primary_is_caregiver_fkey:
--       children (id, primary_caregiver_id)
--         -> caregivers (child_id, primary_user_id)
--     so the child's primary_caregiver_id has a role = 'primary' row
--     (at least one primary);
--   * caregivers_primary_matches_child_fkey:
--       caregivers (child_id, primary_user_id)
--         -> children (id, primary_caregiver_id)
--     so the primary row is the user named in children (MATCH SIMPLE:
--     non-primary rows have a NULL primary_user_id and are not checked).
-- Both foreign keys are DEFERRABLE INITIALLY DEFERRED: they are checked at
-- COMMIT, so a transaction can insert the child and then its primary
-- caregivers row, or swap the primary in any order. A violation surfaces at
-- COMMIT as SQLSTATE 23503 with the constraint name above.
-- Creating a child therefore means, in ONE transaction:
--   INSERT INTO children (name, birth_date, primary_caregiver_id) ...;
--   INSERT INTO caregivers (child_id, user_id, role) VALUES ($child, $user, 'primary');

CREATE TABLE children (
    id                   uuid        NOT NULL DEFAULT gen_random_uuid(),
    name                 text        NOT NULL,
    birth_date           date        NOT NULL,
    primary_caregiver_id uuid        NOT NULL,
    timezone             text        NOT NULL DEFAULT 'UTC',
    day_start_time       time        NOT NULL DEFAULT '00:00',
    settings             jsonb       NOT NULL DEFAULT '{}',
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),

    CONSTRAINT children_pkey PRIMARY KEY (id),
    -- Target of caregivers_primary_matches_child_fkey (a foreign key needs a
    -- unique constraint on exactly the referenced columns).
    CONSTRAINT children_id_primary_caregiver_key UNIQUE (id, primary_caregiver_id),
    CONSTRAINT children_primary_caregiver_user_fkey
        FOREIGN KEY (primary_caregiver_id) REFERENCES users (id)
        ON DELETE RESTRICT,
    CONSTRAINT children_name_not_blank CHECK (btrim(name) <> ''),
    -- settings: a JSON object. Keys the schema knows are type-checked when
    -- present; other keys (notification toggles, expiry overrides, ...) are
    -- left to the app so that new settings need no migration.
    CONSTRAINT children_settings_valid CHECK (
        jsonb_typeof(settings) = 'object'
        AND (NOT settings ? 'unit'
             OR settings -> 'unit' IN ('"oz"'::jsonb, '"ml"'::jsonb))
        AND (NOT settings ? 'default_bottle_ml'
             OR jsonb_is_positive_number(settings -> 'default_bottle_ml'))
    )
);

CREATE TABLE caregivers (
    child_id        uuid        NOT NULL,
    user_id         uuid        NOT NULL,
    role            text        NOT NULL DEFAULT 'caregiver',
    joined_at       timestamptz NOT NULL DEFAULT now(),
    primary_user_id uuid        GENERATED ALWAYS AS
                        (CASE WHEN role = 'primary' THEN user_id END) STORED,

    CONSTRAINT caregivers_pkey PRIMARY KEY (child_id, user_id),
    -- Target of children_primary_is_caregiver_fkey. Rows with a NULL
    -- primary_user_id (non-primary caregivers) never collide.
    CONSTRAINT caregivers_child_primary_user_key UNIQUE (child_id, primary_user_id),
    CONSTRAINT caregivers_child_id_fkey
        FOREIGN KEY (child_id) REFERENCES children (id) ON DELETE CASCADE,
    CONSTRAINT caregivers_user_id_fkey
        FOREIGN KEY (user_id) REFERENCES users (id) ON DELETE CASCADE,
    CONSTRAINT caregivers_primary_matches_child_fkey
        FOREIGN KEY (child_id, primary_user_id)
        REFERENCES children (id, primary_caregiver_id)
        DEFERRABLE INITIALLY DEFERRED,
    CONSTRAINT caregivers_role_valid CHECK (role IN ('primary', 'caregiver'))
);

ALTER TABLE children
    ADD CONSTRAINT children_primary_is_caregiver_fkey
        FOREIGN KEY (id, primary_caregiver_id)
        REFERENCES caregivers (child_id, primary_user_id)
        DEFERRABLE INITIALLY DEFERRED;

-- PRD 8 "User's babies lookup", baby_id -> child_id.
CREATE INDEX idx_caregivers_user_child ON caregivers (user_id, child_id);

CREATE UNIQUE INDEX caregivers_one_primary_per_child
    ON caregivers (child_id) WHERE role = 'primary';

CREATE INDEX idx_children_primary_caregiver ON children (primary_caregiver_id);

------------------------------------------------------------------------------
-- Triggers
------------------------------------------------------------------------------

CREATE TRIGGER children_set_updated_at
    BEFORE UPDATE ON children
    FOR EACH ROW EXECUTE FUNCTION set_updated_at();

CREATE FUNCTION children_check_timezone() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.timezone IS NOT DISTINCT FROM OLD.timezone THEN
        RETURN NEW;
    END IF;
    IF NOT is_valid_timezone(NEW.timezone) THEN
        RAISE EXCEPTION 'invalid time zone "%" for children.timezone', NEW.timezone
            USING ERRCODE    = 'check_violation',          -- 23514
                  CONSTRAINT = 'children_timezone_valid',
                  SCHEMA     = TG_TABLE_SCHEMA,
                  TABLE      = TG_TABLE_NAME,
                  COLUMN     = 'timezone',
                  HINT       = 'Use an IANA time zone name listed in pg_timezone_names, e.g. Europe/Paris.';
    END IF;
    RETURN NEW;
END
$$;

COMMENT ON FUNCTION children_check_timezone() IS
'Trigger function for children_check_timezone: refuses a children.timezone that is not an IANA name known to pg_timezone_names, with SQLSTATE 23514 and constraint name children_timezone_valid.';

CREATE TRIGGER children_check_timezone
    BEFORE INSERT OR UPDATE OF timezone ON children
    FOR EACH ROW EXECUTE FUNCTION children_check_timezone();

------------------------------------------------------------------------------
-- Helper: hand the primary role to another caregiver
------------------------------------------------------------------------------

CREATE FUNCTION transfer_primary_caregiver(p_child_id uuid, p_new_primary_id uuid)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_current uuid;
BEGIN
    SELECT c.primary_caregiver_id INTO v_current
      FROM children AS c
     WHERE c.id = p_child_id
       FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'child % does not exist', p_child_id
            USING ERRCODE = 'no_data_found';                -- P0002
    END IF;
    IF v_current = p_new_primary_id THEN
        RETURN;
    END IF;

    PERFORM 1
       FROM caregivers AS cg
      WHERE cg.child_id = p_child_id AND cg.user_id = p_new_primary_id
        FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'user % is not a caregiver of child %', p_new_primary_id, p_child_id
            USING ERRCODE    = 'foreign_key_violation',    -- 23503
                  CONSTRAINT = 'children_primary_is_caregiver_fkey',
                  TABLE      = 'children',
                  HINT       = 'Add the user to caregivers (e.g. by redeeming an invite) first.';
    END IF;

    -- Demote first: caregivers_one_primary_per_child is checked immediately.
    UPDATE caregivers SET role = 'caregiver'
     WHERE child_id = p_child_id AND role = 'primary';
    UPDATE caregivers SET role = 'primary'
     WHERE child_id = p_child_id AND user_id = p_new_primary_id;
    UPDATE children SET primary_caregiver_id = p_new_primary_id
     WHERE id = p_child_id;
END
$$;

COMMENT ON FUNCTION transfer_primary_caregiver(uuid, uuid) IS
'Makes p_new_primary_id (already a caregiver of the child) the primary caregiver: demotes the current primary to role caregiver, promotes the new one and updates children.primary_caregiver_id, in the order the constraints need. SECURITY INVOKER (runs with the caller''s rights). Errors: P0002 unknown child; 23503 children_primary_is_caregiver_fkey when the user is not a caregiver of the child.';

------------------------------------------------------------------------------
-- Comments
------------------------------------------------------------------------------

COMMENT ON TABLE children IS
'Children being tracked (PRD 8 "Baby"). Serves the dashboard/timeline header (name, age from birth_date, timezone, day_start_time, settings) and "children of this user" (joined from caregivers via idx_caregivers_user_child). Deleting a child cascades to caregivers, invites, events and event_history.';
COMMENT ON COLUMN children.id IS 'Primary key.';
COMMENT ON COLUMN children.name IS 'Child''s name; not blank.';
COMMENT ON COLUMN children.birth_date IS 'Birth date; the age drives the wake window defaults (PRD 6).';
COMMENT ON COLUMN children.primary_caregiver_id IS 'The account owner for this child (PRD 7.3): the user whose caregivers row has role primary (children_primary_is_caregiver_fkey / caregivers_primary_matches_child_fkey, checked at COMMIT). Change it with transfer_primary_caregiver().';
COMMENT ON COLUMN children.timezone IS 'IANA time zone name (e.g. Europe/Paris) used to compute the child''s "today"; checked against pg_timezone_names by trigger children_check_timezone (23514, children_timezone_valid).';
COMMENT ON COLUMN children.day_start_time IS 'Local time at which the dashboard''s "today" starts (dashboard spec: "Today" defined by day_start_time), interpreted in children.timezone.';
COMMENT ON COLUMN children.settings IS 'Per-child settings, a JSON object: default bottle size (default_bottle_ml, number > 0), display unit (unit: "oz" | "ml"), bottle expiry overrides, notification toggles. Only unit and default_bottle_ml are type-checked (children_settings_valid); other keys are free-form.';
COMMENT ON COLUMN children.created_at IS 'Row creation time.';
COMMENT ON COLUMN children.updated_at IS 'Last UPDATE of this row, maintained by trigger children_set_updated_at.';

COMMENT ON TABLE caregivers IS
'Which users care for which child, and with which role (PRD 8 "BabyCaregiver"). Serves authorization ("may user U see child C": caregivers_pkey) and "children of this user" (idx_caregivers_user_child). Exactly one primary per child.';
COMMENT ON COLUMN caregivers.child_id IS 'The child.';
COMMENT ON COLUMN caregivers.user_id IS 'The caregiver (a user).';
COMMENT ON COLUMN caregivers.role IS '''primary'' (exactly one per child, = children.primary_caregiver_id) or ''caregiver''.';
COMMENT ON COLUMN caregivers.joined_at IS 'When the user became a caregiver of the child (invite redeemed or child created).';
COMMENT ON COLUMN caregivers.primary_user_id IS 'Generated: user_id when role = ''primary'', else NULL. Exists only so that foreign keys can tie the primary row to children.primary_caregiver_id; never write it.';

COMMENT ON INDEX children_pkey IS 'Primary key: child by id.';
COMMENT ON INDEX children_id_primary_caregiver_key IS 'Unique (id, primary_caregiver_id): target of caregivers_primary_matches_child_fkey. The planner may also use it like children_pkey for WHERE id = $1 (e.g. "children of this user").';
COMMENT ON INDEX idx_children_primary_caregiver IS 'Children whose primary caregiver is a given user: account deletion (delete_user_account) and the RESTRICT check of children_primary_caregiver_user_fkey when a user row is deleted.';
COMMENT ON INDEX caregivers_pkey IS 'Caregivers of a child / is user U a caregiver of child C: WHERE child_id = $1 [AND user_id = $2].';
COMMENT ON INDEX caregivers_child_primary_user_key IS 'Unique (child_id, primary_user_id): target of children_primary_is_caregiver_fkey; not meant for queries.';
COMMENT ON INDEX idx_caregivers_user_child IS 'PRD 8 "User''s babies lookup": children of this user, SELECT c.* FROM caregivers cg JOIN children c ON c.id = cg.child_id WHERE cg.user_id = $1. Also the ON DELETE CASCADE of caregivers_user_id_fkey.';
COMMENT ON INDEX caregivers_one_primary_per_child IS 'Partial unique: refuses a second role = ''primary'' row for a child (23505). Also finds the primary of a child: WHERE child_id = $1 AND role = ''primary''.';

COMMENT ON TRIGGER children_set_updated_at ON children IS 'Sets updated_at = now() on every UPDATE.';
COMMENT ON TRIGGER children_check_timezone ON children IS 'Refuses a timezone unknown to pg_timezone_names (23514, children_timezone_valid).';
