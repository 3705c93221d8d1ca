public import Foundation
public import Postgres

extension Migrator {
    /// Measures what applying the pending files would do to the target's tables (see
    /// ``DeployPlan``): each pending statement runs in a scratch database built from the
    /// applied files, on the target's server or on `scratch`; the sizes are read from the
    /// target's catalog. The target is only read (no lock a query of the app would wait for),
    /// and a transaction pooler is refused as `up` refuses it.
    ///
    /// `appStatements` (a file of the app's statements, `$1`-style parameters allowed) are
    /// prepared before and after the pending files: one that PostgreSQL accepted before and
    /// refuses after (a column it reads was dropped) is a finding.
    ///
    /// ```swift
    /// let plan = try await migrator.plan()
    /// print(plan.text(largeTableRows: 100_000))
    /// ```
    public func plan(to target: Int? = nil, scratch: PostgresConfiguration? = nil, appStatements: URL? = nil) async throws -> DeployPlan {
        let app = try appStatements.map(AppStatements.load)
        let files = try files()
        let session = try await MigrationSession.open(configuration, target: targetDescription, detectPooler: options.detectPooler)
        defer { Task { await session.close() } }
        let live = session.connection
        do {
            let entries = MigrationEntry.reconcile(files: files, history: try await MigrationHistory.read(live))
            let pending = try await filesToApply(entries, files: files, target: target, connection: live)
            guard !pending.isEmpty else { return DeployPlan(target: targetDescription, statements: []) }
            if scratch == nil { try Self.refuseServerWideStatements(in: pending) }
            let sizes = try await TableSizes.read(live)
            let applied = Set(entries.filter { $0.state == .applied || $0.state == .changed }.map(\.version))
            let outcome = try await withScratchDatabase(
                files: files.filter { applied.contains($0.version) }, live: live, scratch: scratch, purpose: "to run the pending files in"
            ) { scratchConfiguration in
                let connection = try await PostgresConnection.connect(scratchConfiguration)
                defer { Task { await connection.close() } }
                let refusedBefore = try await app?.refused(on: connection) ?? [:]
                // The scratch database has the target's schema now: its tables, by oid, are the
                // target's (a later rename keeps the oid, so the size stays with the table).
                let targetTables = try await CatalogState.read(connection).relations.compactMapValues { relation in
                    ["r", "p", "m"].contains(relation.kind) ? sizes.byName[relation.name] : nil
                }
                var statements: [DeployPlan.Statement] = []
                for planned in pending {
                    statements += try await measure(planned, on: connection, targetTables: targetTables)
                    // As up does after every file: nothing a file SET reaches the next.
                    try await connection.executeUnsafeRawSQL(MigrationSession.resetSQL)
                }
                var plan = DeployPlan(target: targetDescription, statements: statements)
                if let app {
                    let refusedAfter = try await app.refused(on: connection)
                    plan.appStatementsChecked = app.statements.count - refusedBefore.count
                    for (index, statement) in app.statements.enumerated() {
                        let location = "\(app.name):\(statement.line)"
                        if let error = refusedBefore[index] {
                            plan.appStatements.append(.init(location: location, statement: statement.excerpt, error: error, checkable: false))
                        } else if let error = refusedAfter[index] {
                            plan.appStatements.append(.init(location: location, statement: statement.excerpt, error: error, checkable: true))
                        }
                    }
                }
                return plan
            }
            switch outcome {
            case .done(let plan):
                return plan
            case .skipped(let reason):
                throw MigratorError.configuration("plan needs a scratch database to run the pending files in, and \(reason)", fix: "pass --scratch-url with a server of the same major version where this user may CREATE DATABASE")
            }
        } catch {
            throw MigratorError.classify(error, target: targetDescription)
        }
    }

    /// Statements whose effect reaches past the scratch database, to the whole server (roles,
    /// other databases, tablespaces, the server's configuration): with the scratch database on
    /// the target's server, running them would do it for real. Refused before anything runs.
    /// (Statements inside DO blocks and functions are not looked into.)
    static func refuseServerWideStatements(in pending: [PlannedMigration]) throws {
        for planned in pending {
            for statement in planned.statements {
                let words = statement.words
                let serverWide: Bool = switch (words.first, words.dropFirst().first) {
                case ("CREATE", "ROLE"), ("CREATE", "USER"), ("CREATE", "GROUP"), ("ALTER", "ROLE"), ("ALTER", "USER"), ("ALTER", "GROUP"),
                     ("DROP", "ROLE"), ("DROP", "USER"), ("DROP", "GROUP"), ("CREATE", "DATABASE"), ("ALTER", "DATABASE"), ("DROP", "DATABASE"),
                     ("ALTER", "SYSTEM"), ("CREATE", "TABLESPACE"), ("ALTER", "TABLESPACE"), ("DROP", "TABLESPACE"):
                    true
                case ("GRANT", _), ("REVOKE", _):
                    !words.contains("ON") // a role's membership, not a privilege on an object
                default:
                    false
                }
                if serverWide {
                    throw MigratorError.configuration(
                        "\(planned.file.fileName):\(statement.line): \(statement.excerpt) changes the whole server, not one database; plan runs the pending files in a scratch database on the target's server, where this would happen for real",
                        fix: "pass --scratch-url with a server of its own for the scratch database (a throwaway cluster of the same major version), or plan up to the file before (--to)")
                }
            }
        }
    }

