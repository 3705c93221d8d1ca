-- 0004_invites.sql
--
-- Invite codes (PRD 7.3): the primary caregiver creates a code, another
-- user redeems it once and becomes a caregiver of the child.
--
-- Redeeming atomically (two users racing for one code: exactly one gets a
-- row back; the other's UPDATE re-checks the WHERE clause after waiting for
-- the row lock and matches nothing):
--   UPDATE invites SET redeemed_by = $user, redeemed_at = now()
--    WHERE code = $code AND redeemed_at IS NULL AND expires_at > now()
--   RETURNING child_id;
--   INSERT INTO caregivers (child_id, user_id) VALUES ($child, $user)
--   ON CONFLICT (child_id, user_id) DO NOTHING;
-- Codes are compared exactly; the app should normalise them (e.g. upper
-- case) before INSERT and lookup.

CREATE TABLE invites (
    code        text        NOT NULL,
    child_id    uuid        NOT NULL,
    created_by  uuid        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL DEFAULT now() + interval '7 days',
    redeemed_by uuid        NULL,
    redeemed_at timestamptz NULL,

    CONSTRAINT invites_pkey PRIMARY KEY (code),
    CONSTRAINT invites_child_id_fkey
        FOREIGN KEY (child_id) REFERENCES children (id) ON DELETE CASCADE,
    -- An invite dies with the account that created it.
    CONSTRAINT invites_created_by_fkey
        FOREIGN KEY (created_by) REFERENCES users (id) ON DELETE CASCADE,
    -- A used code stays used when the redeeming account is deleted.
    CONSTRAINT invites_redeemed_by_fkey
        FOREIGN KEY (redeemed_by) REFERENCES users (id) ON DELETE SET NULL,
    CONSTRAINT invites_code_format
        CHECK (code ~ '^[A-Za-z0-9_-]{4,64}$'),
    CONSTRAINT invites_expires_after_created
        CHECK (expires_at > created_at),
    -- redeemed_at is the "used" flag; redeemed_by may only be set with it
    -- (it becomes NULL again if the redeeming account is deleted).
    CONSTRAINT invites_redeemed_by_requires_redeemed_at
        CHECK (redeemed_by IS NULL OR redeemed_at IS NOT NULL),
    CONSTRAINT invites_redeemed_before_expiry
        CHECK (redeemed_at IS NULL OR redeemed_at <= expires_at)
);

CREATE INDEX idx_invites_child ON invites (child_id, created_at DESC);
CREATE INDEX idx_invites_created_by ON invites (created_by);
CREATE INDEX idx_invites_redeemed_by ON invites (redeemed_by)
    WHERE redeemed_by IS NOT NULL;

CREATE FUNCTION invites_single_use() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.redeemed_at IS NOT NULL THEN
        -- Once used, the redemption is frozen. The only change allowed is
        -- redeemed_by -> NULL (ON DELETE SET NULL of invites_redeemed_by_fkey).
        IF NEW.redeemed_at IS DISTINCT FROM OLD.redeemed_at
           OR (NEW.redeemed_by IS DISTINCT FROM OLD.redeemed_by
               AND NEW.redeemed_by IS NOT NULL) THEN
            RAISE EXCEPTION 'invite % has already been redeemed', OLD.code
                USING ERRCODE    = 'check_violation',       -- 23514
                      CONSTRAINT = 'invites_single_use',
                      SCHEMA     = TG_TABLE_SCHEMA,
                      TABLE      = TG_TABLE_NAME;
        END IF;
    ELSIF NEW.redeemed_at IS NOT NULL AND NEW.redeemed_by IS NULL THEN
        -- Being redeemed now (INSERT or first UPDATE): the redeemer is required.
        RAISE EXCEPTION 'redeeming invite % requires redeemed_by', NEW.code
            USING ERRCODE    = 'not_null_violation',        -- 23502
                  CONSTRAINT = 'invites_redeemed_by_required',
                  SCHEMA     = TG_TABLE_SCHEMA,
                  TABLE      = TG_TABLE_NAME,
                  COLUMN     = 'redeemed_by';
    END IF;
    RETURN NEW;
END
$$;

COMMENT ON FUNCTION invites_single_use() IS
'Trigger function for invites_single_use: a redeemed invite cannot be redeemed again or have its redemption changed (23514, invites_single_use); redeeming requires redeemed_by (23502, invites_redeemed_by_required).';

CREATE TRIGGER invites_single_use
    BEFORE INSERT OR UPDATE ON invites
    FOR EACH ROW EXECUTE FUNCTION invites_single_use();

COMMENT ON TABLE invites IS
'Invite codes created by a child''s primary caregiver and redeemed once by another user (PRD 7.3). Serves redemption (by code: invites_pkey) and the "pending invites of this child" list (idx_invites_child).';
COMMENT ON COLUMN invites.code IS 'The code the invitee types or opens as a link: 4-64 characters of [A-Za-z0-9_-], unique (invites_pkey), compared exactly.';
COMMENT ON COLUMN invites.child_id IS 'Child the invitee will be added to as a caregiver.';
COMMENT ON COLUMN invites.created_by IS 'User who created the invite (normally the primary caregiver). The invite is deleted with that account.';
COMMENT ON COLUMN invites.created_at IS 'Creation time.';
COMMENT ON COLUMN invites.expires_at IS 'After this instant the code can no longer be redeemed (default: created + 7 days).';
COMMENT ON COLUMN invites.redeemed_by IS 'User who redeemed the code; NULL if not redeemed, or if that account was deleted since.';
COMMENT ON COLUMN invites.redeemed_at IS 'When the code was redeemed; NOT NULL means used (single use: trigger invites_single_use).';

COMMENT ON INDEX invites_pkey IS 'Redeem / look up an invite by code: WHERE code = $1. Refuses duplicate codes (23505).';
COMMENT ON INDEX idx_invites_child IS 'Invites of a child, newest first (settings screen, pending ones filtered by redeemed_at IS NULL AND expires_at > now()); also the ON DELETE CASCADE from children.';
COMMENT ON INDEX idx_invites_created_by IS 'Invites created by a user: ON DELETE CASCADE of invites_created_by_fkey during account deletion.';
COMMENT ON INDEX idx_invites_redeemed_by IS 'Invites redeemed by a user: ON DELETE SET NULL of invites_redeemed_by_fkey during account deletion.';

COMMENT ON TRIGGER invites_single_use ON invites IS 'Codes are used once: refuses changing a redemption (23514, invites_single_use) and a redemption without redeemer (23502, invites_redeemed_by_required).';
