import Foundation
import Postgres
import Testing

/// Each classified SQLSTATE, produced for real.
@Suite struct ErrorClassificationTests {
    /// A deferred constraint fails at the statement's implicit COMMIT, after the statement
    /// itself succeeded: the error arrives with the Sync. It must reach the caller as the
    /// statement's error, every time, and the connection must stay usable. The ordering where
    /// the error and the Sync's answer arrive in separate reads is forced by ReadSplittingTests
    /// (a real server) and by ConnectionStateMachineTests (event by event); the time limit only
    /// guards against a hang.
    @Test(.timeLimit(.minutes(10))) func aDeferredConstraintFailingAtImplicitCommitIsTheStatementsError() async throws {
        let (connection, _) = try await freshConnection()
        try await connection.executeUnsafeRawSQL("""
            CREATE TABLE parent (id int PRIMARY KEY);
            CREATE TABLE child (id int PRIMARY KEY,
                parent_id int CONSTRAINT child_parent_fkey REFERENCES parent DEFERRABLE INITIALLY DEFERRED);
            INSERT INTO parent VALUES (1);
            """)
        for attempt in 0..<50 {
            let error = await expectPostgresError(.foreignKeyViolation) {
                try await connection.execute("INSERT INTO child VALUES (\(attempt), 2)")
            }
            #expect(error?.constraint == "child_parent_fkey")
            try await connection.execute("INSERT INTO child VALUES (\(attempt), 1)")
        }
        #expect(try await connection.value(Int.self, "SELECT count(*) FROM child") == 50)
    }

    /// A Citus worker names the shard's constraint and table after the shard id; the declared
    /// name is the constraint's without that suffix, and only when the table carries it too.
    @Test func theDeclaredConstraintDropsACitusShardSuffixOnly() {
        func declared(_ constraint: String?, on table: String?) -> String? {
            var error = PostgresError(kind: .uniqueViolation, message: "duplicate key", sqlState: "23505")
            error.constraint = constraint
            error.table = table
            return error.declaredConstraint
        }
        #expect(declared("events_one_active_sleep_102021", on: "events_102021") == "events_one_active_sleep")
        #expect(declared("events_one_active_sleep", on: "events") == "events_one_active_sleep")
        #expect(declared("events_check_2", on: "events") == "events_check_2")
        #expect(declared("events_check_2", on: "events_102021") == "events_check_2")
        #expect(declared("t_v2_key", on: "t_v2") == "t_v2_key")
        #expect(declared("_102021", on: "events_102021") == "_102021")
        #expect(declared(nil, on: "events_102021") == nil)
        #expect(declared("users_email_lower_key", on: nil) == "users_email_lower_key")

        // Passed on by the Citus coordinator: no fields, the name only in the message.
        func forwarded(_ message: String, sqlState: String = "23505", context: String? = "while executing command on 127.0.0.1:9701") -> String? {
            var error = PostgresError(kind: .uniqueViolation, message: message, sqlState: sqlState)
            error.context = context
            return error.declaredConstraint
        }
        let duplicate = #"duplicate key value violates unique constraint "events_one_bottle_in_progress_102022""#
        #expect(forwarded(duplicate) == "events_one_bottle_in_progress")
        #expect(forwarded(#"new row for relation "events_102021" violates check constraint "events_first_sip_valid_102021""#, sqlState: "23514") == "events_first_sip_valid")
        #expect(forwarded(duplicate, context: nil) == nil)                              // not from a worker
        #expect(forwarded(duplicate, sqlState: "42P01") == nil)                         // not an integrity error
        // A CHECK constraint keeps its name on the shards.
        #expect(forwarded(#"new row for relation "events_102022" violates check constraint "events_max_duration_24h""#, sqlState: "23514") == "events_max_duration_24h")
        #expect(forwarded(#"duplicate key value violates unique constraint "users_key""#) == "users_key")
        #expect(forwarded("null value in column \"name\" of relation \"t_102008\" violates not-null constraint", sqlState: "23502") == nil)
    }

