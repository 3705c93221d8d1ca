import Foundation
public import Postgres

/// The shape of a database's schema, read from `pg_catalog`.
///
/// Covered: schemas, extensions (and their versions), tables (kind, persistence, owner,
/// options, replica identity, row-level security, partition key and bounds, inheritance),
/// columns (type, nullability, default, identity, generated, collation, position, statistics
/// target, storage), constraints,
/// indexes (definition, validity), views and materialized views, functions, procedures and
/// aggregates, triggers and event triggers, rules, policies, types (enum, domain, composite,
/// range), sequences (every option and the column that owns them), extended statistics,
/// publications, collations, comments on all of these, owners, grants (an owner's own
/// privileges too, where they are not the default) and default privileges.
///
/// Left out: the system schemas, `bbmigrate`'s own schema, every session's temporary schema,
/// objects that belong to an extension (`CREATE EXTENSION` made them), and the schemas and
/// extensions the caller asks to ignore. Owners and default-privilege roles equal to the
/// migration user (the owner of the `bbmigrate` schema, or the current user) are written as
/// `(migration user)`, so a scratch database built by another user compares equal.
///
/// ```swift
/// let live = try await SchemaSnapshot.capture(liveConnection)
/// let expected = try await SchemaSnapshot.capture(scratchConnection)
/// for difference in expected.differences(from: live) { print(difference) }
/// ```
public struct SchemaSnapshot: Sendable, Equatable {
    /// One object: its kind ("index"), its name ("idx_events_child_time on events"), the
    /// attributes that define it ("definition", "type", "default", …), and the object it
    /// belongs to, if any (a column's or an index's table).
    ///
    /// ```swift
    /// let indexes = snapshot.objects.values.filter { $0.kind == "index" }
    /// ```
    public struct Object: Sendable, Equatable {
        public var kind: String
        public var name: String
        public var attributes: [String: String]
        public var parent: String?

        /// "kind name", the key in `objects`.
        public var key: String { "\(kind) \(name)" }
    }

    /// What to leave out besides system schemas, temp schemas and extension members.
    ///
    /// ```swift
    /// let ignore = SchemaSnapshot.Ignore(schemas: ["audit"], extensions: ["pg_stat_statements"])
    /// ```
    public struct Ignore: Sendable, Equatable {
        public var schemas: [String]
        public var extensions: [String]
        public init(schemas: [String] = [], extensions: [String] = []) {
            self.schemas = schemas
            self.extensions = extensions
        }
    }

    /// Objects keyed by "kind name".
    public var objects: [String: Object]
    /// Roles that exist on the server (grants are compared only for roles on both sides).
    public var roles: Set<String>

    /// Written for an owner or role that is the migration user.
    public static let migrationUser = "(migration user)"
    /// The grantee of an object's owner's own privileges (listed only where they are not the
    /// default).
    public static let owner = "(owner)"

    /// Reads the snapshot.
    public static func capture(_ connection: PostgresConnection, ignoring ignore: Ignore = Ignore()) async throws -> SchemaSnapshot {
        let schemas = ignore.schemas
        // Types, views and defaults print schema-qualified unless their schema is on the search
        // path: with only pg_catalog on it, both sides print the same whatever their settings.
        let searchPath = try await connection.fetchValue(String.self, "SELECT current_setting('search_path')") ?? ""
        try await connection.execute("SELECT set_config('search_path', 'pg_catalog', false)")
        defer { Task { _ = try? await connection.execute("SELECT set_config('search_path', \(searchPath), false)") } }
        // Every query returns (kind, name, parent, attribute, value).
        var objects: [String: Object] = [:]
        for query in queries(ignoredSchemas: schemas, ignoredExtensions: ignore.extensions) {
            for row in try await connection.query(query) {
                let (kind, name, parent, attribute, value) = try row.decode((String, String, String?, String, String?).self)
                objects["\(kind) \(name)", default: Object(kind: kind, name: name, attributes: [:], parent: parent)].attributes[attribute] = value ?? ""
            }
        }
        let migrationUser = try await connection.fetchValue(String.self, """
            SELECT coalesce((SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = 'bbmigrate'), current_user::text)
            """) ?? ""
        for key in objects.keys where objects[key]?.attributes["owner"] == migrationUser {
            objects[key]?.attributes["owner"] = Self.migrationUser
        }
        var roles = Set(try await connection.query("SELECT rolname FROM pg_roles").decodeColumn(String.self)).union(["PUBLIC"])
        roles.insert(Self.migrationUser)
        roles.insert(Self.owner)
        return SchemaSnapshot(objects: objects, roles: roles)
    }

