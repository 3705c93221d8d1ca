import Foundation
import Postgres

/// The shape of a database's schema, read from `pg_catalog`: tables, columns (type,
/// nullability, default), constraints, indexes (full definition and predicate), views,
/// functions, triggers, types, sequences, extensions and grants.
///
/// `bbmigrate verify` compares the live database's snapshot with one of a scratch database
/// built from the migration files.
///
/// ```swift
/// let live = try await SchemaSnapshot.capture(liveConnection)
/// let expected = try await SchemaSnapshot.capture(scratchConnection)
/// for difference in expected.differences(from: live) { print(difference) }
/// ```
public struct SchemaSnapshot: Sendable, Equatable {
    /// One object: its kind ("index"), its name ("idx_events_child_time on events") and the
    /// attributes that define it ("definition", "type", "default", …).
    ///
    /// ```swift
    /// let indexes = snapshot.objects.values.filter { $0.kind == "index" }
    /// ```
    public struct Object: Sendable, Equatable {
        public var kind: String
        public var name: String
        public var attributes: [String: String]
    }

    /// Objects keyed by "kind name".
    public var objects: [String: Object]
    /// Roles that exist on the server (grants are compared only for roles on both sides).
    public var roles: Set<String>

    static let schemaFilter = "NOT IN ('pg_catalog', 'information_schema', 'bbmigrate', 'pg_toast')"

