-- 0019_analytics_role.sql
--
-- PRD 11: analytics never sees names. babybasics_readonly is the DBA's role:
-- it reads everything but secrets (password hashes, Apple subjects, invite
-- codes), names and notes included. Analytics gets a role of its own,
-- babybasics_analytics, that reads only the analytics_* views:
-- pseudonymous ids (UUIDs), event types, times and amounts. No name, email,
-- note, note category (free text), time zone or exact birth date; no table.
-- (Views in schema public, not a schema of their own: on a managed server the
-- schema owner may not create schemas.)
--
-- The views run with their owner's rights (not security_invoker), so the
-- role needs no right on the tables behind them.

CREATE VIEW analytics_events AS
SELECT e.id                                     AS event_id,
       e.child_id,
       e.logged_by                              AS logged_by_user_id,
       e.event_type,
       e.start_time,
       e.end_time,
       round(extract(epoch FROM e.end_time - e.start_time) / 60)::integer AS duration_minutes,
       e.data ->> 'kind'                        AS feeding_kind,
       e.data ->> 'started_side'                AS breast_started_side,
       (e.data ->> 'both_sides')::boolean       AS breast_both_sides,
       coalesce((e.data ->> 'amount_ml')::numeric, (e.data ->> 'amount_prepared_ml')::numeric) AS bottle_prepared_ml,
       coalesce((e.data ->> 'amount_ml')::numeric,
                greatest(0, (e.data ->> 'amount_prepared_ml')::numeric - (e.data ->> 'amount_remaining_ml')::numeric)) AS bottle_consumed_ml,
       (e.data ->> 'feeding_started_at')::timestamptz AS bottle_first_sip_at,
       e.data ->> 'contents'                    AS diaper_contents
  FROM events AS e
 WHERE e.deleted_at IS NULL;

CREATE VIEW analytics_children AS
SELECT c.id                                     AS child_id,
       date_trunc('month', c.birth_date)::date  AS birth_month,
       c.created_at
  FROM children AS c;

CREATE VIEW analytics_caregivers AS
SELECT cg.child_id, cg.user_id, cg.role, cg.joined_at
  FROM caregivers AS cg;

COMMENT ON VIEW analytics_events IS 'Non-deleted events without notes, names or zones: ids, type, instants, duration, feeding kind and side, bottle amounts in mL (consumed = amount_ml, or prepared - remaining), first sip, diaper contents.';
COMMENT ON COLUMN analytics_events.event_id IS 'events.id.';
COMMENT ON COLUMN analytics_events.child_id IS 'events.child_id (pseudonymous).';
COMMENT ON COLUMN analytics_events.logged_by_user_id IS 'events.logged_by (pseudonymous; NULL after account deletion).';
COMMENT ON COLUMN analytics_events.event_type IS 'feeding, diaper, sleep or note.';
COMMENT ON COLUMN analytics_events.start_time IS 'Start instant (UTC).';
COMMENT ON COLUMN analytics_events.end_time IS 'End instant (UTC); NULL while running and for instants.';
COMMENT ON COLUMN analytics_events.duration_minutes IS 'end_time - start_time in whole minutes; NULL without an end.';
COMMENT ON COLUMN analytics_events.feeding_kind IS 'Feedings: breast or bottle.';
COMMENT ON COLUMN analytics_events.breast_started_side IS 'Breast feedings: left or right.';
COMMENT ON COLUMN analytics_events.breast_both_sides IS 'Breast feedings: both sides used.';
COMMENT ON COLUMN analytics_events.bottle_prepared_ml IS 'Bottles: amount prepared (amount_ml for the simple form), mL.';
COMMENT ON COLUMN analytics_events.bottle_consumed_ml IS 'Bottles: amount drunk, mL; NULL until known.';
COMMENT ON COLUMN analytics_events.bottle_first_sip_at IS 'Prepared bottles: the first sip (feeding_started_at).';
COMMENT ON COLUMN analytics_events.diaper_contents IS 'Diapers: wet, dirty or both.';
COMMENT ON VIEW analytics_children IS 'Children without names: id, birth month (not the date), creation time.';
COMMENT ON COLUMN analytics_children.child_id IS 'children.id (pseudonymous).';
COMMENT ON COLUMN analytics_children.birth_month IS 'First day of the birth month.';
COMMENT ON COLUMN analytics_children.created_at IS 'When the child was added.';
COMMENT ON VIEW analytics_caregivers IS 'Who cares for which child, by pseudonymous ids and role.';
COMMENT ON COLUMN analytics_caregivers.child_id IS 'caregivers.child_id.';
COMMENT ON COLUMN analytics_caregivers.user_id IS 'caregivers.user_id.';
COMMENT ON COLUMN analytics_caregivers.role IS 'primary or caregiver.';
COMMENT ON COLUMN analytics_caregivers.joined_at IS 'When they joined.';

-- setup_roles_and_grants() keeps its name and its idempotent, refusal-tolerant
-- way; the roles of 0009/0011 are set up by the function it wraps.
ALTER FUNCTION setup_roles_and_grants() RENAME TO setup_base_roles_and_grants;
COMMENT ON FUNCTION setup_base_roles_and_grants() IS
'The babybasics_app and babybasics_readonly part of setup_roles_and_grants() (0011); call setup_roles_and_grants(), which runs it.';

CREATE FUNCTION setup_roles_and_grants() RETURNS void
LANGUAGE plpgsql
AS $fn$
BEGIN
    PERFORM setup_base_roles_and_grants();
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'babybasics_analytics') THEN
        BEGIN
            CREATE ROLE babybasics_analytics NOLOGIN;
            RAISE NOTICE 'created role babybasics_analytics';
        EXCEPTION
            WHEN insufficient_privilege THEN
                RAISE NOTICE 'role babybasics_analytics was not created (%); an administrator must run "CREATE ROLE babybasics_analytics NOLOGIN" and then run SELECT setup_roles_and_grants() as the schema owner', SQLERRM;
            WHEN duplicate_object OR unique_violation THEN
                NULL;
        END;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'babybasics_analytics') THEN
        GRANT SELECT ON analytics_events, analytics_children, analytics_caregivers TO babybasics_analytics;
    ELSE
        RAISE NOTICE 'role babybasics_analytics does not exist: its grants were skipped';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'babybasics_readonly') THEN
        GRANT SELECT ON analytics_events, analytics_children, analytics_caregivers TO babybasics_readonly;
    END IF;
END
$fn$;

COMMENT ON FUNCTION setup_roles_and_grants() IS
'Creates babybasics_app, babybasics_readonly (DBAs: everything but secrets) and babybasics_analytics (the analytics views only) as NOLOGIN roles if missing and allowed (NOTICE otherwise), then grants each its least-privilege set. Idempotent; run it as the schema owner again after an administrator created the roles by hand (managed databases without CREATEROLE).';

DO $$ BEGIN PERFORM setup_roles_and_grants(); END $$;