    // MARK: Queries

    // Names drop the "public." prefix. Each query filters out system and temp schemas, ignored
    // schemas, and extension members.
    static func queries(ignoredSchemas: [String], ignoredExtensions: [String]) -> [SQL] {
        let schema: SQL = """
            (n.nspname NOT IN ('pg_catalog', 'information_schema', 'bbmigrate', 'pg_toast')
             AND n.nspname NOT LIKE 'pg\\_temp\\_%' AND n.nspname NOT LIKE 'pg\\_toast\\_temp\\_%'
             AND NOT (n.nspname = ANY (\(ignoredSchemas))))
            """
        let qualified: SQL = "CASE WHEN n.nspname = 'public' THEN '' ELSE quote_ident(n.nspname) || '.' END"
        // Not made by CREATE EXTENSION: `catalog` is the object's catalog, `oid` its oid.
        func own(_ catalog: SQL, _ oid: SQL) -> SQL {
            "NOT EXISTS (SELECT FROM pg_depend e WHERE e.classid = \(catalog)::regclass AND e.objid = \(oid) AND e.deptype = 'e')"
        }
        let ownClass = own("'pg_class'", "c.oid")
        return [
            """
            SELECT 'schema', quote_ident(n.nspname), NULL::text, attribute, value
            FROM pg_namespace n
            CROSS JOIN LATERAL (VALUES ('owner', pg_get_userbyid(n.nspowner)::text),
                                       ('comment', obj_description(n.oid, 'pg_namespace'))) v(attribute, value)
            WHERE \(schema) AND n.nspname <> 'public' AND n.nspname NOT LIKE 'pg\\_%' AND \(own("'pg_namespace'", "n.oid"))
            UNION ALL
            SELECT 'schema', 'public', NULL, 'comment', obj_description(n.oid, 'pg_namespace')
            FROM pg_namespace n WHERE n.nspname = 'public' AND \(schema)
            """,
            """
            SELECT 'extension', quote_ident(x.extname), NULL, attribute, value
            FROM pg_extension x JOIN pg_namespace n ON n.oid = x.extnamespace
            CROSS JOIN LATERAL (VALUES ('schema', n.nspname::text), ('version', x.extversion)) v(attribute, value)
            WHERE x.extname <> 'plpgsql' AND NOT (x.extname = ANY (\(ignoredExtensions)))
            """,
            """
            SELECT 'table', \(qualified) || quote_ident(c.relname), NULL, attribute, value
            FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            CROSS JOIN LATERAL (VALUES
              ('kind', CASE c.relkind WHEN 'p' THEN 'partitioned table' WHEN 'f' THEN 'foreign table' ELSE 'table' END),
              ('persistence', CASE c.relpersistence WHEN 'u' THEN 'unlogged' ELSE 'permanent' END),
              ('owner', pg_get_userbyid(c.relowner)::text),
              ('comment', obj_description(c.oid, 'pg_class')),
              ('options', array_to_string(c.reloptions, ', ')),
              ('replica identity', CASE c.relreplident WHEN 'd' THEN 'default' WHEN 'n' THEN 'nothing' WHEN 'f' THEN 'full'
                                   ELSE 'using index ' || coalesce((SELECT quote_ident(i.relname) FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
                                                                   WHERE x.indrelid = c.oid AND x.indisreplident), '?') END),
              ('row security', CASE WHEN c.relforcerowsecurity THEN 'forced' WHEN c.relrowsecurity THEN 'enabled' ELSE 'off' END),
              ('partition key', CASE WHEN c.relkind = 'p' THEN pg_get_partkeydef(c.oid) END),
              ('partition of', CASE WHEN c.relispartition THEN
                 (SELECT pn.nspname || '.' || p.relname FROM pg_inherits h JOIN pg_class p ON p.oid = h.inhparent
                  JOIN pg_namespace pn ON pn.oid = p.relnamespace WHERE h.inhrelid = c.oid) || ' ' || pg_get_expr(c.relpartbound, c.oid) END),
              ('inherits', CASE WHEN NOT c.relispartition THEN
                 (SELECT string_agg(pn.nspname || '.' || p.relname, ', ' ORDER BY h.inhseqno) FROM pg_inherits h
                  JOIN pg_class p ON p.oid = h.inhparent JOIN pg_namespace pn ON pn.oid = p.relnamespace WHERE h.inhrelid = c.oid) END)
            ) v(attribute, value)
            WHERE c.relkind IN ('r', 'p', 'f') AND \(schema) AND \(ownClass)
            """,
            """
            SELECT 'column', tbl || '.' || quote_ident(a.attname), tbl, attribute, value FROM (
              SELECT \(qualified) || quote_ident(c.relname) AS tbl, a.attname,
                     format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull::text AS notnull,
                     coalesce(pg_get_expr(d.adbin, d.adrelid), '') AS dflt, a.attidentity::text AS ident, a.attgenerated::text AS gen,
                     coalesce(col.collname, '') AS coll, col_description(c.oid, a.attnum) AS comment,
                     (row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum))::text AS position,
                     -- -1 (up to 16) or NULL (17 on) is the default target
                     coalesce(nullif(a.attstattarget, -1)::text, '') AS stats,
                     CASE WHEN a.attstorage = (SELECT t.typstorage FROM pg_type t WHERE t.oid = a.atttypid) THEN ''
                          ELSE CASE a.attstorage WHEN 'p' THEN 'plain' WHEN 'e' THEN 'external' WHEN 'm' THEN 'main' ELSE 'extended' END END AS storage
              FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
              LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
              LEFT JOIN pg_collation col ON col.oid = a.attcollation AND a.attcollation <> (SELECT t.typcollation FROM pg_type t WHERE t.oid = a.atttypid)
              WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f') AND a.attnum > 0 AND NOT a.attisdropped AND \(schema) AND \(ownClass)) a
            CROSS JOIN LATERAL (VALUES ('type', a.type), ('not null', a.notnull), ('default', a.dflt), ('identity', a.ident),
                                       ('generated', a.gen), ('collation', a.coll), ('comment', a.comment), ('position', a.position),
                                       ('statistics target', a.stats), ('storage', a.storage)) v(attribute, value)
            """,
            """
            SELECT 'constraint', quote_ident(con.conname) || ' on ' || \(qualified) || quote_ident(c.relname), \(qualified) || quote_ident(c.relname), attribute, value
            FROM pg_constraint con JOIN pg_class c ON c.oid = con.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
            CROSS JOIN LATERAL (VALUES
              ('definition', pg_get_constraintdef(con.oid, true)),
              ('comment', obj_description(con.oid, 'pg_constraint'))) v(attribute, value)
            WHERE \(schema) AND \(ownClass)
              AND con.contype <> 'n' -- PostgreSQL 18 names NOT NULL constraints; columns' "not null" covers them
            """,
            """
            SELECT 'index', quote_ident(i.relname) || ' on ' || \(qualified) || quote_ident(c.relname), \(qualified) || quote_ident(c.relname), attribute, value
            FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class c ON c.oid = x.indrelid
            JOIN pg_namespace n ON n.oid = i.relnamespace
            CROSS JOIN LATERAL (VALUES
              ('definition', pg_get_indexdef(i.oid)),
              ('state', CASE WHEN NOT x.indisready THEN 'NOT READY (a CREATE INDEX CONCURRENTLY failed or is running)'
                             WHEN NOT x.indisvalid THEN 'INVALID (a CREATE INDEX CONCURRENTLY failed; queries do not use it)'
                             ELSE 'valid' END),
              ('clustered', x.indisclustered::text),
              ('comment', obj_description(i.oid, 'pg_class'))) v(attribute, value)
            WHERE \(schema) AND \(ownClass)
            """,
            """
            SELECT CASE c.relkind WHEN 'm' THEN 'materialized view' ELSE 'view' END, \(qualified) || quote_ident(c.relname), NULL, attribute, value
            FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            CROSS JOIN LATERAL (VALUES
              ('definition', pg_get_viewdef(c.oid, true)),
              ('options', array_to_string(c.reloptions, ', ')),
              ('owner', pg_get_userbyid(c.relowner)::text),
              ('comment', obj_description(c.oid, 'pg_class'))) v(attribute, value)
            WHERE c.relkind IN ('v', 'm') AND \(schema) AND \(ownClass)
            """,
            """
            SELECT CASE p.prokind WHEN 'p' THEN 'procedure' WHEN 'a' THEN 'aggregate' ELSE 'function' END,
                   \(qualified) || quote_ident(p.proname) || '(' || pg_get_function_identity_arguments(p.oid) || ')', NULL, attribute, value
            FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
            LEFT JOIN pg_aggregate agg ON agg.aggfnoid = p.oid
            CROSS JOIN LATERAL (VALUES
              ('definition', CASE WHEN p.prokind = 'a' THEN
                 'sfunc = ' || agg.aggtransfn::regproc || ', stype = ' || format_type(agg.aggtranstype, NULL)
                 || coalesce(', finalfunc = ' || nullif(agg.aggfinalfn, 0)::regproc, '')
                 || coalesce(', combinefunc = ' || nullif(agg.aggcombinefn, 0)::regproc, '')
                 || coalesce(', initcond = ' || quote_literal(agg.agginitval), '')
                 || coalesce(', sortop = ' || nullif(agg.aggsortop, 0)::regoperator, '')
                 || ', returns ' || format_type(p.prorettype, NULL)
               ELSE pg_get_functiondef(p.oid) END),
              ('owner', pg_get_userbyid(p.proowner)::text),
              ('comment', obj_description(p.oid, 'pg_proc'))) v(attribute, value)
            WHERE p.prokind IN ('f', 'p', 'w', 'a') AND \(schema) AND \(own("'pg_proc'", "p.oid"))
            """,
            """
            SELECT 'trigger', quote_ident(tg.tgname) || ' on ' || \(qualified) || quote_ident(c.relname), \(qualified) || quote_ident(c.relname), attribute, value
            FROM pg_trigger tg JOIN pg_class c ON c.oid = tg.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
            CROSS JOIN LATERAL (VALUES
              ('definition', pg_get_triggerdef(tg.oid, true)),
              ('enabled', CASE tg.tgenabled WHEN 'O' THEN 'yes' WHEN 'D' THEN 'disabled' WHEN 'R' THEN 'replica only' ELSE 'always' END),
              ('comment', obj_description(tg.oid, 'pg_trigger'))) v(attribute, value)
            WHERE NOT tg.tgisinternal AND \(schema) AND \(ownClass)
            """,
            """
            SELECT 'event trigger', quote_ident(et.evtname), NULL, attribute, value
            FROM pg_event_trigger et
            CROSS JOIN LATERAL (VALUES
              ('definition', 'ON ' || et.evtevent || coalesce(' WHEN TAG IN (' || array_to_string(et.evttags, ', ') || ')', '') || ' EXECUTE FUNCTION ' || et.evtfoid::regproc),
              ('enabled', CASE et.evtenabled WHEN 'O' THEN 'yes' WHEN 'D' THEN 'disabled' WHEN 'R' THEN 'replica only' ELSE 'always' END),
              ('owner', pg_get_userbyid(et.evtowner)::text),
              ('comment', obj_description(et.oid, 'pg_event_trigger'))) v(attribute, value)
            WHERE \(own("'pg_event_trigger'", "et.oid"))
            """,
            """
            SELECT 'rule', quote_ident(r.rulename) || ' on ' || \(qualified) || quote_ident(c.relname), \(qualified) || quote_ident(c.relname), attribute, value
            FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class JOIN pg_namespace n ON n.oid = c.relnamespace
            CROSS JOIN LATERAL (VALUES ('definition', pg_get_ruledef(r.oid, true)), ('comment', obj_description(r.oid, 'pg_rewrite'))) v(attribute, value)
            WHERE r.rulename <> '_RETURN' AND \(schema) AND \(ownClass)
            """,
            """
            SELECT 'policy', quote_ident(pol.polname) || ' on ' || \(qualified) || quote_ident(c.relname), \(qualified) || quote_ident(c.relname), attribute, value
            FROM pg_policy pol JOIN pg_class c ON c.oid = pol.polrelid JOIN pg_namespace n ON n.oid = c.relnamespace
            CROSS JOIN LATERAL (VALUES
              ('definition', CASE WHEN pol.polpermissive THEN 'PERMISSIVE' ELSE 'RESTRICTIVE' END
                 || ' FOR ' || CASE pol.polcmd WHEN 'r' THEN 'SELECT' WHEN 'a' THEN 'INSERT' WHEN 'w' THEN 'UPDATE' WHEN 'd' THEN 'DELETE' ELSE 'ALL' END
                 || ' TO ' || (SELECT string_agg(g, ', ' ORDER BY g) FROM (SELECT CASE WHEN r = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(r)) END AS g FROM unnest(pol.polroles) r) roles)
                 || coalesce(' USING (' || pg_get_expr(pol.polqual, pol.polrelid) || ')', '')
                 || coalesce(' WITH CHECK (' || pg_get_expr(pol.polwithcheck, pol.polrelid) || ')', '')),
              ('comment', obj_description(pol.oid, 'pg_policy'))) v(attribute, value)
            WHERE \(schema) AND \(ownClass)
            """,
            """
            SELECT 'type', \(qualified) || quote_ident(t.typname), NULL, attribute, value
            FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace LEFT JOIN pg_class c ON c.oid = t.typrelid
            CROSS JOIN LATERAL (VALUES
              ('definition', CASE t.typtype
                 WHEN 'e' THEN 'enum (' || (SELECT string_agg(quote_literal(e.enumlabel), ', ' ORDER BY e.enumsortorder) FROM pg_enum e WHERE e.enumtypid = t.oid) || ')'
                 WHEN 'd' THEN 'domain over ' || format_type(t.typbasetype, t.typtypmod) || CASE WHEN t.typnotnull THEN ' NOT NULL' ELSE '' END
                               || coalesce(' DEFAULT ' || t.typdefault, '')
                               || coalesce(' ' || (SELECT string_agg('CONSTRAINT ' || quote_ident(con.conname) || ' ' || pg_get_constraintdef(con.oid, true), ' ' ORDER BY con.conname)
                                                    FROM pg_constraint con WHERE con.contypid = t.oid), '')
                 WHEN 'c' THEN 'composite (' || (SELECT string_agg(quote_ident(a.attname) || ' ' || format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum)
                                                 FROM pg_attribute a WHERE a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped) || ')'
                 WHEN 'r' THEN 'range (subtype = ' || (SELECT format_type(r.rngsubtype, NULL) FROM pg_range r WHERE r.rngtypid = t.oid) || ')'
                 ELSE t.typtype::text END),
              ('owner', pg_get_userbyid(t.typowner)::text),
              ('comment', obj_description(t.oid, 'pg_type'))) v(attribute, value)
            WHERE t.typtype IN ('e', 'd', 'c', 'r') AND (t.typtype <> 'c' OR c.relkind = 'c') AND \(schema) AND \(own("'pg_type'", "t.oid"))
            """,
            """
            SELECT 'sequence', \(qualified) || quote_ident(c.relname), NULL, attribute, value
            FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid JOIN pg_namespace n ON n.oid = c.relnamespace
            CROSS JOIN LATERAL (VALUES
              ('definition', 'AS ' || format_type(s.seqtypid, NULL) || ' INCREMENT BY ' || s.seqincrement || ' MINVALUE ' || s.seqmin
                 || ' MAXVALUE ' || s.seqmax || ' START WITH ' || s.seqstart || ' CACHE ' || s.seqcache || CASE WHEN s.seqcycle THEN ' CYCLE' ELSE ' NO CYCLE' END),
              ('owned by', (SELECT CASE d.deptype WHEN 'i' THEN 'identity of ' ELSE '' END || tn.nspname || '.' || t.relname || '.' || a.attname
                            FROM pg_depend d JOIN pg_class t ON t.oid = d.refobjid JOIN pg_namespace tn ON tn.oid = t.relnamespace
                            JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
                            WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype IN ('a', 'i') AND d.refobjsubid > 0)),
              ('owner', pg_get_userbyid(c.relowner)::text),
              ('comment', obj_description(c.oid, 'pg_class'))) v(attribute, value)
            WHERE \(schema) AND \(ownClass)
            """,
            """
            SELECT 'statistics', \(qualified) || quote_ident(st.stxname), NULL, attribute, value
            FROM pg_statistic_ext st JOIN pg_namespace n ON n.oid = st.stxnamespace
            CROSS JOIN LATERAL (VALUES ('definition', pg_get_statisticsobjdef(st.oid)), ('comment', obj_description(st.oid, 'pg_statistic_ext'))) v(attribute, value)
            WHERE \(schema) AND \(own("'pg_statistic_ext'", "st.oid"))
            """,
            """
            SELECT 'publication', quote_ident(p.pubname), NULL, attribute, value
            FROM pg_publication p
            CROSS JOIN LATERAL (VALUES
              ('definition', CASE WHEN p.puballtables THEN 'FOR ALL TABLES' ELSE
                 'FOR TABLES ' || coalesce((SELECT string_agg(pt.schemaname || '.' || pt.tablename, ', ' ORDER BY pt.schemaname, pt.tablename) FROM pg_publication_tables pt WHERE pt.pubname = p.pubname), '(none)') END
                 || ' WITH (publish = ''' || concat_ws(', ', CASE WHEN p.pubinsert THEN 'insert' END, CASE WHEN p.pubupdate THEN 'update' END,
                                                         CASE WHEN p.pubdelete THEN 'delete' END, CASE WHEN p.pubtruncate THEN 'truncate' END) || ''')'),
              ('owner', pg_get_userbyid(p.pubowner)::text)) v(attribute, value)
            """,
            """
            SELECT 'collation', \(qualified) || quote_ident(col.collname), NULL, attribute, value
            FROM pg_collation col JOIN pg_namespace n ON n.oid = col.collnamespace
            CROSS JOIN LATERAL (VALUES
              ('definition', 'provider = ' || col.collprovider::text || ', locale = ' || coalesce(col.collcollate, '') || ', deterministic = ' || col.collisdeterministic),
              ('owner', pg_get_userbyid(col.collowner)::text)) v(attribute, value)
            WHERE \(schema) AND \(own("'pg_collation'", "col.oid"))
            """,
            // Default privileges: one object per (role, schema, object type), one attribute per grantee.
            """
            SELECT 'default privileges', 'for ' || CASE WHEN pg_get_userbyid(d.defaclrole) = coalesce((SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = 'bbmigrate'), current_user::text)
                                                       THEN '(migration user)' ELSE quote_ident(pg_get_userbyid(d.defaclrole)) END
                   || coalesce(' in schema ' || quote_ident(n.nspname), '')
                   || ' on ' || CASE d.defaclobjtype WHEN 'r' THEN 'tables' WHEN 'S' THEN 'sequences' WHEN 'f' THEN 'functions' WHEN 'T' THEN 'types' WHEN 'n' THEN 'schemas' ELSE d.defaclobjtype::text END,
                   NULL, CASE WHEN acl.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(acl.grantee)::text END,
                   string_agg(acl.privilege_type || CASE WHEN acl.is_grantable THEN ' (with grant option)' ELSE '' END, ', ' ORDER BY acl.privilege_type)
            FROM pg_default_acl d LEFT JOIN pg_namespace n ON n.oid = d.defaclnamespace, aclexplode(d.defaclacl) acl
            WHERE (n.oid IS NULL OR \(schema)) AND acl.grantee <> d.defaclrole
            GROUP BY 1, 2, 3, 4
            """,
            // Grants: one attribute per grantee (the owner's own privileges excluded).
            """
            SELECT 'grants', kind || ' ' || name, NULL, grantee, string_agg(privilege_type || CASE WHEN is_grantable THEN ' (with grant option)' ELSE '' END, ', ' ORDER BY privilege_type)
            FROM (
              SELECT CASE c.relkind WHEN 'S' THEN 'on sequence' WHEN 'v' THEN 'on view' WHEN 'm' THEN 'on view' ELSE 'on table' END AS kind,
                     \(qualified) || quote_ident(c.relname) AS name,
                     CASE WHEN acl.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(acl.grantee)::text END AS grantee, acl.privilege_type, acl.is_grantable
              FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace, aclexplode(c.relacl) acl
              WHERE c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f') AND acl.grantee <> c.relowner AND \(schema) AND \(ownClass)
              UNION ALL
              SELECT 'on column', \(qualified) || quote_ident(c.relname) || '.' || quote_ident(a.attname),
                     CASE WHEN acl.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(acl.grantee)::text END, acl.privilege_type, acl.is_grantable
              FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace, aclexplode(a.attacl) acl
              WHERE a.attacl IS NOT NULL AND acl.grantee <> c.relowner AND \(schema) AND \(ownClass)
              UNION ALL
              SELECT 'on function', \(qualified) || quote_ident(p.proname) || '(' || pg_get_function_identity_arguments(p.oid) || ')',
                     CASE WHEN acl.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(acl.grantee)::text END, acl.privilege_type, acl.is_grantable
              FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) acl
              WHERE acl.grantee <> p.proowner AND \(schema) AND \(own("'pg_proc'", "p.oid"))
              UNION ALL
              SELECT 'on type', \(qualified) || quote_ident(t.typname),
                     CASE WHEN acl.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(acl.grantee)::text END, acl.privilege_type, acl.is_grantable
              FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace, aclexplode(t.typacl) acl
              WHERE t.typacl IS NOT NULL AND acl.grantee <> t.typowner AND \(schema) AND \(own("'pg_type'", "t.oid"))
              UNION ALL
              SELECT 'on schema', quote_ident(n.nspname), CASE WHEN acl.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(acl.grantee)::text END, acl.privilege_type, acl.is_grantable
              FROM pg_namespace n, aclexplode(n.nspacl) acl
              WHERE acl.grantee <> n.nspowner AND \(schema) AND n.nspname NOT LIKE 'pg\\_%'
            ) g
            GROUP BY kind, name, grantee
            """,
            // The owner's own privileges, where they are not the default (an owner that revoked
            // one from itself): grantee "(owner)".
            """
            SELECT 'grants', kind || ' ' || name, NULL, '(owner)', coalesce(privileges, 'none')
            FROM (
              SELECT CASE c.relkind WHEN 'S' THEN 'on sequence' WHEN 'v' THEN 'on view' WHEN 'm' THEN 'on view' ELSE 'on table' END AS kind,
                     \(qualified) || quote_ident(c.relname) AS name,
                     (SELECT string_agg(a.privilege_type || CASE WHEN a.is_grantable THEN ' (with grant option)' ELSE '' END, ', ' ORDER BY a.privilege_type)
                      FROM aclexplode(c.relacl) a WHERE a.grantee = c.relowner) AS privileges,
                     (SELECT string_agg(a.privilege_type || CASE WHEN a.is_grantable THEN ' (with grant option)' ELSE '' END, ', ' ORDER BY a.privilege_type)
                      FROM aclexplode(acldefault((CASE c.relkind WHEN 'S' THEN 's' ELSE 'r' END)::"char", c.relowner)) a WHERE a.grantee = c.relowner) AS defaults
              FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE c.relacl IS NOT NULL AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f') AND \(schema) AND \(ownClass)
            ) o
            WHERE privileges IS DISTINCT FROM defaults
            """,
        ]
    }

