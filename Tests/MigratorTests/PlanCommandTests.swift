import EmbeddedPostgres
import Foundation
import Postgres
import PostgresTestKit
import Testing

/// `bbmigrate plan` on a table of a million rows: each risky form is reported with its lock,
/// its rewrite or scan and the table's size, each safe variant as safe; the target is neither
/// changed nor locked; a transaction pooler is refused.
@Suite struct PlanCommandTests {
    /// A database at 0001 (tables `parent` and `big`) with a million rows in `big`, analyzed,
    /// and a folder with 0001 and `pending` as the files after it.
    static func bigDatabase(pending: [(String, String)]) async throws -> (TestDatabase, PostgresConnection, MigrationFolder) {
        let (database, connection) = try await emptyDatabase()
        let folder = try MigrationFolder()
        try folder.write("0001_tables.sql", """
            CREATE TABLE parent (id int8 PRIMARY KEY);
            CREATE TABLE big (id int8 PRIMARY KEY, parent_id int8, v int4, note text, label text);
            """)
        let up = try await bbmigrate("up", "--url", database.connectionString, "--dir", folder.path)
        try #require(up.status == 0, "\(up.stderr)")
        try await connection.execute("INSERT INTO parent SELECT generate_series(1, 1000)")
        try await connection.execute("INSERT INTO big SELECT n, 1 + n % 1000, n % 5000, 'n', 'l' FROM generate_series(1, 1000000) n")
        try await connection.execute("ANALYZE parent, big")
        for (index, (name, sql)) in pending.enumerated() {
            try folder.write(String(format: "%04d_%@.sql", index + 2, name), sql)
        }
        return (database, connection, folder)
    }

