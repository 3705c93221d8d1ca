import Foundation

/// A schema snapshot written as stable, reviewable SQL: one block per object, headed
/// `-- [kind] name`, in a fixed order (schemas, extensions, types, sequences, tables, …, grants),
/// sorted by name within each kind. Nothing in it depends on when or where it was written, so
/// committing it (`bbmigrate dump --output schema.sql`) shows in review exactly what a migration
/// changed, and `bbmigrate verify --schema-file schema.sql` compares a live database with it
/// without building a scratch database.
///
/// It is for reading and comparing; the migrations stay the way to build a database.
///
/// ```swift
/// let text = SchemaDump.render(try await SchemaSnapshot.capture(connection), header: "-- after 0010")
/// let problems = SchemaDump.differences(expected: try String(contentsOfFile: "schema.sql"), actual: text)
/// ```
public enum SchemaDump {
    static let kindOrder = [
        "schema", "extension", "collation", "type", "sequence", "table", "constraint", "index", "view",
        "materialized view", "function", "procedure", "aggregate", "trigger", "event trigger", "rule", "policy",
        "statistics", "publication", "default privileges", "grants",
    ]

    /// The whole dump: `header` (comment lines), then every object's block.
    public static func render(_ snapshot: SchemaSnapshot, header: String) -> String {
        var blocks = [header.trimmingCharacters(in: .newlines)]
        for (key, text) in self.blocks(of: snapshot) { blocks.append("-- [\(key.kind)] \(key.name)\n" + text) }
        return blocks.joined(separator: "\n\n") + "\n"
    }

    struct BlockKey: Hashable, Comparable {
        var kind: String
        var name: String
        static func < (a: BlockKey, b: BlockKey) -> Bool {
            let ai = kindOrder.firstIndex(of: a.kind) ?? kindOrder.count
            let bi = kindOrder.firstIndex(of: b.kind) ?? kindOrder.count
            return ai != bi ? ai < bi : a.name < b.name
        }
    }

    /// Each top-level object's SQL; columns are written inside their table.
    static func blocks(of snapshot: SchemaSnapshot) -> [(BlockKey, String)] {
        let columnsByTable = Dictionary(grouping: snapshot.objects.values.filter { $0.kind == "column" }) { $0.parent ?? "" }
        return snapshot.objects.values.filter { $0.kind != "column" }
            .map { object in (BlockKey(kind: object.kind, name: object.name), sql(for: object, columns: columnsByTable[object.name] ?? [])) }
            .sorted { $0.0 < $1.0 }
    }

    /// `'it''s'`
    static func literal(_ text: String) -> String { "'" + text.replacingOccurrences(of: "'", with: "''") + "'" }

