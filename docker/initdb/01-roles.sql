-- docker/initdb/01-roles.sql: run once by the postgres image (as its superuser, in the database
-- POSTGRES_DB) when the db service creates its cluster. Passwords are for local development only.
--
-- The schema owner that runs the migrations is not a superuser (the SECURITY DEFINER functions
-- of the schema run with its rights); it may create databases so that `bbmigrate verify` can
-- build its scratch copy. The three group roles exist before the migrations run, so that
-- setup_roles_and_grants() only grants (the owner cannot create roles). The application logs in
-- as babybasics_api, a member of babybasics_app. Idempotent: safe to run again.

DO $$
DECLARE
    role_sql text;
BEGIN
    FOREACH role_sql IN ARRAY ARRAY[
        'CREATE ROLE babybasics_owner LOGIN NOSUPERUSER NOCREATEROLE CREATEDB PASSWORD ''babybasics-owner-dev-only''',
        'CREATE ROLE babybasics_app NOLOGIN',
        'CREATE ROLE babybasics_readonly NOLOGIN',
        'CREATE ROLE babybasics_analytics NOLOGIN',
        'CREATE ROLE babybasics_api LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD ''babybasics-api-dev-only''']
    LOOP
        BEGIN
            EXECUTE role_sql;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL; -- exists already (roles belong to the whole cluster)
        END;
    END LOOP;
    EXECUTE format('ALTER DATABASE %I OWNER TO babybasics_owner', current_database());
END
$$;

GRANT babybasics_app TO babybasics_api;

-- The application's bounds, on its login role where a DBA sees them (\drds): no request of the
-- app needs more than a few seconds, a lock wait should fail fast rather than queue, and a
-- session left in a transaction must not hold locks or hold back vacuum. The store sends the
-- same values in its startup packet (Store.serverSettings); these also bound anything else that
-- logs in as the app, and are what counts behind a transaction pooler.
ALTER ROLE babybasics_api SET statement_timeout = '10s';
ALTER ROLE babybasics_api SET lock_timeout = '3s';
ALTER ROLE babybasics_api SET idle_in_transaction_session_timeout = '30s';
