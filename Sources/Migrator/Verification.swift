public import Foundation
import Logging
public import Postgres

/// The result of `bbmigrate verify`: the three checks and every problem found.
///
/// ```swift
/// let report = try await migrator.verify()
/// if !report.passed { report.problems.forEach { print($0) } }
/// ```
public struct VerificationReport: Sendable, Codable {
    /// How the live schema compared.
    public enum SchemaCheck: String, Sendable, Codable {
        /// It is what the migrations (or the schema file) produce.
        case matches
        /// It differs; `problems` says how.
        case drift
        /// It was not compared; `schemaSkippedReason` says why.
        case skipped
    }

    /// Every applied file exists and its checksum matches.
    public var checksumsMatch: Bool
    /// Nothing is pending or out of order (or `allowPending` was given).
    public var upToDate: Bool
    public var schema: SchemaCheck
    /// What the live schema was compared with: "a scratch database built from the migrations"
    /// or the schema file.
    public var comparedWith: String?
    public var schemaSkippedReason: String?
    /// One line per problem.
    public var problems: [String]
    public var entries: [MigrationEntry]

    public var passed: Bool { checksumsMatch && upToDate && schema == .matches }

    /// 0 passed, 1 a check failed, 7 the rest passed but the schema was not compared.
    public var exitCode: MigrationExitCode {
        if !checksumsMatch || !upToDate || schema == .drift { return .verificationFailed }
        return schema == .skipped ? .verifyIncomplete : .ok
    }
}

/// How `verify` checks the live schema.
///
/// ```swift
/// let report = try await migrator.verify(VerifyOptions(ignore: .init(extensions: ["pg_stat_statements"])))
/// ```
public struct VerifyOptions: Sendable {
    /// Do not fail because files are pending or out of order.
    public var allowPending: Bool
    /// The server on which to build the scratch database (default: the target's server).
    public var scratch: PostgresConfiguration?
    /// Compare with this `bbmigrate dump` file instead of a scratch database.
    public var schemaFile: URL?
    /// Schemas and extensions left out of the comparison.
    public var ignore: SchemaSnapshot.Ignore

    public init(allowPending: Bool = false, scratch: PostgresConfiguration? = nil, schemaFile: URL? = nil, ignore: SchemaSnapshot.Ignore = .init()) {
        self.allowPending = allowPending
        self.scratch = scratch
        self.schemaFile = schemaFile
        self.ignore = ignore
    }
}

extension Migrator {
    /// The prefix of the scratch databases of the live database `name`:
    /// `bbmigrate_scratch_<hash of name>_`, then the creator's server process id and a random
    /// number, so a later verify of the same database can tell one a killed verify left (its
    /// creator is gone) from one in use, and never touches another database's.
    static func scratchPrefix(for name: String) -> String {
        var hash: UInt32 = 2_166_136_261 // FNV-1a
        for byte in name.utf8 { hash = (hash ^ UInt32(byte)) &* 16_777_619 }
        let hex = String(hash, radix: 16)
        return "bbmigrate_scratch_" + String(repeating: "0", count: 8 - hex.count) + hex + "_"
    }