    /// Runs one file's statements on the scratch database as `up` would (in one transaction
    /// unless the file says otherwise), observing each.
    private func measure(_ planned: PlannedMigration, on connection: PostgresConnection, targetTables: [Int64: DeployPlan.TableSize]) async throws -> [DeployPlan.Statement] {
        let file = planned.file
        var measured: [DeployPlan.Statement] = []
        do {
            if file.runsOutsideTransaction {
                for statement in planned.statements {
                    let before = try await CatalogState.read(connection)
                    try await run(statement, of: file, on: connection)
                    let after = try await CatalogState.read(connection)
                    measured.append(Observation(
                        statement: statement, file: file, before: before, after: after, heldBefore: [], heldAfter: [], takenAt: [:],
                        namedTable: nil, targetTables: targetTables).result)
                }
            } else {
                measured = try await connection.transaction { connection in
                    var results: [DeployPlan.Statement] = []
                    var held = try await CatalogState.heldLocks(connection)
                    // Which line of the file first took each lock (the file holds it to the end).
                    var takenAt: [HeldLock: Int] = [:]
                    for statement in planned.statements {
                        let before = try await CatalogState.read(connection)
                        let namedTable = try await CatalogState.oid(of: Observation.namedTable(in: statement), on: connection)
                        try await run(statement, of: file, on: connection)
                        let after = try await CatalogState.read(connection)
                        let heldAfter = try await CatalogState.heldLocks(connection)
                        for lock in heldAfter where takenAt[lock] == nil { takenAt[lock] = statement.line }
                        results.append(Observation(
                            statement: statement, file: file, before: before, after: after, heldBefore: held, heldAfter: heldAfter,
                            takenAt: takenAt, namedTable: namedTable, targetTables: targetTables).result)
                        held = heldAfter
                    }
                    return results
                }
            }
        } catch let error as MigratorError {
            throw MigratorError.migrationFailed(
                "the pending files fail on a scratch copy of the schema, so up would fail on them too: \(error.message)",
                fix: "fix \(file.fileName), then run bbmigrate plan again")
        }
        return measured
    }

    private func run(_ statement: SQLScript.Statement, of file: MigrationFile, on connection: PostgresConnection) async throws {
        do {
            try await connection.executeUnsafeRawSQL(statement.text)
        } catch let error as PostgresError {
            throw locate(error, in: file, statement: statement, partially: false)
        }
    }
}

/// The app's statements, from a file (`--app-statements`), checked by preparing each.
struct AppStatements: Sendable {
    let name: String
    let statements: [SQLScript.Statement]

    static func load(_ url: URL) throws -> AppStatements {
        let text: String
        do {
            text = try String(contentsOf: url, encoding: .utf8)
        } catch {
            throw MigratorError.configuration("cannot read --app-statements \(url.path): \(error.localizedDescription)", fix: "pass a readable UTF-8 file of the app's SQL statements, separated by semicolons")
        }
        do {
            return AppStatements(name: url.lastPathComponent, statements: try SQLScript.statements(in: text))
        } catch {
            throw MigratorError.configuration("--app-statements \(url.lastPathComponent):\(error.line): \(error.message)", fix: "fix the file; it holds SQL statements separated by semicolons")
        }
    }

    /// The statements PostgreSQL refuses to prepare on `connection`, by index, with its error.
    func refused(on connection: PostgresConnection) async throws -> [Int: String] {
        var refused: [Int: String] = [:]
        for (index, statement) in statements.enumerated() {
            do {
                // PREPARE parses and plans without running: a missing column or table is an error here.
                _ = try await connection.executeUnsafeRawSQL("PREPARE bbmigrate_app_check AS " + statement.text)
                _ = try await connection.executeUnsafeRawSQL("DEALLOCATE bbmigrate_app_check")
            } catch let error as PostgresError {
                refused[index] = error.message
            }
        }
        return refused
    }
}