    static func sql(for object: SchemaSnapshot.Object, columns: [SchemaSnapshot.Object]) -> String {
        let a = object.attributes
        let name = object.name
        var lines: [String] = []
        func value(_ key: String) -> String? { a[key].flatMap { $0.isEmpty ? nil : $0 } }
        func owner(_ what: String) {
            if let owner = value("owner"), owner != SchemaSnapshot.migrationUser { lines.append("ALTER \(what) \(name) OWNER TO \(owner);") }
        }
        func comment(_ what: String, _ target: String? = nil) {
            if let text = value("comment") { lines.append("COMMENT ON \(what) \(target ?? name) IS \(literal(text));") }
        }
        // "idx on table" → ("idx", "table")
        let parts = name.components(separatedBy: " on ")
        let (member, table) = (parts.first ?? name, parts.count > 1 ? parts.dropFirst().joined(separator: " on ") : "")
        switch object.kind {
        case "schema":
            if name != "public" { lines.append("CREATE SCHEMA \(name);") }
            owner("SCHEMA")
            comment("SCHEMA")
        case "extension":
            lines.append("CREATE EXTENSION IF NOT EXISTS \(name) WITH SCHEMA \(value("schema") ?? "public") VERSION \(literal(value("version") ?? ""));")
        case "collation":
            lines.append("CREATE COLLATION \(name) (\(value("definition") ?? ""));")
            owner("COLLATION")
        case "type":
            let definition = value("definition") ?? ""
            if definition.hasPrefix("enum ") {
                lines.append("CREATE TYPE \(name) AS ENUM \(definition.dropFirst(5));")
            } else if definition.hasPrefix("domain over ") {
                lines.append("CREATE DOMAIN \(name) AS \(definition.dropFirst(12));")
            } else if definition.hasPrefix("composite ") {
                lines.append("CREATE TYPE \(name) AS \(definition.dropFirst(10));")
            } else if definition.hasPrefix("range ") {
                lines.append("CREATE TYPE \(name) AS RANGE \(definition.dropFirst(6));")
            } else {
                lines.append("-- type \(name): \(definition)")
            }
            owner(definition.hasPrefix("domain") ? "DOMAIN" : "TYPE")
            comment(definition.hasPrefix("domain") ? "DOMAIN" : "TYPE")
        case "sequence":
            lines.append("CREATE SEQUENCE \(name) \(value("definition") ?? "");")
            if let owned = value("owned by") { lines.append("-- owned by \(owned)") }
            owner("SEQUENCE")
            comment("SEQUENCE")
        case "table":
            let kind = value("kind") ?? "table"
            let unlogged = value("persistence") == "unlogged" ? "UNLOGGED " : ""
            let foreign = kind == "foreign table" ? "FOREIGN " : ""
            let body = columns.sorted { (Int($0.attributes["position"] ?? "") ?? 0) < (Int($1.attributes["position"] ?? "") ?? 0) }
                .map { "    " + columnSQL($0) }.joined(separator: ",\n")
            var create = "CREATE \(unlogged)\(foreign)TABLE \(name) (\n\(body)\n)"
            if let parent = value("inherits") { create += " INHERITS (\(parent))" }
            if let key = value("partition key") { create += " PARTITION BY \(key)" }
            if let options = value("options") { create += " WITH (\(options))" }
            lines.append(create + ";")
            if let partition = value("partition of") { lines.append("-- partition of \(partition)") }
            if let identity = value("replica identity"), identity != "default" { lines.append("ALTER TABLE \(name) REPLICA IDENTITY \(identity.uppercased());") }
            switch value("row security") {
            case "enabled": lines.append("ALTER TABLE \(name) ENABLE ROW LEVEL SECURITY;")
            case "forced": lines.append("ALTER TABLE \(name) ENABLE ROW LEVEL SECURITY;\nALTER TABLE \(name) FORCE ROW LEVEL SECURITY;")
            default: break
            }
            for column in columns.sorted(by: { $0.name < $1.name }) {
                let columnName = column.name.components(separatedBy: ".").last ?? column.name
                if let target = column.attributes["statistics target"], !target.isEmpty {
                    lines.append("ALTER TABLE \(name) ALTER COLUMN \(columnName) SET STATISTICS \(target);")
                }
                if let storage = column.attributes["storage"], !storage.isEmpty {
                    lines.append("ALTER TABLE \(name) ALTER COLUMN \(columnName) SET STORAGE \(storage.uppercased());")
                }
            }
            owner("TABLE")
            comment("TABLE")
            for column in columns.sorted(by: { $0.name < $1.name }) {
                if let text = column.attributes["comment"], !text.isEmpty { lines.append("COMMENT ON COLUMN \(column.name) IS \(literal(text));") }
            }
        case "constraint":
            lines.append("ALTER TABLE \(table) ADD CONSTRAINT \(member) \(value("definition") ?? "");")
            comment("CONSTRAINT", "\(member) ON \(table)")
        case "index":
            lines.append((value("definition") ?? "") + ";")
            if let state = value("state"), state != "valid" { lines.append("-- \(state)") }
            if value("clustered") == "true" { lines.append("ALTER TABLE \(table) CLUSTER ON \(member);") }
            comment("INDEX", member)
        case "view", "materialized view":
            let options = value("options").map { " WITH (\($0))" } ?? ""
            lines.append("CREATE \(object.kind.uppercased()) \(name)\(options) AS\n\(value("definition") ?? "")")
            owner(object.kind == "view" ? "VIEW" : "MATERIALIZED VIEW")
            comment(object.kind.uppercased())
            for column in columns.sorted(by: { $0.name < $1.name }) {
                if let text = column.attributes["comment"], !text.isEmpty { lines.append("COMMENT ON COLUMN \(column.name) IS \(literal(text));") }
            }
        case "function", "procedure":
            lines.append((value("definition") ?? "").trimmingCharacters(in: .whitespacesAndNewlines) + ";")
            owner(object.kind.uppercased())
            comment(object.kind.uppercased())
        case "aggregate":
            lines.append("CREATE AGGREGATE \(name) (\(value("definition") ?? ""));")
            owner("AGGREGATE")
            comment("AGGREGATE")
        case "trigger":
            lines.append((value("definition") ?? "") + ";")
            if let enabled = value("enabled"), enabled != "yes" { lines.append("-- trigger is \(enabled)") }
            comment("TRIGGER", "\(member) ON \(table)")
        case "event trigger":
            lines.append("CREATE EVENT TRIGGER \(name) \(value("definition") ?? "");")
            if let enabled = value("enabled"), enabled != "yes" { lines.append("-- event trigger is \(enabled)") }
            owner("EVENT TRIGGER")
            comment("EVENT TRIGGER")
        case "rule":
            lines.append(value("definition") ?? "")
            comment("RULE", "\(member) ON \(table)")
        case "policy":
            lines.append("CREATE POLICY \(member) ON \(table) AS \(value("definition") ?? "");")
            comment("POLICY", "\(member) ON \(table)")
        case "statistics":
            lines.append((value("definition") ?? "") + ";")
            comment("STATISTICS")
        case "publication":
            lines.append("CREATE PUBLICATION \(name) \(value("definition") ?? "");")
            owner("PUBLICATION")
        case "default privileges":
            // "for ROLE in schema S on tables"
            for (grantee, privileges) in a.sorted(by: { $0.key < $1.key }) {
                lines.append("ALTER DEFAULT PRIVILEGES \(name.replacingOccurrences(of: "for ", with: "FOR ROLE ", options: .anchored)) GRANT \(privileges) TO \(grantee);")
            }
        case "grants":
            for (grantee, privileges) in a.sorted(by: { $0.key < $1.key }) {
                if grantee == SchemaSnapshot.owner {
                    lines.append("-- the owner's own privileges \(name), not the default: \(privileges)")
                } else {
                    lines.append("GRANT \(privileges) \(name.uppercasedFirstWord) TO \(grantee);")
                }
            }
        default:
            lines.append("-- \(object.kind) \(name): " + a.sorted { $0.key < $1.key }.map { "\($0.key) = \($0.value)" }.joined(separator: "; "))
        }
        return lines.joined(separator: "\n")
    }