    /// Checks checksums, pending files and live schema drift, holding the migration lock (so a
    /// verify during an `up` waits for it, and says so if it cannot).
    ///
    /// The schema is compared with a scratch database built from the applied migration files on
    /// the same server (or the one `scratch` names), or with `schemaFile`. Without the right to
    /// create databases and without either, the comparison is skipped and the report says why.
    public func verify(_ verifyOptions: VerifyOptions = VerifyOptions()) async throws -> VerificationReport {
        let files = try files()
        return try await withLockedSession(purpose: "verify") { session in
            let connection = session.connection
            let entries = MigrationEntry.reconcile(files: files, history: try await MigrationHistory.read(connection))
            var problems: [String] = []
            let allowPending = verifyOptions.allowPending
            for entry in entries {
                switch entry.state {
                case .changed: problems.append("\(entry.id).sql: changed since it was applied (bbmigrate repair \(entry.version) --reason … if deliberate)")
                case .missing: problems.append("\(entry.id).sql: applied but the file is missing")
                case .pending where !allowPending: problems.append("\(entry.id).sql: pending (run bbmigrate up)")
                case .outOfOrder where !allowPending: problems.append("\(entry.id).sql: pending and out of order (older than the newest applied version)")
                default: break
                }
            }
            var report = VerificationReport(
                checksumsMatch: !entries.contains { $0.state == .changed || $0.state == .missing },
                upToDate: allowPending || !entries.contains { $0.state == .pending || $0.state == .outOfOrder },
                schema: .skipped, problems: problems, entries: entries)

            let drift: [String]
            if let schemaFile = verifyOptions.schemaFile {
                let expected: String
                do {
                    expected = try String(contentsOf: schemaFile, encoding: .utf8)
                } catch {
                    throw MigratorError.configuration("cannot read the schema file \(schemaFile.path): \(error.localizedDescription)", fix: "write it with bbmigrate dump --output \(schemaFile.lastPathComponent)")
                }
                let actual = SchemaDump.render(try await SchemaSnapshot.capture(connection, ignoring: verifyOptions.ignore), header: "")
                drift = SchemaDump.differences(expected: expected, actual: actual, fileName: schemaFile.lastPathComponent)
                report.comparedWith = schemaFile.lastPathComponent
            } else {
                // Build the expected schema from the applied files only, so that --allow-pending
                // compares like with like.
                let appliedVersions = Set(entries.filter { $0.state == .applied || $0.state == .changed }.map(\.version))
                switch try await scratchDifferences(files: files.filter { appliedVersions.contains($0.version) }, live: connection, options: verifyOptions) {
                case .skipped(let reason):
                    report.schemaSkippedReason = reason
                    return report
                case .done(let differences):
                    drift = differences
                }
                report.comparedWith = "a scratch database built from the applied migrations"
            }
            report.schema = drift.isEmpty ? .matches : .drift
            report.problems += drift
            return report
        }
    }

    enum ScratchOutcome<T: Sendable>: Sendable {
        case done(T)
        case skipped(String)
    }

    /// Builds a scratch database on `server` (the target's server unless `--scratch-url`)
    /// from `files`, hands `body` its configuration, and drops it afterwards (a scratch database
    /// a killed run left is dropped by the next). Skipped, with the reason, where no scratch
    /// database can be made (no CREATEDB, the server unreachable, CREATE DATABASE refused, a
    /// server of another major version).
    func withScratchDatabase<T: Sendable>(
        files: [MigrationFile], live: PostgresConnection, scratch: PostgresConfiguration?, purpose: String,
        _ body: (PostgresConfiguration) async throws -> T
    ) async throws -> ScratchOutcome<T> {
        var server = scratch ?? configuration
        server.applicationName = "bbmigrate"
        server.statementCacheCapacity = 0
        let who = scratch == nil ? "the migration user" : "the --scratch-url user"
        let alternatives = "pass --scratch-url for a server where a scratch database can be built"
        let admin: PostgresConnection
        do {
            admin = try await PostgresConnection.connect(server)
        } catch {
            let message = (error as? PostgresError)?.message ?? "\(error)"
            return .skipped("cannot reach the server for the scratch database (\(message)); " + alternatives)
        }
        defer { Task { await admin.close() } }
        let mayCreate = try await admin.fetchValue(Bool.self, "SELECT rolcreatedb OR rolsuper FROM pg_roles WHERE rolname = current_user") ?? false
        guard mayCreate else {
            return .skipped("\(who) may not create databases (no CREATEDB), so no scratch database could be built \(purpose); " + alternatives)
        }
        let liveVersion = await live.serverVersion / 10_000
        let scratchVersion = await admin.serverVersion / 10_000
        guard liveVersion == scratchVersion else {
            return .skipped("the scratch server runs PostgreSQL \(scratchVersion) and this database \(liveVersion); what one does the other may not; " + alternatives)
        }
        let prefix = Self.scratchPrefix(for: try await live.fetchValue(String.self, "SELECT current_database()::text") ?? "")
        await dropAbandonedScratchDatabases(admin, prefix: prefix)
        let pid = try await admin.fetchValue(Int32.self, "SELECT pg_backend_pid()") ?? 0
        let name = "\(prefix)\(pid)_\(UInt32.random(in: 0...UInt32.max))"
        do {
            try await admin.execute("CREATE DATABASE \(identifier: name)")
        } catch let error as PostgresError {
            return .skipped("could not create a scratch database (\(error.message)); " + alternatives)
        }
        do {
            var scratchConfiguration = server
            scratchConfiguration.database = name
            var scratchOptions = options
            scratchOptions.logger.logLevel = .warning // its progress is not the run's
            scratchOptions.allowOutOfOrder = true
            scratchOptions.detectPooler = false
            let builder = Migrator(configuration: scratchConfiguration, options: scratchOptions, targetDescription: "the scratch database")
            do {
                try await builder.up(files)
            } catch let error as MigratorError {
                throw MigratorError.verification("the migration files do not apply cleanly to an empty database: \(error.message)", fix: error.fix)
            }
            let value = try await body(scratchConfiguration)
            try await admin.execute("DROP DATABASE IF EXISTS \(identifier: name) WITH (FORCE)")
            return .done(value)
        } catch {
            _ = try? await admin.execute("DROP DATABASE IF EXISTS \(identifier: name) WITH (FORCE)")
            throw error
        }
    }

