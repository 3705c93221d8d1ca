-- 0015_one_rule_for_invites.sql
--
-- An invite lasts 48 hours unless its creator says otherwise. The app gave
-- 48 hours and this column's default 7 days, so an invite made by hand in
-- psql lasted three and a half times as long as one made in the app. The app
-- now leaves expires_at to this default when no lifetime is asked for.

ALTER TABLE invites ALTER COLUMN expires_at SET DEFAULT now() + interval '48 hours';

COMMENT ON COLUMN invites.expires_at IS 'After this instant the code can no longer be redeemed (default: created + 48 hours, the app''s default too).';