    static func columnSQL(_ column: SchemaSnapshot.Object) -> String {
        let a = column.attributes
        var text = (column.name.components(separatedBy: ".").last ?? column.name) + " " + (a["type"] ?? "")
        if let collation = a["collation"], !collation.isEmpty { text += " COLLATE \"\(collation)\"" }
        let defaultExpression = a["default"] ?? ""
        switch a["generated"] {
        case "s": text += " GENERATED ALWAYS AS (\(defaultExpression)) STORED"
        case "v": text += " GENERATED ALWAYS AS (\(defaultExpression)) VIRTUAL"
        default: if !defaultExpression.isEmpty { text += " DEFAULT \(defaultExpression)" }
        }
        switch a["identity"] {
        case "a": text += " GENERATED ALWAYS AS IDENTITY"
        case "d": text += " GENERATED BY DEFAULT AS IDENTITY"
        default: break
        }
        if a["not null"] == "true" { text += " NOT NULL" }
        return text
    }

    // MARK: Comparing with a file

    /// Splits a dump into its blocks, keyed `[kind] name`; the header is left out.
    static func parse(_ text: String) -> [String: String] {
        var blocks: [String: String] = [:]
        var key: String?
        var body: [Substring] = []
        func flush() {
            if let key {
                while let last = body.last, last.trimmingCharacters(in: .whitespaces).isEmpty { body.removeLast() }
                blocks[key] = body.joined(separator: "\n")
            }
            body = []
        }
        for line in text.replacingOccurrences(of: "\r\n", with: "\n").split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("-- ["), line.contains("] ") {
                flush()
                key = String(line.dropFirst(3))
            } else if key != nil {
                body.append(line)
            }
        }
        flush()
        return blocks
    }

    /// How `actual` (a dump of the live database) differs from `expected` (the file), one line
    /// per object, with the first differing lines of a changed block.
    public static func differences(expected: String, actual: String, fileName: String) -> [String] {
        let want = parse(expected)
        let have = parse(actual)
        var lines: [String] = []
        for key in Set(want.keys).union(have.keys).sorted() {
            switch (want[key], have[key]) {
            case (_?, nil): lines.append("missing \(key) (it is in \(fileName))")
            case (nil, _?): lines.append("unexpected \(key) (not in \(fileName))")
            case (let w?, let h?) where w != h:
                let wantLines = w.split(separator: "\n", omittingEmptySubsequences: false)
                let haveLines = h.split(separator: "\n", omittingEmptySubsequences: false)
                let gone = wantLines.filter { !haveLines.contains($0) }.prefix(3).map { "\n    - " + $0 }.joined()
                let added = haveLines.filter { !wantLines.contains($0) }.prefix(3).map { "\n    + " + $0 }.joined()
                lines.append("\(key) differs from \(fileName)" + gone + added)
            default: break
            }
        }
        return lines
    }
}

private extension String {
    /// "on table events" → "ON TABLE events"
    var uppercasedFirstWord: String {
        let words = split(separator: " ", maxSplits: 2).map(String.init)
        guard words.count == 3 else { return self }
        return words[0].uppercased() + " " + words[1].uppercased() + " " + words[2]
    }
}
