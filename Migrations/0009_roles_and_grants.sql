-- 0009_roles_and_grants.sql
--
-- Least privilege.
--   babybasics_app       NOLOGIN group role for the API server:
--                        SELECT, INSERT, UPDATE on users, children,
--                        caregivers, invites, events; DELETE only on
--                        children, caregivers, invites; SELECT only on
--                        event_history; no DDL (owns nothing, no CREATE).
--                        Hard deletes of events happen only through
--                        purge_deleted_events() and of users only through
--                        delete_user_account() (SECURITY DEFINER). Deleting
--                        a child cascades to its events / history through
--                        ON DELETE CASCADE, which PostgreSQL runs with the
--                        table owner's rights, so no DELETE on events is
--                        needed for it.
--   babybasics_readonly  NOLOGIN group role for DBAs and analytics: SELECT
--                        on tables and views, except users.password_hash,
--                        users.apple_user_id and invites.code (credentials /
--                        secrets).
-- Log-in roles are created by whoever runs the cluster and made members,
-- e.g.  CREATE ROLE babybasics_api LOGIN PASSWORD '...';
--       GRANT babybasics_app TO babybasics_api;
--
-- Roles are cluster-wide and some managed services refuse CREATE ROLE, so:
--   * a role is created only if missing (idempotent across databases of the
--     same cluster, and across concurrent runs);
--   * insufficient_privilege is caught and reported with a NOTICE: the
--     migration still succeeds;
--   * grants are issued only to roles that exist. Everything lives in
--     setup_roles_and_grants(), called at the end of this file; after an
--     administrator has created the roles (CREATE ROLE babybasics_app
--     NOLOGIN; CREATE ROLE babybasics_readonly NOLOGIN), the schema owner
--     runs  SELECT setup_roles_and_grants();  again. GRANT/REVOKE are
--     idempotent, so calling it any number of times is safe.

CREATE FUNCTION setup_roles_and_grants() RETURNS void
LANGUAGE plpgsql
AS $fn$
DECLARE
    r text;
    s text := current_schema();
BEGIN
    ------------------------------------------------------------------
    -- Roles (cluster-wide): create if missing, degrade to a NOTICE.
    ------------------------------------------------------------------
    FOREACH r IN ARRAY ARRAY['babybasics_app', 'babybasics_readonly'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = r) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r);
                RAISE NOTICE 'created role %', r;
            EXCEPTION
                WHEN insufficient_privilege THEN
                    RAISE NOTICE 'role % was not created (%); an administrator must run "CREATE ROLE % NOLOGIN" and then run SELECT setup_roles_and_grants() as the schema owner', r, SQLERRM, r;
                WHEN duplicate_object OR unique_violation THEN
                    NULL;   -- created concurrently by a migration of another database
            END;
        END IF;
    END LOOP;

    ------------------------------------------------------------------
    -- babybasics_app
    ------------------------------------------------------------------
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'babybasics_app') THEN
        EXECUTE format('GRANT USAGE ON SCHEMA %I TO babybasics_app', s);

        GRANT SELECT, INSERT, UPDATE ON users, children, caregivers, invites, events
            TO babybasics_app;
        GRANT DELETE ON children, caregivers, invites TO babybasics_app;
        GRANT SELECT ON event_history TO babybasics_app;
        GRANT SELECT ON feedings, diapers, sleeps, notes, active_sleeps, events_export
            TO babybasics_app;
        -- nextval() in trigger events_bookkeeping runs as the caller.
        GRANT USAGE ON SEQUENCE events_change_seq TO babybasics_app;
        GRANT EXECUTE ON FUNCTION purge_deleted_events(interval),
                                  delete_user_account(uuid, boolean)
            TO babybasics_app;

        -- Make the contract hold even if someone granted more by hand.
        REVOKE DELETE, TRUNCATE, REFERENCES, TRIGGER ON users, events FROM babybasics_app;
        REVOKE INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON event_history FROM babybasics_app;
        REVOKE TRUNCATE, REFERENCES, TRIGGER ON children, caregivers, invites FROM babybasics_app;
        REVOKE UPDATE ON SEQUENCE events_change_seq FROM babybasics_app;   -- no setval()
    ELSE
        RAISE NOTICE 'role babybasics_app does not exist: its grants were skipped';
    END IF;

    ------------------------------------------------------------------
    -- babybasics_readonly
    ------------------------------------------------------------------
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'babybasics_readonly') THEN
        EXECUTE format('GRANT USAGE ON SCHEMA %I TO babybasics_readonly', s);

        GRANT SELECT ON children, caregivers, events, event_history TO babybasics_readonly;
        GRANT SELECT ON feedings, diapers, sleeps, notes, active_sleeps, events_export
            TO babybasics_readonly;
        -- Column lists: no password hashes, Apple ids or live invite codes.
        REVOKE SELECT ON users, invites FROM babybasics_readonly;
        GRANT SELECT (id, email, display_name, created_at, updated_at)
            ON users TO babybasics_readonly;
        GRANT SELECT (child_id, created_by, created_at, expires_at, redeemed_by, redeemed_at)
            ON invites TO babybasics_readonly;

        REVOKE INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER
            ON users, children, caregivers, invites, events, event_history
            FROM babybasics_readonly;
    ELSE
        RAISE NOTICE 'role babybasics_readonly does not exist: its grants were skipped';
    END IF;

    ------------------------------------------------------------------
    -- No DDL for anyone but the owner. PostgreSQL 15 no longer grants
    -- CREATE on schema public to PUBLIC, but a cluster upgraded from an
    -- older version keeps that grant.
    ------------------------------------------------------------------
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

REVOKE ALL ON FUNCTION setup_roles_and_grants() FROM PUBLIC;

COMMENT ON FUNCTION setup_roles_and_grants() IS
'Creates babybasics_app and babybasics_readonly (NOLOGIN) if missing and allowed (NOTICE otherwise), then grants the least-privilege set to the roles that exist. Idempotent; run it as the schema owner again after an administrator created the roles by hand (managed databases without CREATEROLE).';

DO $$ BEGIN PERFORM setup_roles_and_grants(); END $$;