    /// The plan's statements as JSON objects, by file name.
    static func plan(_ database: TestDatabase, _ folder: MigrationFolder, _ extra: String...) async throws -> (status: Int32, statements: [String: [String: Any]], findings: [[String: Any]], text: String) {
        let result = try await CLIProcess(["plan", "--json", "--url", database.connectionString, "--dir", folder.path] + extra).wait()
        let decoded = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any], "\(result.stdout)\(result.stderr)")
        var statements: [String: [String: Any]] = [:]
        for statement in decoded["statements"] as? [[String: Any]] ?? [] {
            statements[statement["file"] as? String ?? ""] = statement
        }
        let text = try await CLIProcess(["plan", "--url", database.connectionString, "--dir", folder.path] + extra).wait().stdout
        return (result.status, statements, decoded["findings"] as? [[String: Any]] ?? [], text)
    }

    static func work(_ statement: [String: Any]?) -> [String] {
        (statement?["work"] as? [[String: Any]] ?? []).map { "\($0["kind"] ?? "") \(($0["table"] as? [String: Any])?["name"] ?? "")" }
    }

    static func locks(_ statement: [String: Any]?) -> [String] {
        (statement?["locks"] as? [[String: Any]] ?? []).map { "\(($0["table"] as? [String: Any])?["name"] ?? "") \($0["mode"] ?? "")" }
    }

    @Test func eachRiskyFormIsReportedWithItsLockWorkAndSizeAndEachSafeVariantAsSafe() async throws {
        let (database, connection, folder) = try await Self.bigDatabase(pending: [
            ("index", "CREATE INDEX big_v ON big (v);"),
            ("volatile_default", "ALTER TABLE big ADD COLUMN token uuid DEFAULT gen_random_uuid();"),
            ("constant_default", "ALTER TABLE big ADD COLUMN flag int4 DEFAULT 0;"),
            ("type", "ALTER TABLE big ALTER COLUMN v TYPE bigint;"),
            ("not_null", "ALTER TABLE big ALTER COLUMN note SET NOT NULL;"),
            ("check_not_valid", "ALTER TABLE big ADD CONSTRAINT big_label_present CHECK (label IS NOT NULL) NOT VALID;"),
            ("check_validate", "ALTER TABLE big VALIDATE CONSTRAINT big_label_present;"),
            ("not_null_proven", "ALTER TABLE big ALTER COLUMN label SET NOT NULL;"),
            ("foreign_key", "ALTER TABLE big ADD CONSTRAINT big_parent FOREIGN KEY (parent_id) REFERENCES parent (id);"),
            ("foreign_key_not_valid", "ALTER TABLE big ADD CONSTRAINT big_parent_again FOREIGN KEY (parent_id) REFERENCES parent (id) NOT VALID;"),
            ("unique", "ALTER TABLE big ADD CONSTRAINT big_id_v UNIQUE (id, v);"),
            ("vacuum_full", "-- bbmigrate:no-transaction\nVACUUM FULL big;"),
            ("index_concurrently", "-- bbmigrate:no-transaction\nCREATE INDEX CONCURRENTLY big_note ON big (note);"),
        ])
        let fingerprint: SQL = """
            SELECT md5(string_agg(format('%s %s %s %s', c.relname, c.relfilenode, a.attname, a.atttypid::regtype), ',' ORDER BY c.relname, a.attnum))
                   || (SELECT count(*) FROM pg_constraint WHERE conrelid = 'big'::regclass)::text
                   || (SELECT count(*) FROM pg_index WHERE indrelid = 'big'::regclass)::text
                   || (SELECT count(*) FROM bbmigrate.schema_migrations)::text
            FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0
            WHERE c.relnamespace = 'public'::regnamespace
            """
        let before = try await connection.fetchValue(String.self, fingerprint)

        let (status, statements, findings, text) = try await Self.plan(database, folder)
        #expect(status == 0, "no --fail-on: exit 0")
        func statement(_ file: String) -> [String: Any]? { statements[file] }
        func safe(_ file: String) -> Bool { statement(file)?["safe"] as? Bool ?? false }

        // CREATE INDEX: SHARE on big (blocks writes) while it reads a million rows.
        #expect(Self.locks(statement("0002_index.sql")) == ["big ShareLock"])
        #expect(Self.work(statement("0002_index.sql")) == ["index build big"])
        #expect(!safe("0002_index.sql"))
        #expect((statement("0002_index.sql")?["advice"] as? String)?.contains("CREATE INDEX CONCURRENTLY") == true)
        // A volatile default and a type change rewrite the table under ACCESS EXCLUSIVE.
        for file in ["0003_volatile_default.sql", "0005_type.sql"] {
            #expect(Self.locks(statement(file)) == ["big AccessExclusiveLock"], "\(file)")
            #expect(Self.work(statement(file)) == ["rewrite big"], "\(file)")
            #expect(!safe(file))
        }
        // A constant default: no rewrite (PostgreSQL 11 and later), brief, safe.
        #expect(Self.work(statement("0004_constant_default.sql")).isEmpty)
        #expect(safe("0004_constant_default.sql"))
        // SET NOT NULL scans; after a validated CHECK it does not.
        #expect(Self.work(statement("0006_not_null.sql")) == ["scan big"])
        #expect(!safe("0006_not_null.sql"))
        #expect((statement("0006_not_null.sql")?["advice"] as? String)?.contains("NOT VALID") == true)
        #expect(Self.work(statement("0007_check_not_valid.sql")).isEmpty && safe("0007_check_not_valid.sql"))
        #expect(Self.locks(statement("0008_check_validate.sql")) == ["big ShareUpdateExclusiveLock"])
        #expect(Self.work(statement("0008_check_validate.sql")) == ["scan big"] && safe("0008_check_validate.sql"))
        #expect(Self.work(statement("0009_not_null_proven.sql")).isEmpty && safe("0009_not_null_proven.sql"))
        // A foreign key validated in place scans under a lock that blocks writes; NOT VALID does not.
        #expect(Self.locks(statement("0010_foreign_key.sql")).contains("big ShareRowExclusiveLock"))
        #expect(Self.work(statement("0010_foreign_key.sql")).contains("scan big"))
        #expect(!safe("0010_foreign_key.sql"))
        #expect(Self.work(statement("0011_foreign_key_not_valid.sql")).isEmpty && safe("0011_foreign_key_not_valid.sql"))
        // UNIQUE builds its index while writes wait.
        #expect(Self.work(statement("0012_unique.sql")) == ["index build big"] && !safe("0012_unique.sql"))
        #expect((statement("0012_unique.sql")?["advice"] as? String)?.contains("USING INDEX") == true)
        // VACUUM FULL rewrites under ACCESS EXCLUSIVE; CREATE INDEX CONCURRENTLY lets writes go on.
        #expect(Self.locks(statement("0013_vacuum_full.sql")) == ["big AccessExclusiveLock"])
        #expect(Self.work(statement("0013_vacuum_full.sql")) == ["rewrite big"] && !safe("0013_vacuum_full.sql"))
        #expect(Self.locks(statement("0014_index_concurrently.sql")) == ["big ShareUpdateExclusiveLock"])
        #expect(Self.work(statement("0014_index_concurrently.sql")) == ["index build big"] && safe("0014_index_concurrently.sql"))

        // Sizes from the target: a million rows.
        let size = try #require((statement("0003_volatile_default.sql")?["work"] as? [[String: Any]])?.first?["table"] as? [String: Any])
        #expect((size["rows"] as? Int).map { (900_000...1_100_000).contains($0) } == true, "\(size)")
        #expect(text.contains("rewrites big (1.0M rows, "), "\(text)")
        #expect(text.contains("locks big (1.0M rows, "))
        // The findings: every unsafe form, none of the safe ones.
        let found = Set(findings.map { "\($0["risk"] ?? "") \($0["file"] ?? "")" })
        #expect(found.contains("rewrite 0003_volatile_default.sql") && found.contains("rewrite 0005_type.sql") && found.contains("rewrite 0013_vacuum_full.sql"))
        #expect(found.contains("scan 0006_not_null.sql") && found.contains("scan 0010_foreign_key.sql"))
        #expect(found.contains("blocks-writes 0002_index.sql") && found.contains("blocks-writes 0012_unique.sql"))
        for file in ["0004_constant_default.sql", "0007_check_not_valid.sql", "0008_check_validate.sql", "0009_not_null_proven.sql",
                     "0011_foreign_key_not_valid.sql", "0014_index_concurrently.sql"] {
            #expect(!findings.contains { $0["file"] as? String == file }, "\(file) is safe")
        }

        // The target is unchanged: same files, columns, constraints, indexes and history.
        #expect(try await connection.fetchValue(String.self, fingerprint) == before)
    }

    /// NOT VALID then VALIDATE in one file gains nothing: the file's transaction holds the
    /// first statement's lock while the second scans. The plan says so, and where the lock
    /// came from; the brief statement after a rewrite shows the lock it runs under.
    @Test func aLockTakenEarlierInTheFileIsHeldDuringTheLaterWork() async throws {
        let (database, _, folder) = try await Self.bigDatabase(pending: [
            ("in_one_file", """
                ALTER TABLE big ADD CONSTRAINT big_parent FOREIGN KEY (parent_id) REFERENCES parent (id) NOT VALID;
                ALTER TABLE big VALIDATE CONSTRAINT big_parent;
                """),
        ])
        let (status, _, findings, text) = try await Self.plan(database, folder, "--fail-on", "scan")
        #expect(status == 8)
        #expect(findings.contains { $0["risk"] as? String == "scan" && $0["line"] as? Int == 2 }, "\(findings)")
        #expect(text.contains("locks big (1.0M rows, ") && text.contains("SHARE ROW EXCLUSIVE, blocks writes (held since line 1 of this file)"), "\(text)")
        #expect(text.contains("move this statement to a later migration file"), "\(text)")
    }

    /// A column the app still reads, dropped by a pending file: the app's statement that
    /// worked before and fails after is a breaks-app finding; one that reads other columns is
    /// fine; one PostgreSQL refuses already is said to be unchecked, not blamed on the files.
    @Test func aDroppedColumnTheAppStillReadsIsAFinding() async throws {
        let (database, _, folder) = try await Self.bigDatabase(pending: [("drop_note", "ALTER TABLE big DROP COLUMN note;")])
        // Beside the migrations, not among them (a .sql file there must be a migration).
        let app = try MigrationFolder().url.appendingPathComponent("app.sql")
        try Data("""
            SELECT id, note FROM big WHERE parent_id = $1;
            -- reads other columns only
            SELECT id, v FROM big WHERE id = $1;
            SELECT nothing FROM nowhere;

            """.utf8).write(to: app)
        let result = try await bbmigrate("plan", "--url", database.connectionString, "--dir", folder.path, "--app-statements", app.path, "--fail-on", "breaks-app")
        #expect(result.status == 8, "\(result.stdout)\(result.stderr)")
        #expect(result.stdout.contains("The app's statements: 2 checked, 1 fail after the pending files"), "\(result.stdout)")
        #expect(result.stdout.contains("app.sql:1: SELECT id, note FROM big WHERE parent_id = $1\n    column \"note\" does not exist"), "\(result.stdout)")
        #expect(result.stdout.contains("app.sql:4: not checked, PostgreSQL refuses it already: relation \"nowhere\" does not exist"), "\(result.stdout)")
        #expect(!result.stdout.contains("app.sql:3"))
        // Without the drop, nothing breaks.
        try FileManager.default.removeItem(at: folder.url.appendingPathComponent("0002_drop_note.sql"))
        try folder.write("0002_add.sql", "ALTER TABLE big ADD COLUMN mood text;")
        #expect(try await bbmigrate("plan", "--url", database.connectionString, "--dir", folder.path, "--app-statements", app.path, "--fail-on", "breaks-app").status == 0)
    }

    /// A table renamed by an earlier pending file keeps its size (found by oid, not by name);
    /// REINDEX is an index build; VACUUM FULL with its options in parentheses takes ACCESS
    /// EXCLUSIVE; a quoted, schema-qualified name is the table it names.
    @Test func renamesReindexAndHowANameIsWrittenDoNotHideTheWork() async throws {
        let (database, connection, folder) = try await Self.bigDatabase(pending: [
            ("rename", "ALTER TABLE big RENAME TO big_old;"),
            ("type_after_rename", "ALTER TABLE big_old ALTER COLUMN v TYPE bigint;"),
            ("reindex", "REINDEX TABLE big_old;"),
            ("vacuum_options", "-- bbmigrate:no-transaction\nVACUUM (VERBOSE, FULL) big_old;"),
            ("quoted", "ALTER TABLE big_old ADD COLUMN flag int4 DEFAULT 0;\nALTER TABLE \"public\".\"big_old\" ALTER COLUMN flag SET DEFAULT 1;"),
        ])
        _ = connection
        let (_, statements, findings, _) = try await Self.plan(database, folder)
        #expect(Self.work(statements["0003_type_after_rename.sql"]) == ["rewrite big"], "a renamed table keeps the target's name and size")
        #expect(findings.contains { $0["risk"] as? String == "rewrite" && $0["file"] as? String == "0003_type_after_rename.sql" })
        #expect(Self.work(statements["0004_reindex.sql"]) == ["index build big"])
        #expect(findings.contains { $0["risk"] as? String == "blocks-writes" && $0["file"] as? String == "0004_reindex.sql" })
        #expect(Self.locks(statements["0005_vacuum_options.sql"]) == ["big AccessExclusiveLock"])
        #expect(findings.contains { $0["risk"] as? String == "blocks-writes" && $0["file"] as? String == "0005_vacuum_options.sql" })
        // The second statement of 0006 runs under the first one's lock, on the table it names.
        let quoted = try #require((try JSONSerialization.jsonObject(with: Data(try await bbmigrate("plan", "--json", "--url", database.connectionString, "--dir", folder.path).stdout.utf8)) as? [String: Any])?["statements"] as? [[String: Any]])
            .filter { $0["file"] as? String == "0006_quoted.sql" }
        #expect(quoted.count == 2)
        #expect(Self.locks(quoted.last) == ["big AccessExclusiveLock"], "\(quoted)")
    }

    /// A statement that changes the whole server is refused when the scratch database would be
    /// on the target's server (it would happen for real there); nothing runs.
    @Test func aServerWideStatementNeedsAScratchServerOfItsOwn() async throws {
        let (database, connection, folder) = try await Self.bigDatabase(pending: [
            ("role", "CREATE TABLE t (id int);\nALTER ROLE CURRENT_USER SET work_mem = '64MB';"),
        ])
        // The setting itself, not a count of pg_db_role_setting: that catalog is the whole
        // server's, and tests running beside this one set and drop their databases' settings
        // (a load run found it).
        let roleHasIt: SQL = """
            SELECT EXISTS (SELECT FROM pg_db_role_setting WHERE setdatabase = 0 AND 'work_mem=64MB' = ANY (setconfig)
                                                             AND setrole = (SELECT oid FROM pg_roles WHERE rolname = current_user))
            """
        #expect(try await connection.fetchValue(Bool.self, roleHasIt) == false)
        let result = try await bbmigrate("plan", "--url", database.connectionString, "--dir", folder.path)
        #expect(result.status == 2, "\(result.stderr)")
        #expect(result.stderr.contains("0002_role.sql:2: ALTER ROLE CURRENT_USER SET work_mem = '64MB' changes the whole server"), "\(result.stderr)")
        #expect(result.stderr.contains("--scratch-url"))
        #expect(try await connection.fetchValue(Bool.self, roleHasIt) == false)
        // Up to the file before, it plans.
        try folder.write("0003_index.sql", "CREATE INDEX big_v ON big (v);")
        try FileManager.default.removeItem(at: folder.url.appendingPathComponent("0002_role.sql"))
        #expect(try await bbmigrate("plan", "--url", database.connectionString, "--dir", folder.path).status == 0)
    }

    /// --fail-on exits 8 on what it names, on tables at or above --large-table-rows; 0 below.
    @Test func failOnExitsEightOnLargeTablesOnly() async throws {
        let (database, _, folder) = try await Self.bigDatabase(pending: [("index", "CREATE INDEX big_v ON big (v);")])
        let blocking = try await bbmigrate("plan", "--url", database.connectionString, "--dir", folder.path, "--fail-on", "blocks-writes")
        #expect(blocking.status == 8, "\(blocking.stdout)\(blocking.stderr)")
        #expect(blocking.stdout.contains("blocks-writes: 0002_index.sql:1 blocks writes on big (SHARE) during an index build of big (1.0M rows"), "\(blocking.stdout)")
        // A rewrite was not asked about, and the table is small for a higher threshold.
        #expect(try await bbmigrate("plan", "--url", database.connectionString, "--dir", folder.path, "--fail-on", "rewrite,scan").status == 0)
        #expect(try await bbmigrate("plan", "--url", database.connectionString, "--dir", folder.path, "--fail-on", "blocks-writes", "--large-table-rows", "5000000").status == 0)
        let wrong = try await bbmigrate("plan", "--url", database.connectionString, "--dir", folder.path, "--fail-on", "slow")
        #expect(wrong.status == 2 && wrong.stderr.contains("--fail-on slow: not one of rewrite, scan, blocks-writes"), "\(wrong.stderr)")
    }

    /// The target's tables are never opened: with `big` locked ACCESS EXCLUSIVE by another
    /// session, plan still answers (and the locker is not disturbed).
    @Test func planTakesNoLockOnTheTargetsTables() async throws {
        let (database, _, folder) = try await Self.bigDatabase(pending: [("type", "ALTER TABLE big ALTER COLUMN v TYPE bigint;")])
        let locker = try await database.connect()
        try await locker.execute("BEGIN")
        try await locker.execute("LOCK TABLE big IN ACCESS EXCLUSIVE MODE")
        let result = try await bbmigrate("plan", "--url", database.connectionString, "--dir", folder.path, "--lock-timeout", "5")
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("rewrites big (1.0M rows"), "\(result.stdout)")
        try await locker.execute("ROLLBACK")
        await locker.close()
    }

    /// Our own migrations on an empty database: nothing large, exit 0 even with every --fail-on.
    @Test func ourMigrationsOnAnEmptyDatabasePlanCleanly() async throws {
        let (database, _) = try await emptyDatabase()
        let result = try await bbmigrate("plan", "--url", database.connectionString, "--dir", repositoryMigrations.path, "--fail-on", "rewrite,scan,blocks-writes")
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(result.stdout.contains("0024_spec_index_events_updated.sql (no transaction"), "\(result.stdout)")
        #expect(result.stdout.contains("no rewrite, scan or write-blocking work on a table of 100000 rows or more"))
        // Nothing was applied.
        #expect(try await bbmigrate("status", "--url", database.connectionString, "--dir", repositoryMigrations.path, "--exit-code").status != 0)

        // From 0023 on, every table counting as large: 0024 builds its index concurrently,
        // 0025 adds its CHECKs NOT VALID (brief), 0026 validates them while writes go on. (0025
        // once validated them in its own transaction, under its ACCESS EXCLUSIVE lock: plan
        // found it.)
        let (at23, _) = try await emptyDatabase()
        #expect(try await bbmigrate("up", "--url", at23.connectionString, "--dir", repositoryMigrations.path, "--to", "23").status == 0)
        let strict = try await bbmigrate("plan", "--url", at23.connectionString, "--dir", repositoryMigrations.path,
                                         "--fail-on", "rewrite,scan,blocks-writes", "--large-table-rows", "0")
        #expect(strict.status == 0, "\(strict.stdout)\(strict.stderr)")
        #expect(strict.stdout.contains("line 8: ALTER TABLE events VALIDATE CONSTRAINT events_start_from_1900\n    locks events (0 rows): SHARE UPDATE EXCLUSIVE, blocks nothing the app runs"), "\(strict.stdout)")
    }

    /// A pending statement that fails on the scratch copy is up's failure, named at its line.
    @Test func aFailingPendingStatementIsReportedAtItsLine() async throws {
        let (database, _, folder) = try await Self.bigDatabase(pending: [("broken", "ALTER TABLE big\n  ADD COLUMN w int4 DEFALT 0;")])
        let result = try await bbmigrate("plan", "--url", database.connectionString, "--dir", folder.path)
        #expect(result.status == 5, "\(result.stderr)")
        #expect(result.stderr.contains("the pending files fail on a scratch copy of the schema") && result.stderr.contains("0002_broken.sql:2"), "\(result.stderr)")
    }

    @Test func aTransactionPoolerIsRefused() async throws {
        let (database, _) = try await emptyDatabase()
        let pool = try await PgBouncer.start(in: database.cluster, mode: .transaction)
        defer { pool.stop() }
        let refused = try await bbmigrate("plan", "--url", pool.connectionString(database: database.name), "--dir", repositoryMigrations.path)
        #expect(refused.status == 2, "\(refused.stderr)")
        #expect(refused.stderr.contains("transaction pooler"))
    }
}
