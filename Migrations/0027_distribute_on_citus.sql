-- 0027_distribute_on_citus.sql
--
-- On a plain PostgreSQL server this file does nothing: it changes something
-- only in a database where the citus extension is installed (a Citus
-- coordinator). There it makes the tables what docs/scale-out.md and 0022
-- describe:
--   reference tables (a full copy on every node):
--     users, sync_state, time_zone_names
--   split by child, all colocated (a child's rows of every table on one node):
--     children (id), caregivers, events, event_history, invites,
--     sync_counters, sync_tombstones (child_id)
-- Tests/SchemaTests/DistributionRulesTests.swift derives both lists from the
-- catalog and checks them against this file.
--
-- The order is the one that works on Citus 13, found on a real coordinator
-- with two workers (make citus-check):
--   1. The foreign keys of the child-scoped tables are set aside. With them
--      in place, making users a reference table first turns every table that
--      references it into a Citus "local" table, and then none of them can be
--      distributed or colocated.
--   2. The three reference tables, then the seven child-scoped tables, each
--      colocated with children.
--   3. The same foreign keys are added back, exactly as they were (both
--      DEFERRABLE keys included). Keys between child-scoped tables go
--      distribution column to distribution column, so each check stays on
--      one node; keys to users are checked against the node's own copy.
--   4. One column grant Citus needs (below).
--   5. sync_next_seq without its NOTIFY (below).
--   6. Every function of the schema created on every node.
--
-- Settings for this transaction only:
--   citus.enable_ddl_propagation = on: the schema may have been built with
--     it off (a cluster whose workers were added before bbmigrate up; see
--     docs/scale-out.md); distributing must create the tables, and the
--     functions and types they use, on the workers.
--   citus.enable_unsafe_triggers = on: the tables keep their triggers (history,
--     sync stamps, updated_at); each runs on the shard that holds the row, and
--     every one of them touches only rows of the same child.
--   citus.multi_shard_modify_mode = sequential: keys to a reference table
--     need one connection per node in the transaction that adds them.
--
-- Lock: ACCESS EXCLUSIVE on every table while their rows are copied to the
-- shards: run it before the app takes traffic, or in a maintenance window
-- (bbmigrate plan says how long it holds them).

DO $distribute$
DECLARE
    child_scoped constant text[] := ARRAY['children', 'caregivers', 'events', 'event_history', 'invites', 'sync_counters', 'sync_tombstones'];
    key record;
    kept_keys jsonb := '[]';
    definition text;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus') THEN
        RETURN; -- a plain PostgreSQL server: nothing to distribute
    END IF;
    SET LOCAL citus.enable_ddl_propagation = on;
    SET LOCAL citus.enable_unsafe_triggers = on;
    SET LOCAL citus.multi_shard_modify_mode = sequential;

    -- 1. Set the child-scoped tables' foreign keys aside.
    FOR key IN
        SELECT conrelid::regclass AS table_name, conname, pg_get_constraintdef(oid) AS definition
        FROM pg_constraint
        WHERE contype = 'f' AND conrelid::regclass::text = ANY (child_scoped)
        ORDER BY conrelid::regclass::text, conname
    LOOP
        kept_keys := kept_keys || jsonb_build_object('table', key.table_name::text, 'name', key.conname, 'definition', key.definition);
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', key.table_name, key.conname);
    END LOOP;

    -- 2. Reference tables, then the child-scoped tables, colocated with children.
    PERFORM create_reference_table('users');
    PERFORM create_reference_table('sync_state');
    PERFORM create_reference_table('time_zone_names');
    PERFORM create_distributed_table('children', 'id');
    PERFORM create_distributed_table('caregivers', 'child_id', colocate_with => 'children');
    PERFORM create_distributed_table('events', 'child_id', colocate_with => 'children');
    PERFORM create_distributed_table('event_history', 'child_id', colocate_with => 'children');
    PERFORM create_distributed_table('invites', 'child_id', colocate_with => 'children');
    PERFORM create_distributed_table('sync_counters', 'child_id', colocate_with => 'children');
    PERFORM create_distributed_table('sync_tombstones', 'child_id', colocate_with => 'children');

    -- 3. The same keys back.
    FOR key IN SELECT * FROM jsonb_to_recordset(kept_keys) AS k("table" text, name text, definition text) LOOP
        EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I %s', key."table", key.name, key.definition);
    END LOOP;

    -- 4. Citus fills in column defaults on the coordinator and sends every column
    --    to the shard, so an INSERT by the app names children.record_seq and
    --    sync_floor, which it may not write. The children_sync_record trigger
    --    sets both on INSERT whatever is sent (1 and 0), so this grant lets the
    --    app change nothing it could not before.
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'babybasics_app') THEN
        GRANT INSERT (record_seq, sync_floor) ON children TO babybasics_app;
    END IF;

    -- 5. No NOTIFY on the workers. sync_next_seq sends pg_notify('child_changed')
    --    with each stamp, and on Citus it runs on the worker that holds the
    --    row: a worker's NOTIFY never reaches a listener on the coordinator,
    --    and a transaction that wrote on two nodes ends in PREPARE, which
    --    PostgreSQL refuses after a NOTIFY ("cannot PREPARE a transaction that
    --    has executed LISTEN, UNLISTEN, or NOTIFY"). On Citus the function is
    --    0022's without that one line; the store announces a child's change
    --    from the coordinator once the write has committed (SyncFeed.swift).
    definition := pg_get_functiondef('sync_next_seq(uuid)'::regprocedure);
    EXECUTE replace(definition, 'PERFORM pg_notify(''child_changed'', p_child_id::text);',
                    'NULL; -- announced from the coordinator (0027)');
    IF pg_get_functiondef('sync_next_seq(uuid)'::regprocedure) = definition THEN
        RAISE EXCEPTION 'sync_next_seq has no pg_notify line to take out: update 0027 for its current definition';
    END IF;

    -- 6. Every function of the schema on every node. Distributing a table
    --    creates what the table itself names (its trigger functions, the
    --    functions of its CHECKs) on the workers, but not what those call in
    --    turn (is_valid_timezone, sync_next_seq, ...), and the triggers run on
    --    the workers.
    PERFORM create_distributed_function(p.oid::regprocedure)
    FROM pg_proc AS p
    WHERE p.pronamespace = 'public'::regnamespace AND p.prokind = 'f'
      AND NOT EXISTS (SELECT FROM pg_depend AS d WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')
    ORDER BY p.oid;
END
$distribute$;