    @Test func integrityViolationsNameTheirConstraint() async throws {
        do { let (connection, _) = try await freshConnection()
            try await connection.executeUnsafeRawSQL("""
                CREATE TABLE parent (id int PRIMARY KEY);
                CREATE TABLE child (
                    id int CONSTRAINT child_pkey PRIMARY KEY,
                    parent_id int CONSTRAINT child_parent_fkey REFERENCES parent,
                    name text NOT NULL,
                    age int CONSTRAINT child_age_positive CHECK (age > 0),
                    email text CONSTRAINT child_email_key UNIQUE);
                CREATE TABLE booking (room circle, CONSTRAINT booking_no_overlap EXCLUDE USING gist (room WITH &&));
                INSERT INTO parent VALUES (1);
                """)
            try await connection.execute("INSERT INTO child VALUES (1, 1, 'a', 1, 'a@x')")

            var error = await expectPostgresError(.uniqueViolation) {
                try await connection.execute("INSERT INTO child VALUES (2, 1, 'b', 1, \("a@x"))")
            }
            #expect(error?.constraint == "child_email_key")
            #expect(error?.sqlState == "23505")
            #expect(error?.table == "child")
            #expect(error?.detail?.contains("a@x") == true)
            #expect(error?.description.contains("child_email_key") == true)
            #expect(error?.retry == .willNotSucceed)

            error = await expectPostgresError(.foreignKeyViolation) {
                try await connection.execute("INSERT INTO child VALUES (3, \(99), 'c', 1, NULL)")
            }
            #expect(error?.constraint == "child_parent_fkey")

            error = await expectPostgresError(.notNullViolation) {
                try await connection.execute("INSERT INTO child VALUES (4, 1, \(String?.none), 1, NULL)")
            }
            #expect(error?.column == "name")

            error = await expectPostgresError(.checkViolation) {
                try await connection.execute("INSERT INTO child VALUES (5, 1, 'e', \(-1), NULL)")
            }
            #expect(error?.constraint == "child_age_positive")

            try await connection.execute("INSERT INTO booking VALUES ('<(0,0),2>')")
            error = await expectPostgresError(.exclusionViolation) {
                try await connection.execute("INSERT INTO booking VALUES ('<(1,1),2>')")
            }
            #expect(error?.constraint == "booking_no_overlap")
            // Nothing of the refused rows was written.
            #expect(try await connection.value(Int.self, "SELECT count(*) FROM child") == 1)
        }
    }

    @Test func statementErrors() async throws {
        do { let (connection, _) = try await freshConnection()
            let missingTable = await expectPostgresError(.undefinedTable) { try await connection.execute("SELECT * FROM nowhere") }
            #expect(missingTable?.position == 15)
            await expectPostgresError(.undefinedColumn) { try await connection.execute("SELECT nope FROM pg_class") }
            let syntax = await expectPostgresError(.syntaxError) { try await connection.execute("SELEC 1") }
            #expect(syntax?.sqlState == "42601")
            #expect(syntax?.query == "SELEC 1")
            await expectPostgresError(.divisionByZero) { try await connection.execute("SELECT 1 / \(0)") }
            await expectPostgresError(.invalidTextRepresentation) { try await connection.execute("SELECT 'abc'::int") }
            // The connection is still usable after errors.
            let one = try await connection.value(Int.self, "SELECT 1")
            #expect(one == 1)
        }
    }

    @Test func serializationFailureIsRetryable() async throws {
        do { let (first, database) = try await freshConnection()
            let second = try await database.connect()
            try await first.execute("CREATE TABLE counter (id int PRIMARY KEY, n int)")
            try await first.execute("INSERT INTO counter VALUES (1, 0)")
            let error = await expectPostgresError(.serializationFailure) {
                try await first.transaction(.init(isolation: .repeatableRead)) { connection in
                    _ = try await connection.query("SELECT n FROM counter WHERE id = 1")
                    try await second.execute("UPDATE counter SET n = n + 1 WHERE id = 1")
                    try await connection.execute("UPDATE counter SET n = n + 10 WHERE id = 1")
                }
            }
            #expect(error?.retry == .safe)
            #expect(try await first.value(Int.self, "SELECT n FROM counter") == 1)
            await second.close()
        }
    }