/// The tables of the target: `reltuples` (or the statistics' live rows where it was never
/// analyzed) and `relpages` × the block size, from the catalog alone (no table is opened,
/// so nothing waits behind a lock the app holds).
struct TableSizes: Sendable {
    var byName: [String: DeployPlan.TableSize]

    static func read(_ connection: PostgresConnection) async throws -> TableSizes {
        let rows = try await connection.query("""
            SELECT \(CatalogState.name) AS name,
                   CASE WHEN c.reltuples >= 0 THEN c.reltuples::int8 ELSE coalesce(s.n_live_tup, 0) END AS rows,
                   c.relpages::int8 * current_setting('block_size')::int8 AS bytes
            FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
            WHERE c.relkind IN ('r', 'p', 'm') AND \(CatalogState.userSchemas)
            """)
        var byName: [String: DeployPlan.TableSize] = [:]
        for row in rows {
            let (name, count, bytes) = try row.decode((String, Int64, Int64).self)
            byName[name] = DeployPlan.TableSize(name: name, rows: count, bytes: bytes)
        }
        return TableSizes(byName: byName)
    }

    /// The table's size in the target, or a new table's name alone.
    func size(of name: String) -> DeployPlan.TableSize {
        byName[name] ?? DeployPlan.TableSize(name: name, rows: nil, bytes: nil)
    }
}

/// What the scratch database's catalog says before and after a statement: each relation's
/// file (a new one is a rewrite), each table's sequential scans in this transaction, and which
/// table each index belongs to.
struct CatalogState: Sendable {
    struct Relation: Sendable {
        var name: String
        var kind: String
        var fileNode: Int64
        var scans: Int64
        var indexOf: Int64
    }

    var relations: [Int64: Relation]

    /// `schema.table`, or `table` in `public`, quoted where needed: the same on both sides.
    static let name: SQL = "CASE WHEN n.nspname = 'public' THEN '' ELSE quote_ident(n.nspname) || '.' END || quote_ident(c.relname)"
    static let userSchemas: SQL = """
        n.nspname NOT IN ('pg_catalog', 'information_schema', 'bbmigrate', 'pg_toast') AND n.nspname NOT LIKE 'pg\\_%'
        """

    static func read(_ connection: PostgresConnection) async throws -> CatalogState {
        let rows = try await connection.query("""
            SELECT c.oid::int8, \(name), c.relkind::text, c.relfilenode::int8, coalesce(x.seq_scan, 0)::int8, coalesce(i.indrelid, 0)::int8
            FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            LEFT JOIN pg_stat_xact_user_tables x ON x.relid = c.oid
            LEFT JOIN pg_index i ON i.indexrelid = c.oid
            WHERE c.relkind IN ('r', 'p', 'm', 'i', 'I') AND \(userSchemas)
            """)
        var relations: [Int64: Relation] = [:]
        for row in rows {
            let (oid, name, kind, fileNode, scans, indexOf) = try row.decode((Int64, String, String, Int64, Int64, Int64).self)
            relations[oid] = Relation(name: name, kind: kind, fileNode: fileNode, scans: scans, indexOf: indexOf)
        }
        return CatalogState(relations: relations)
    }

    /// The oid of the relation `name` names, as written in SQL (quotes, case folding and the
    /// search path as the server applies them); nil for none.
    static func oid(of name: String?, on connection: PostgresConnection) async throws -> Int64? {
        guard let name else { return nil }
        return try await connection.fetchValue(Int64.self, "SELECT to_regclass(\(name))::oid::int8")
    }

    /// The table locks this session holds: (relation oid, mode).
    static func heldLocks(_ connection: PostgresConnection) async throws -> Set<HeldLock> {
        let rows = try await connection.query("""
            SELECT l.relation::int8, l.mode FROM pg_locks l
            WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation' AND l.granted AND l.relation IS NOT NULL
            """)
        var held = Set<HeldLock>()
        for row in rows {
            let (relation, mode) = try row.decode((Int64, String).self)
            held.insert(HeldLock(relation: relation, mode: mode))
        }
        return held
    }
}

struct HeldLock: Hashable, Sendable {
    var relation: Int64
    var mode: String
}

/// One statement's measurements turned into what the plan says of it.
struct Observation {
    let statement: SQLScript.Statement
    let file: MigrationFile
    let before: CatalogState
    let after: CatalogState
    let heldBefore: Set<HeldLock>
    let heldAfter: Set<HeldLock>
    let takenAt: [HeldLock: Int]
    /// The table the statement names (ALTER TABLE, CREATE INDEX … ON, …), resolved before it ran.
    let namedTable: Int64?
    /// The target's tables, by their oid in the scratch database, with their size.
    let targetTables: [Int64: DeployPlan.TableSize]

