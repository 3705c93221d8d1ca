-- 0002_users.sql
--
-- Accounts. One row per person who signs in (email + password, or Sign in
-- with Apple). Hard-deleted only through delete_user_account() (0007); the
-- application role has no DELETE privilege on this table.

CREATE TABLE users (
    id            uuid        NOT NULL DEFAULT gen_random_uuid(),
    email         text        NOT NULL,
    display_name  text        NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    password_hash text        NULL,
    apple_user_id text        NULL,

    CONSTRAINT users_pkey PRIMARY KEY (id),
    CONSTRAINT users_apple_user_id_key UNIQUE (apple_user_id),
    CONSTRAINT users_email_valid
        CHECK (email ~ '^[^@[:space:]]+@[^@[:space:]]+$'),
    CONSTRAINT users_display_name_not_blank
        CHECK (btrim(display_name) <> '')
);

-- Unique ignoring case: "Anna@X.com" and "anna@x.com" are the same account.
CREATE UNIQUE INDEX users_email_lower_key ON users (lower(email));

CREATE TRIGGER users_set_updated_at
    BEFORE UPDATE ON users
    FOR EACH ROW EXECUTE FUNCTION set_updated_at();

COMMENT ON TABLE users IS
'Accounts (PRD 8 "User"). Serves sign-in (by lower(email) or apple_user_id) and caregiver attribution (events.logged_by / updated_by / deleted_by). Deleted only through delete_user_account().';
COMMENT ON COLUMN users.id IS 'Primary key, gen_random_uuid() by default.';
COMMENT ON COLUMN users.email IS 'Login email, as typed. Unique ignoring case (users_email_lower_key); look it up with lower(email) = lower($1).';
COMMENT ON COLUMN users.display_name IS 'Name shown to the other caregivers of a child; not blank.';
COMMENT ON COLUMN users.created_at IS 'Account creation time.';
COMMENT ON COLUMN users.updated_at IS 'Last UPDATE of this row, maintained by trigger users_set_updated_at.';
COMMENT ON COLUMN users.password_hash IS 'Password hash for email sign-in (algorithm chosen by the app, e.g. bcrypt/argon2 encoded string); NULL for Sign in with Apple only accounts. Not readable by babybasics_readonly.';
COMMENT ON COLUMN users.apple_user_id IS 'Sign in with Apple stable user identifier ("sub"); unique; NULL when not linked. Not readable by babybasics_readonly.';

COMMENT ON INDEX users_pkey IS 'Primary key: user by id (session lookup, FK targets).';
COMMENT ON INDEX users_apple_user_id_key IS 'Sign in with Apple: SELECT ... FROM users WHERE apple_user_id = $1; refuses a second account for the same Apple id.';
COMMENT ON INDEX users_email_lower_key IS 'Email sign-in: SELECT ... FROM users WHERE lower(email) = lower($1); refuses two accounts whose emails differ only by case.';

COMMENT ON TRIGGER users_set_updated_at ON users IS 'Sets updated_at = now() on every UPDATE.';