    /// The drift lines; or why no scratch database could be built, so the rest of the report
    /// still stands.
    private func scratchDifferences(files: [MigrationFile], live: PostgresConnection, options verifyOptions: VerifyOptions) async throws -> ScratchOutcome<[String]> {
        let outcome = try await withScratchDatabase(files: files, live: live, scratch: verifyOptions.scratch, purpose: "to compare with") { scratchConfiguration in
            let scratchConnection = try await PostgresConnection.connect(scratchConfiguration)
            let expected = try await SchemaSnapshot.capture(scratchConnection, ignoring: verifyOptions.ignore)
            await scratchConnection.close()
            let actual = try await SchemaSnapshot.capture(live, ignoring: verifyOptions.ignore)
            return expected.differences(from: actual)
        }
        if case .skipped(let reason) = outcome {
            return .skipped(reason + ", or --schema-file schema.sql (written by bbmigrate dump)")
        }
        return outcome
    }

    /// Scratch databases of this live database left by a verify that was killed: nobody is
    /// connected to them and their creator's server process is gone. Ones this user may not
    /// drop are left alone.
    func dropAbandonedScratchDatabases(_ admin: PostgresConnection, prefix: String) async {
        guard let names = try? await admin.query("""
            SELECT d.datname FROM pg_database d
            WHERE starts_with(d.datname, \(prefix))
              AND NOT EXISTS (SELECT FROM pg_stat_activity a
                              WHERE a.datname = d.datname
                                 OR a.pid::text = split_part(substr(d.datname, length(\(prefix)) + 1), '_', 1))
            """).decodeColumn(String.self) else { return }
        for name in names {
            if (try? await admin.execute("DROP DATABASE IF EXISTS \(identifier: name) WITH (FORCE)")) != nil {
                options.logger.info("dropped \(name), a scratch database left by an interrupted verify or plan")
            }
        }
    }

    /// The live schema as `bbmigrate dump` writes it.
    ///
    /// ```swift
    /// try await migrator.dump(ignoring: .init()).write(to: URL(fileURLWithPath: "schema.sql"), atomically: true, encoding: .utf8)
    /// ```
    public func dump(ignoring ignore: SchemaSnapshot.Ignore = .init()) async throws -> String {
        let connection = try await connect()
        defer { Task { await connection.close() } }
        let history = try await MigrationHistory.read(connection)
        let newest = history.last.map { "\(MigrationFile.format($0.version))_\($0.name)" } ?? "no migration"
        let header = """
            -- The schema, as bbmigrate dump writes it (after \(newest)).
            -- One block per object, in a fixed order; regenerate it rather than edit it:
            --   bbmigrate dump --output schema.sql
            -- bbmigrate verify --schema-file schema.sql compares a database with it.
            """
        return SchemaDump.render(try await SchemaSnapshot.capture(connection, ignoring: ignore), header: header)
    }
}