    /// Lock modes from weakest to strongest.
    static let strength = [
        "AccessShareLock", "RowShareLock", "RowExclusiveLock", "ShareUpdateExclusiveLock",
        "ShareLock", "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock",
    ]

    var result: DeployPlan.Statement {
        let words = statement.words
        let upper = statement.text.uppercased().split(whereSeparator: \.isWhitespace).joined(separator: " ")
        var work: [DeployPlan.WorkItem] = []
        var worked = Set<Int64>()
        // Tables the target has (a table an earlier pending file creates is new there: what
        // happens to it cannot touch the app), by oid: a rename keeps the size with the table.
        let tables = targetTables
        // A rewrite: a table's file changed (TRUNCATE also gives a new file, but copies nothing).
        if words.first != "TRUNCATE" {
            for (oid, table) in tables.sorted(by: { $0.value.name < $1.value.name }) {
                if let old = before.relations[oid], let now = after.relations[oid], old.fileNode != 0, now.fileNode != old.fileNode {
                    work.append(.init(kind: .rewrite, table: table))
                    worked.insert(oid)
                }
            }
        }
        // An index built on a table the target has: a new index, or one given a new file
        // (REINDEX).
        for (oid, index) in after.relations.sorted(by: { $0.key < $1.key }) where ["i", "I"].contains(index.kind) {
            let rebuilt = before.relations[oid].map { $0.fileNode != 0 && $0.fileNode != index.fileNode } ?? true
            if rebuilt, let table = tables[index.indexOf], !worked.contains(index.indexOf) {
                work.append(.init(kind: .indexBuild, table: table))
                worked.insert(index.indexOf)
            }
        }
        // A scan: sequential scans counted in this transaction (a rewrite or build reads the
        // table anyway).
        if !file.runsOutsideTransaction {
            for (oid, table) in tables.sorted(by: { $0.value.name < $1.value.name }) where !worked.contains(oid) {
                if let old = before.relations[oid], let now = after.relations[oid], now.scans > old.scans {
                    work.append(.init(kind: .scan, table: table))
                    worked.insert(oid)
                }
            }
        }

        var locks: [DeployPlan.TableLock] = []
        if file.runsOutsideTransaction {
            // Its locks are gone when it returns: what PostgreSQL documents for each (a rewrite,
            // VACUUM FULL however its options are written, takes ACCESS EXCLUSIVE; the
            // concurrent forms SHARE UPDATE EXCLUSIVE).
            for item in work { locks.append(.init(table: item.table, mode: item.kind == .rewrite ? "AccessExclusiveLock" : "ShareUpdateExclusiveLock")) }
        } else {
            // The tables this statement touches: those it newly locked, those it works on, and
            // the one it names (its lock may be held already, from an earlier line of the file).
            var touched = Set(heldAfter.subtracting(heldBefore).map(\.relation)).union(worked)
            if let namedTable { touched.insert(namedTable) }
            // On each, the strongest lock the file holds while this statement runs.
            var strongest: [Int64: HeldLock] = [:]
            for lock in heldAfter where tables[lock.relation] != nil && touched.contains(lock.relation) {
                let rank = Self.strength.firstIndex(of: lock.mode) ?? 0
                if let current = strongest[lock.relation], (Self.strength.firstIndex(of: current.mode) ?? 0) >= rank { continue }
                strongest[lock.relation] = lock
            }
            for (relation, lock) in strongest.sorted(by: { (tables[$0.key]?.name ?? "") < (tables[$1.key]?.name ?? "") }) {
                guard let table = tables[relation] else { continue }
                let line = takenAt[lock].flatMap { $0 == statement.line ? nil : $0 }
                locks.append(.init(table: table, mode: lock.mode, heldSinceLine: line))
            }
        }
        let blocked = Set(locks.filter { $0.blocks != .nothingTheAppRuns }.map(\.table.name))
        let safe = !work.contains { $0.kind == .rewrite || blocked.contains($0.table.name) }
        return DeployPlan.Statement(
            file: file.fileName, line: statement.line, statement: statement.excerpt, inTransaction: !file.runsOutsideTransaction,
            locks: locks, work: work, safe: safe, advice: advice(upper: upper, work: work, locks: locks))
    }

