-- 0023_schema_version_for_every_role.sql
--
-- schema_version(): the newest migration applied to this database, readable by
-- every role.
--
-- Why: a service checks at start-up that the database is at the schema version
-- its build was written for (BabyBasicsStore's SchemaVersion.check). It runs as
-- its least-privilege role (a member of babybasics_app), which may not read
-- bbmigrate's history table: the check failed with "permission denied for
-- schema bbmigrate" for exactly the role it is meant for. The reference service
-- (Examples/BabyBasicsService) found it on its first start.
--
-- The function runs with its owner's rights (SECURITY DEFINER, with a fixed
-- search_path so no caller can put objects in its way) and returns one number:
-- nothing else of the history is exposed. NULL when the history table does not
-- exist (the schema was created without bbmigrate, e.g. by psql -f).
--
--     SELECT schema_version();   -- 23

CREATE FUNCTION schema_version() RETURNS integer
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF to_regclass('bbmigrate.schema_migrations') IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN (SELECT max(version) FROM bbmigrate.schema_migrations);
END
$fn$;

COMMENT ON FUNCTION schema_version() IS
'The newest migration version recorded in bbmigrate.schema_migrations (NULL without it), for any role: the start-up check of the app (SchemaVersion.check) runs as babybasics_app, which may not read bbmigrate''s schema.';