    /// Reads the snapshot.
    public static func capture(_ connection: PostgresConnection) async throws -> SchemaSnapshot {
        // Each query returns (kind, name, attribute, value). Names drop the "public." prefix.
        let queries: [SQL] = [
            """
            SELECT 'table', qualified, 'kind', CASE relkind WHEN 'p' THEN 'partitioned table' ELSE 'table' END FROM (
              SELECT c.relkind, CASE WHEN n.nspname = 'public' THEN '' ELSE n.nspname || '.' END || c.relname AS qualified
              FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'bbmigrate', 'pg_toast') AND n.nspname NOT LIKE 'pg\\_temp%') t
            """,
            """
            SELECT 'column', tbl || '.' || a.attname, attribute, value FROM (
              SELECT CASE WHEN n.nspname = 'public' THEN '' ELSE n.nspname || '.' END || c.relname AS tbl, a.attname,
                     format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull::text AS notnull,
                     coalesce(pg_get_expr(d.adbin, d.adrelid), '') AS dflt, a.attidentity::text AS ident, a.attgenerated::text AS gen,
                     coalesce(col.collname, '') AS coll
              FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
              LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
              LEFT JOIN pg_collation col ON col.oid = a.attcollation AND a.attcollation <> (SELECT oid FROM pg_collation WHERE collname = 'default')
              WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f') AND a.attnum > 0 AND NOT a.attisdropped
                AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'bbmigrate', 'pg_toast') AND n.nspname NOT LIKE 'pg\\_temp%') a
            CROSS JOIN LATERAL (VALUES ('type', a.type), ('not null', a.notnull), ('default', a.dflt),
                                       ('identity', a.ident), ('generated', a.gen), ('collation', a.coll)) v(attribute, value)
            """,
            """
            SELECT 'constraint', con.conname || ' on ' || CASE WHEN n.nspname = 'public' THEN '' ELSE n.nspname || '.' END || c.relname,
                   'definition', pg_get_constraintdef(con.oid, true) ||
                     CASE WHEN con.condeferrable THEN ' DEFERRABLE' ELSE '' END || CASE WHEN con.condeferred THEN ' INITIALLY DEFERRED' ELSE '' END
            FROM pg_constraint con JOIN pg_class c ON c.oid = con.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'bbmigrate', 'pg_toast')
            """,
            """
            SELECT 'index', i.relname || ' on ' || CASE WHEN n.nspname = 'public' THEN '' ELSE n.nspname || '.' END || t.relname,
                   'definition', pg_get_indexdef(i.oid)
            FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
            JOIN pg_namespace n ON n.oid = i.relnamespace
            WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'bbmigrate', 'pg_toast') AND n.nspname NOT LIKE 'pg\\_temp%'
            """,
            """
            SELECT CASE c.relkind WHEN 'm' THEN 'materialized view' ELSE 'view' END,
                   CASE WHEN n.nspname = 'public' THEN '' ELSE n.nspname || '.' END || c.relname,
                   'definition', pg_get_viewdef(c.oid, true) || coalesce(' WITH ' || array_to_string(c.reloptions, ', '), '')
            FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE c.relkind IN ('v', 'm') AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'bbmigrate', 'pg_toast')
            """,
            """
            SELECT CASE p.prokind WHEN 'p' THEN 'procedure' ELSE 'function' END,
                   CASE WHEN n.nspname = 'public' THEN '' ELSE n.nspname || '.' END || p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')',
                   'definition', pg_get_functiondef(p.oid)
            FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
            LEFT JOIN pg_depend dep ON dep.objid = p.oid AND dep.deptype = 'e'
            WHERE p.prokind IN ('f', 'p') AND dep.objid IS NULL
              AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'bbmigrate', 'pg_toast')
            """,
            """
            SELECT 'trigger', tg.tgname || ' on ' || CASE WHEN n.nspname = 'public' THEN '' ELSE n.nspname || '.' END || c.relname,
                   'definition', pg_get_triggerdef(tg.oid, true) || CASE tg.tgenabled WHEN 'D' THEN ' (disabled)' ELSE '' END
            FROM pg_trigger tg JOIN pg_class c ON c.oid = tg.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE NOT tg.tgisinternal AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'bbmigrate', 'pg_toast')
            """,
            """
            SELECT 'type', CASE WHEN n.nspname = 'public' THEN '' ELSE n.nspname || '.' END || t.typname, 'definition',
                   CASE t.typtype
                     WHEN 'e' THEN 'enum (' || (SELECT string_agg(quote_literal(e.enumlabel), ', ' ORDER BY e.enumsortorder) FROM pg_enum e WHERE e.enumtypid = t.oid) || ')'
                     WHEN 'd' THEN 'domain over ' || format_type(t.typbasetype, t.typtypmod) || CASE WHEN t.typnotnull THEN ' NOT NULL' ELSE '' END
                                   || coalesce(' DEFAULT ' || t.typdefault, '')
                                   || coalesce(' ' || (SELECT string_agg(pg_get_constraintdef(con.oid, true), ' ' ORDER BY con.conname) FROM pg_constraint con WHERE con.contypid = t.oid), '')
                     WHEN 'c' THEN 'composite (' || (SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum)
                                                     FROM pg_attribute a WHERE a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped) || ')'
                     ELSE t.typtype::text END
            FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
            LEFT JOIN pg_class c ON c.oid = t.typrelid
            WHERE t.typtype IN ('e', 'd', 'c') AND (t.typtype <> 'c' OR c.relkind = 'c')
              AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'bbmigrate', 'pg_toast')
            """,
            """
            SELECT 'sequence', CASE WHEN n.nspname = 'public' THEN '' ELSE n.nspname || '.' END || c.relname, 'definition',
                   format_type(s.seqtypid, NULL) || ' increment ' || s.seqincrement || ' min ' || s.seqmin || ' max ' || s.seqmax || ' cycle ' || s.seqcycle
            FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'bbmigrate', 'pg_toast')
            """,
            """
            SELECT 'extension', e.extname, 'schema', n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
            WHERE e.extname <> 'plpgsql'
            """,
            """
            SELECT 'schema', n.nspname, 'exists', 'yes' FROM pg_namespace n
            WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'bbmigrate', 'pg_toast', 'public') AND n.nspname NOT LIKE 'pg\\_%'
            """,
            // Grants: one attribute per grantee (owner excluded: it differs between servers).
            """
            SELECT 'grants', kind || ' ' || name, grantee, string_agg(privilege_type || CASE WHEN is_grantable THEN ' (with grant option)' ELSE '' END, ', ' ORDER BY privilege_type)
            FROM (
              SELECT CASE c.relkind WHEN 'S' THEN 'on sequence' WHEN 'v' THEN 'on view' WHEN 'm' THEN 'on view' ELSE 'on table' END AS kind,
                     CASE WHEN n.nspname = 'public' THEN '' ELSE n.nspname || '.' END || c.relname AS name,
                     CASE WHEN acl.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(acl.grantee) END AS grantee, acl.privilege_type, acl.is_grantable
              FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace, aclexplode(c.relacl) acl
              WHERE c.relkind IN ('r', 'p', 'v', 'm', 'S') AND acl.grantee <> c.relowner
                AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'bbmigrate', 'pg_toast')
              UNION ALL
              SELECT 'on column', CASE WHEN n.nspname = 'public' THEN '' ELSE n.nspname || '.' END || c.relname || '.' || a.attname,
                     CASE WHEN acl.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(acl.grantee) END, acl.privilege_type, acl.is_grantable
              FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace, aclexplode(a.attacl) acl
              WHERE a.attacl IS NOT NULL AND acl.grantee <> c.relowner
                AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'bbmigrate', 'pg_toast')
              UNION ALL
              SELECT 'on function', CASE WHEN n.nspname = 'public' THEN '' ELSE n.nspname || '.' END || p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')',
                     CASE WHEN acl.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(acl.grantee) END, acl.privilege_type, acl.is_grantable
              FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) acl
              WHERE acl.grantee <> p.proowner AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'bbmigrate', 'pg_toast')
              UNION ALL
              SELECT 'on schema', n.nspname, CASE WHEN acl.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(acl.grantee) END, acl.privilege_type, acl.is_grantable
              FROM pg_namespace n, aclexplode(n.nspacl) acl
              WHERE acl.grantee <> n.nspowner AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'bbmigrate', 'pg_toast') AND n.nspname NOT LIKE 'pg\\_%'
            ) g
            GROUP BY kind, name, grantee
            """,
        ]
        var objects: [String: Object] = [:]
        for query in queries {
            for row in try await connection.query(query) {
                let (kind, name, attribute, value) = try row.decode((String, String, String, String?).self)
                objects["\(kind) \(name)", default: Object(kind: kind, name: name, attributes: [:])].attributes[attribute] = value ?? ""
            }
        }
        let roles = Set(try await connection.query("SELECT rolname FROM pg_roles").decodeColumn(String.self)).union(["PUBLIC"])
        return SchemaSnapshot(objects: objects, roles: roles)
    }