    /// The table an ALTER TABLE, CREATE INDEX … ON, VACUUM FULL or CLUSTER names, as written
    /// (`big`, `"Audit".log`): the server resolves it (`to_regclass`).
    static func namedTable(in statement: SQLScript.Statement) -> String? {
        // From the first word on (the text may start with a /* comment */).
        var tokens = statement.text.split(whereSeparator: \.isWhitespace).map(String.init)
        if let first = statement.words.first, let start = tokens.firstIndex(where: { $0.uppercased() == first }) { tokens.removeFirst(start) }
        let upper = tokens.map { $0.uppercased() }
        var index: Int?
        if upper.starts(with: ["ALTER", "TABLE"]) {
            index = 2
        } else if upper.first == "CREATE", let on = upper.firstIndex(of: "ON"), upper[..<on].contains("INDEX") {
            index = on + 1
        } else if upper.starts(with: ["VACUUM", "FULL"]) {
            index = 2
        } else if upper.first == "CLUSTER" {
            index = 1
        }
        guard var position = index else { return nil }
        while position < upper.count, ["IF", "EXISTS", "ONLY"].contains(upper[position]) { position += 1 }
        guard position < tokens.count else { return nil }
        let name = tokens[position].prefix { $0 != "(" && $0 != ";" && $0 != "," }
        return name.isEmpty ? nil : String(name)
    }

    /// The safer way to write it, where there is one.
    func advice(upper: String, work: [DeployPlan.WorkItem], locks: [DeployPlan.TableLock]) -> String? {
        let blocking = locks.contains { $0.blocks != .nothingTheAppRuns }
        // Work while a lock an earlier line took blocks the app: the file's transaction is why.
        if let earlier = locks.first(where: { $0.heldSinceLine != nil && $0.blocks != .nothingTheAppRuns }),
           work.contains(where: { $0.table.name == earlier.table.name }) {
            return "line \(earlier.heldSinceLine ?? 0) of this file took \(DeployPlan.modeName(earlier.mode)) on \(earlier.table.name), and the file holds it until it commits: move this statement to a later migration file, so that it runs after that lock is gone"
        }
        if work.contains(where: { $0.kind == .rewrite }) {
            if upper.hasPrefix("VACUUM") || upper.hasPrefix("CLUSTER") {
                return "plain VACUUM makes the space reusable without a rewrite or a blocking lock; to give it back to the disk online, use pg_repack"
            }
            if upper.contains(" TYPE ") {
                return "add a column of the new type, fill it in batches (a trigger keeps new writes in step), move the app to it, then drop the old one"
            }
            if upper.contains("ADD COLUMN") || upper.contains(" ADD ") {
                return "add the column without a default, or with a constant one (PostgreSQL 11 and later store that without a rewrite); fill it in batches; then SET DEFAULT for new rows"
            }
            return "a rewrite holds its lock while it copies every row: reach the same schema in steps that do not rewrite, or run it in a maintenance window"
        }
        if work.contains(where: { $0.kind == .indexBuild }) && blocking {
            if upper.hasPrefix("CREATE") {
                return "CREATE INDEX CONCURRENTLY, in a file of its own marked -- bbmigrate:no-transaction: reads and writes go on while it builds"
            }
            return "build the index first with CREATE UNIQUE INDEX CONCURRENTLY (a -- bbmigrate:no-transaction file), then ADD CONSTRAINT … UNIQUE (or PRIMARY KEY) USING INDEX, which is brief"
        }
        if work.contains(where: { $0.kind == .scan }) && blocking {
            if upper.contains("SET NOT NULL") {
                return "first ADD CONSTRAINT … CHECK (column IS NOT NULL) NOT VALID, then VALIDATE CONSTRAINT in a later migration (writes go on); SET NOT NULL then trusts the valid CHECK and skips the scan"
            }
            if upper.contains("FOREIGN KEY") || upper.contains("REFERENCES") {
                return "add the foreign key NOT VALID (brief), then VALIDATE CONSTRAINT in a later migration: validation lets writes go on"
            }
            if upper.contains("CHECK") {
                return "add the CHECK NOT VALID (brief), then VALIDATE CONSTRAINT in a later migration: validation lets writes go on"
            }
            return "it reads every row while the app's writes wait: split it so that the reading happens under a weaker lock, or run it in a maintenance window"
        }
        if blocking && locks.contains(where: { ($0.table.rows ?? 0) > 0 }) {
            return "it waits behind any query running on the table, and every query after it waits too; bbmigrate's lock_timeout (--ddl-lock-timeout, 10 s by default) makes it give up instead (exit 4): run it when traffic is low, and again if it gave up"
        }
        return nil
    }
}
