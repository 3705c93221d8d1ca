import Foundation
import Postgres

/// The result of `bbmigrate verify`: the three checks and every problem found.
///
/// ```swift
/// let report = try await migrator.verify()
/// if !report.passed { report.problems.forEach { print($0) } }
/// ```
public struct VerificationReport: Sendable, Codable {
    /// Every applied file exists and its checksum matches.
    public var checksumsMatch: Bool
    /// Nothing is pending or out of order (or `--allow-pending` was given).
    public var upToDate: Bool
    /// The live schema equals what the migrations produce.
    public var schemaMatches: Bool
    /// One line per problem.
    public var problems: [String]
    public var entries: [MigrationEntry]

    public var passed: Bool { checksumsMatch && upToDate && schemaMatches }
}

extension Migrator {
    /// Checks checksums, pending files and live schema drift.
    ///
    /// The migrations are applied into a scratch database (`bbmigrate_scratch_…`, dropped
    /// afterwards) on the same server, or on the server `scratch` points at, and both
    /// catalogs are compared.
    public func verify(allowPending: Bool = false, scratch: PostgresConfiguration? = nil) async throws -> VerificationReport {
        let files = try files()
        let connection = try await connect()
        defer { Task { await connection.close() } }
        let entries = MigrationEntry.reconcile(files: files, history: try await MigrationHistory.read(connection))
        var problems: [String] = []
        for entry in entries {
            switch entry.state {
            case .changed: problems.append("\(entry.id).sql: changed since it was applied (bbmigrate repair \(entry.version) --reason … if deliberate)")
            case .missing: problems.append("\(entry.id).sql: applied but the file is missing")
            case .pending where !allowPending: problems.append("\(entry.id).sql: pending (run bbmigrate up)")
            case .outOfOrder where !allowPending: problems.append("\(entry.id).sql: pending and out of order (older than the newest applied version)")
            default: break
            }
        }
        let checksumsMatch = !entries.contains { $0.state == .changed || $0.state == .missing }
        let upToDate = allowPending || !entries.contains { $0.state == .pending || $0.state == .outOfOrder }

        // Drift: build the expected schema from the applied files only, so that
        // --allow-pending compares like with like.
        let appliedVersions = Set(entries.filter { $0.state == .applied || $0.state == .changed }.map(\.version))
        let drift = try await schemaDifferences(files: files.filter { appliedVersions.contains($0.version) }, live: connection, scratch: scratch)
        problems += drift
        return VerificationReport(checksumsMatch: checksumsMatch, upToDate: upToDate, schemaMatches: drift.isEmpty, problems: problems, entries: entries)
    }

    private func schemaDifferences(files: [MigrationFile], live: PostgresConnection, scratch: PostgresConfiguration?) async throws -> [String] {
        let name = "bbmigrate_scratch_\(UInt32.random(in: 0...UInt32.max))"
        var serverConfiguration = scratch ?? configuration
        serverConfiguration.applicationName = "bbmigrate"
        let admin: PostgresConnection
        do {
            admin = try await PostgresConnection.connect(serverConfiguration)
        } catch {
            throw MigratorError.wrapConnection(error, target: scratch == nil ? targetDescription : "the --scratch-url server")
        }
        defer { Task { await admin.close() } }
        do {
            try await admin.execute("CREATE DATABASE \(identifier: name)")
        } catch let error as PostgresError {
            throw MigratorError.configuration(
                "cannot create a scratch database to compare schemas: \(error.message)",
                fix: "grant CREATEDB to this user, or pass --scratch-url pointing at a server where it may create databases")
        }
        do {
            var scratchConfiguration = serverConfiguration
            scratchConfiguration.database = name
            var scratchOptions = options
            scratchOptions.log = { _ in }
            scratchOptions.allowOutOfOrder = true
            let builder = Migrator(configuration: scratchConfiguration, options: scratchOptions, targetDescription: "the scratch database")
            do {
                try await builder.up(files)
            } catch let error as MigratorError {
                throw MigratorError.verification("the migration files do not apply cleanly to an empty database: \(error.message)", fix: error.fix)
            }
            let scratchConnection = try await PostgresConnection.connect(scratchConfiguration)
            let expected = try await SchemaSnapshot.capture(scratchConnection)
            await scratchConnection.close()
            let actual = try await SchemaSnapshot.capture(live)
            try await dropScratch(name, admin)
            return expected.differences(from: actual)
        } catch {
            try? await dropScratch(name, admin)
            throw error
        }
    }

    private func dropScratch(_ name: String, _ admin: PostgresConnection) async throws {
        try await admin.execute("DROP DATABASE IF EXISTS \(identifier: name) WITH (FORCE)")
    }
}