    // MARK: Comparing

    /// Lines a DBA understands, describing how `actual` differs from `self` (the expected
    /// schema): `missing index idx_events_child_time on events`,
    /// `column events.notes: default differs (expected …; found …)`,
    /// `index idx_x on events is INVALID (a CREATE INDEX CONCURRENTLY failed; …)`.
    public func differences(from actual: SchemaSnapshot) -> [String] {
        var lines: [String] = []
        let commonRoles = roles.intersection(actual.roles)
        for key in Set(objects.keys).union(actual.objects.keys).sorted() {
            let expected = objects[key]
            let found = actual.objects[key]
            if let kind = expected?.kind ?? found?.kind, kind == "grants" || kind == "default privileges" {
                let name = expected?.name ?? found?.name ?? key
                let want = (expected?.attributes ?? [:]).filter { commonRoles.contains($0.key) }
                let have = (found?.attributes ?? [:]).filter { commonRoles.contains($0.key) }
                for role in Set(want.keys).union(have.keys).sorted() where want[role] != have[role] {
                    let absent = role == Self.owner ? "the default (all)" : "none"
                    lines.append("\(kind) \(name) to \(role == Self.owner ? "its owner" : role) differ (expected: \(want[role] ?? absent); found: \(have[role] ?? absent))")
                }
                continue
            }
            switch (expected, found) {
            case (let expected?, nil):
                lines.append("missing \(expected.kind) \(expected.name)")
            case (nil, let found?):
                lines.append("unexpected \(found.kind) \(found.name) (not created by any migration)")
                if let state = found.attributes["state"], state != "valid" { lines.append("index \(found.name) is \(state)") }
            case (let expected?, let found?):
                for attribute in Set(expected.attributes.keys).union(found.attributes.keys).sorted()
                where expected.attributes[attribute] != found.attributes[attribute] {
                    let want = expected.attributes[attribute].map { $0.isEmpty ? "none" : $0 } ?? "none"
                    let have = found.attributes[attribute].map { $0.isEmpty ? "none" : $0 } ?? "none"
                    if attribute == "state" {
                        lines.append("\(expected.kind) \(expected.name) is \(have)")
                    } else if want.count > 120 || have.count > 120 {
                        lines.append("\(expected.kind) \(expected.name): \(attribute) differs")
                    } else {
                        lines.append("\(expected.kind) \(expected.name): \(attribute) differs (expected: \(want); found: \(have))")
                    }
                }
            case (nil, nil):
                break
            }
        }
        return lines
    }
}