    @Test func deadlockIsDetectedAndRetryable() async throws {
        do { let (setup, database) = try await freshConnection()
            try await setup.execute("CREATE TABLE lockers (id int PRIMARY KEY, n int)")
            try await setup.execute("INSERT INTO lockers VALUES (1, 0), (2, 0)")
            try await setup.execute("ALTER DATABASE \(identifier: database.name) SET deadlock_timeout = '100ms'")
            let a = try await database.connect()
            let b = try await database.connect()
            // Each takes its first lock, waits until the other holds its own, then crosses.
            let (aLocked, aSignal) = AsyncStream<Void>.makeStream()
            let (bLocked, bSignal) = AsyncStream<Void>.makeStream()
            let first = Task { try await a.transaction { connection in
                try await connection.execute("UPDATE lockers SET n = 1 WHERE id = 1")
                aSignal.yield()
                for await _ in bLocked { break }
                try await connection.execute("UPDATE lockers SET n = 1 WHERE id = 2")
            } }
            let second = Task { try await b.transaction { connection in
                try await connection.execute("UPDATE lockers SET n = 2 WHERE id = 2")
                bSignal.yield()
                for await _ in aLocked { break }
                try await connection.execute("UPDATE lockers SET n = 2 WHERE id = 1")
            } }
            let outcomes = [await first.result, await second.result]
            let failures = outcomes.compactMap { outcome -> PostgresError? in
                if case .failure(let error as PostgresError) = outcome { return error }
                return nil
            }
            #expect(failures.count == 1)
            #expect(failures.first?.kind == .deadlockDetected)
            #expect(failures.first?.retry == .safe)
            await a.close()
            await b.close()
        }
    }

    @Test func lockNotAvailableAndQueryCanceled() async throws {
        do { let (first, database) = try await freshConnection()
            let second = try await database.connect()
            try await first.execute("CREATE TABLE item (id int PRIMARY KEY)")
            try await first.execute("INSERT INTO item VALUES (1)")
            try await first.transaction { connection in
                try await connection.execute("SELECT * FROM item WHERE id = 1 FOR UPDATE")
                let error = await expectPostgresError(.lockNotAvailable) {
                    try await second.execute("SELECT * FROM item WHERE id = 1 FOR UPDATE NOWAIT")
                }
                #expect(error?.retry == .safe)
            }
            try await second.execute("SET statement_timeout = '50ms'")
            let canceled = await expectPostgresError(.queryCanceled) { try await second.execute("SELECT pg_sleep(5)") }
            #expect(canceled?.sqlState == "57014")
            await second.close()
        }
    }

    @Test func terminatedSessionIsAConnectionErrorAndRetryable() async throws {
        do { let (admin, database) = try await freshConnection()
            let victim = try await database.connect()
            let pid = await victim.backendPID
            try await admin.execute("SELECT pg_terminate_backend(\(pid))")
            let error = try #require(await expectKinds([.adminShutdown, .connectionFailure]) {
                try await victim.execute("SELECT 1")
            })
            #expect(error.retry == .safe)
            #expect(victim.isBroken)
            await expectPostgresError(.connectionFailure) { try await victim.execute("SELECT 1") }
        }
    }

    @Test func classificationTable() {
        let table: [(String, PostgresError.Kind)] = [
            ("23505", .uniqueViolation), ("23503", .foreignKeyViolation), ("23502", .notNullViolation),
            ("23514", .checkViolation), ("23P01", .exclusionViolation), ("40001", .serializationFailure),
            ("40P01", .deadlockDetected), ("55P03", .lockNotAvailable), ("57014", .queryCanceled),
            ("08006", .connectionFailure), ("08001", .connectionFailure), ("57P01", .adminShutdown), ("57P05", .adminShutdown), ("57P04", .otherServerError),
            ("42P01", .undefinedTable), ("42703", .undefinedColumn), ("42601", .syntaxError), ("XX000", .otherServerError),
        ]
        for (state, kind) in table { #expect(PostgresError.kind(forSQLState: state) == kind) }
    }
}

/// Expects a PostgresError whose kind is one of `kinds`.
func expectKinds(
    _ kinds: Set<PostgresError.Kind>, isolation: isolated (any Actor)? = #isolation, _ body: () async throws -> Void
) async -> PostgresError? {
    do {
        try await body()
        Issue.record("expected one of \(kinds), nothing thrown")
    } catch let error as PostgresError {
        #expect(kinds.contains(error.kind), "got \(error)")
        return error
    } catch {
        Issue.record("unexpected \(error)")
    }
    return nil
}