    /// Lines a DBA understands, describing how `actual` differs from `self` (the expected
    /// schema): `missing index idx_events_child_time on events`,
    /// `column events.notes: default differs (expected …, found …)`.
    public func differences(from actual: SchemaSnapshot) -> [String] {
        var lines: [String] = []
        let commonRoles = roles.intersection(actual.roles)
        for key in Set(objects.keys).union(actual.objects.keys).sorted() {
            let expected = objects[key]
            let found = actual.objects[key]
            if let expected, expected.kind == "grants" || found?.kind == "grants" {
                let want = expected.attributes.filter { commonRoles.contains($0.key) }
                let have = (found?.attributes ?? [:]).filter { commonRoles.contains($0.key) }
                for role in Set(want.keys).union(have.keys).sorted() where want[role] != have[role] {
                    lines.append("grants \(expected.name) to \(role) differ (expected: \(want[role] ?? "none"); found: \(have[role] ?? "none"))")
                }
                continue
            }
            switch (expected, found) {
            case (let expected?, nil):
                lines.append("missing \(expected.kind) \(expected.name)")
            case (nil, let found?):
                if found.kind == "grants" {
                    for (role, privileges) in found.attributes.sorted(by: { $0.key < $1.key }) where commonRoles.contains(role) {
                        lines.append("grants \(found.name) to \(role) differ (expected: none; found: \(privileges))")
                    }
                } else {
                    lines.append("unexpected \(found.kind) \(found.name) (not created by any migration)")
                }
            case (let expected?, let found?):
                for attribute in Set(expected.attributes.keys).union(found.attributes.keys).sorted()
                where expected.attributes[attribute] != found.attributes[attribute] {
                    let want = expected.attributes[attribute].map { $0.isEmpty ? "none" : $0 } ?? "none"
                    let have = found.attributes[attribute].map { $0.isEmpty ? "none" : $0 } ?? "none"
                    if attribute == "definition" && (want.count > 120 || have.count > 120) {
                        lines.append("\(expected.kind) \(expected.name): definition differs")
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
