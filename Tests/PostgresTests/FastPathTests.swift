import Foundation
import Postgres
import Synchronization
import Testing

@Suite struct PipelineTests {
    @Test func aThousandInsertsInOnePipeline() async throws {
        let (connection, _) = try await freshConnection()
        try await connection.execute("CREATE TABLE t (id int PRIMARY KEY, label text)")
        let statements: [SQL] = (1...1000).map { "INSERT INTO t VALUES (\(Int32($0)), \("row \($0)"))" }
        let results = try await connection.pipeline(statements + ["SELECT count(*) FROM t"])
        #expect(results.count == 1001)
        #expect(results[0].affectedRows == 1)
        #expect(try results[1000].first?.decode(Int.self, at: 0) == 1000)
    }

    @Test func anErrorAbortsTheRestOfTheBatchAndTheConnectionStaysUsable() async throws {
        let (connection, _) = try await freshConnection()
        try await connection.execute("CREATE TABLE t (id int PRIMARY KEY)")
        var statements: [SQL] = (1...10).map { "INSERT INTO t VALUES (\(Int32($0)))" }
        statements[4] = "INSERT INTO t VALUES (\(Int32(1)))" // duplicate key
        let error = await expectPostgresError(.uniqueViolation) { _ = try await connection.pipeline(statements) }
        #expect(error?.message.hasPrefix("statement 5 of 10 in the pipeline failed") == true)
        #expect(error?.constraint == "t_pkey" && error?.sqlState == "23505")
        // One implicit transaction: nothing of the batch stayed.
        #expect(try await connection.value(Int.self, "SELECT count(*) FROM t") == 0)
        #expect(try await connection.value(Int.self, "SELECT 41 + 1") == 42)
        // Inside an explicit transaction, the batch joins it.
        try await connection.transaction { connection in
            _ = try await connection.pipeline([SQL]((1...3).map { "INSERT INTO t VALUES (\(Int32($0)))" }))
        }
        #expect(try await connection.value(Int.self, "SELECT count(*) FROM t") == 3)
    }
}

@Suite struct CopyTests {
    static let awkward = ["tab\there", "new\nline", "back\\slash", "unicode é 日本 👶", "", "quote \" and , comma", "\\N", "carriage\rreturn"]

    @Test func copyRoundTripsTabsNewlinesBackslashesAndUnicode() async throws {
        let (connection, _) = try await freshConnection()
        try await connection.execute("CREATE TABLE \"odd table\" (id int, body text, at timestamptz, doc jsonb, n numeric)")
        let at = Date(timeIntervalSince1970: 1_700_000_000.123456)
        let count = try await connection.copyIn(table: "odd table", columns: ["id", "body", "at", "doc", "n"]) { writer in
            for (index, text) in Self.awkward.enumerated() {
                try writer.append([Int32(index), text, at, PostgresJSON(["k": text]), Decimal(string: "12.50")])
            }
            try writer.append([Int32(99), nil, nil, nil, nil])
        }
        #expect(count == Self.awkward.count + 1)
        let back = try await connection.query("SELECT body, at, doc ->> 'k', n::text FROM \"odd table\" WHERE id < 99 ORDER BY id")
        for (row, text) in zip(back, Self.awkward) {
            let (body, stamp, doc, number) = try row.decode((String, Date, String, String).self)
            #expect(body == text && doc == text && number == "12.5") // Decimal keeps the value, not the scale
            #expect(Int64((stamp.timeIntervalSince1970 * 1_000_000).rounded()) == 1_700_000_000_123_456)
        }
        #expect(try await connection.value(Bool.self, "SELECT body IS NULL FROM \"odd table\" WHERE id = 99"))

        // And out again, in COPY's text format, escaped byte for byte.
        let out = ByteSink()
        let rows = try await connection.copyOut(query: "SELECT body FROM \"odd table\" WHERE id < 4 ORDER BY id") { out.append($0) }
        #expect(rows == 4)
        #expect(String(decoding: out.bytes, as: UTF8.self) == "tab\\there\nnew\\nline\nback\\\\slash\nunicode é 日本 👶\n")
        let csv = ByteSink()
        _ = try await connection.copyOut(table: "odd table", columns: ["body"], format: .csv) { csv.append($0) }
        #expect(String(decoding: csv.bytes, as: UTF8.self).contains("\"new\nline\""))
    }

    @Test func copyErrorsCarryTheirSQLStateAndLoadNothing() async throws {
        let (connection, _) = try await freshConnection()
        try await connection.execute("CREATE TABLE t (id int CONSTRAINT t_positive CHECK (id > 0), body text)")
        let error = await expectPostgresError(.checkViolation) {
            _ = try await connection.copyIn(table: "t", columns: ["id", "body"]) { writer in
                for id in [1, 2, -3, 4] { try writer.append([Int32(id), "x"]) }
            }
        }
        #expect(error?.constraint == "t_positive")
        let encoding = await expectPostgresError(.invalidParameter) {
            _ = try await connection.copyIn(table: "t", columns: ["id", "body"]) { writer in
                try writer.append([Int32(1), "fine"])
                try writer.append([Int32(2), "nul\u{0}inside"])
            }
        }
        #expect(encoding?.message.contains("COPY row 2, column 2") == true)
        await expectPostgresError(.undefinedColumn) {
            _ = try await connection.copyIn(table: "t", columns: ["id", "nope\"; DROP TABLE t; --"]) { _ in }
        }
        await expectPostgresError(.misuse) { _ = try await connection.copyOut(query: "SELECT \(1)") { _ in } }
        #expect(try await connection.value(Int.self, "SELECT count(*) FROM t") == 0)
        #expect(try await connection.value(Int.self, "SELECT 1") == 1)
    }
}

@Suite struct StreamingTests {
    @Test func rowsArriveOneByOne() async throws {
        let (connection, _) = try await freshConnection()
        var sum = 0
        var count = 0
        for try await row in try await connection.stream("SELECT n FROM generate_series(1, \(50_000)) AS n") {
            sum += try row.decode(Int.self, at: 0)
            count += 1
        }
        #expect(count == 50_000 && sum == 50_000 * 50_001 / 2)
        #expect(try await connection.value(Int.self, "SELECT 2") == 2)
    }

    /// Single-row mode ends with its stream: the next statement, already prepared and sent in
    /// pipeline mode, gets all its rows in one result. (It once stayed on: that statement's
    /// rows came back one result each, and the caller got none of them.)
    @Test func theStatementAfterAStreamGetsAllItsRows() async throws {
        let (connection, _) = try await freshConnection()
        let sql: SQL = "SELECT n FROM generate_series(1, \(Int32(3))) AS n"
        #expect(try await connection.query(sql).count == 3) // prepared now
        for try await _ in try await connection.stream("SELECT n FROM generate_series(1, 5) AS n") {}
        let after = try await connection.query(sql)
        #expect(after.count == 3)
        #expect(try after.map { try $0.decode(Int32.self, at: 0) } == [1, 2, 3])
        // The same after a stream whose reader left early.
        for try await _ in try await connection.stream("SELECT n FROM generate_series(1, 100000) AS n") { break }
        #expect(try await connection.query(sql).count == 3)
    }

    @Test func leavingHalfwayCancelsCleanly() async throws {
        let (connection, database) = try await freshConnection()
        let observer = try await database.connect()
        let pid = await connection.backendPID
        var seen = 0
        for try await _ in try await connection.stream("SELECT n, pg_sleep(0) FROM generate_series(1, 10000000) AS n") {
            seen += 1
            if seen == 1000 { break }
        }
        #expect(seen == 1000)
        // The next statement cleans the stream up first; the server runs nothing for us after.
        #expect(try await connection.value(Int.self, "SELECT 7") == 7)
        #expect(try await observer.value(Int.self, "SELECT count(*) FROM pg_stat_activity WHERE pid = \(pid) AND state = 'active'") == 0)
        await observer.close()
    }

    @Test func errorsMidStreamAndMisuse() async throws {
        let (connection, _) = try await freshConnection()
        var rows = 0
        let error = await expectPostgresError(.divisionByZero) {
            for try await _ in try await connection.stream("SELECT 1 / (500 - n) FROM generate_series(1, 1000) AS n") { rows += 1 }
        }
        #expect(error?.sqlState == "22012" && rows < 500)
        #expect(try await connection.value(Int.self, "SELECT 3") == 3)

        let stream = try await connection.stream("SELECT n FROM generate_series(1, 10) AS n")
        var iterator = stream.makeAsyncIterator()
        _ = try await iterator.next()
        await expectPostgresError(.misuse) { _ = try await connection.query("SELECT 1") }
        while try await iterator.next() != nil {}
        #expect(try await connection.value(Int.self, "SELECT 4") == 4)
    }

    /// The reader stopped reading, the buffer filled, the server blocks sending rows
    /// (`ClientWrite`); then the reading task is cancelled. The server can answer the cancel
    /// only once the rows on the wire are taken off it: the connection must drain them, not
    /// wait for a reader that is gone (which once cost the connection after 5 s).
    @Test func cancellingAStalledReaderCancelsTheQueryAndKeepsTheConnection() async throws {
        let (connection, database) = try await freshConnection()
        let watcher = try await database.connect()
        let pid = await connection.backendPID
        let (gate, open) = AsyncStream<Void>.makeStream()
        let task = Task {
            var iterator = try await connection.stream("SELECT n, repeat('x', 200) FROM generate_series(1, 50000000) AS n").makeAsyncIterator()
            _ = try await iterator.next()
            for await _ in gate { break } // stalls: reads nothing more until cancelled
            while try await iterator.next() != nil {}
        }
        try await waitUntil {
            try await watcher.value(String.self, "SELECT coalesce(wait_event, '') FROM pg_stat_activity WHERE pid = \(pid)") == "ClientWrite"
        }
        task.cancel()
        open.finish()
        guard case .failure(let error as PostgresError) = await task.result else {
            Issue.record("the stream was not cancelled")
            return
        }
        #expect(error.kind == .queryCanceled, "\(error)")
        #expect(!connection.isBroken)
        #expect(try await connection.value(Int.self, "SELECT 6") == 6)
        await watcher.close()
    }

    @Test func cancellingTheConsumingTaskCancelsTheQuery() async throws {
        let (connection, _) = try await freshConnection()
        let counted = Mutex(0)
        let task = Task {
            var count = 0
            for try await _ in try await connection.stream("SELECT n, pg_sleep(0.001) FROM generate_series(1, 1000000) AS n") {
                count += 1
                counted.withLock { $0 = count }
            }
            return count
        }
        // Cancelled once rows are flowing.
        try await waitUntil { counted.withLock { $0 } >= 10 }
        task.cancel()
        guard case .failure(let error as PostgresError) = await task.result else {
            Issue.record("the stream was not cancelled")
            return
        }
        #expect(error.kind == .queryCanceled)
        #expect(try await connection.value(Int.self, "SELECT 5") == 5)
    }
}

final class ByteSink: @unchecked Sendable {
    private let lock = NSLock()
    private var storage: [UInt8] = []
    func append(_ chunk: UnsafeRawBufferPointer) { lock.withLock { storage.append(contentsOf: chunk) } }
    var bytes: [UInt8] { lock.withLock { storage } }
}

/// Regressions from the review of the fast paths.
@Suite struct FastPathStateTests {
    @Test func pipelinesWorkWithoutAStatementCacheAndWithMoreStatementsThanItHolds() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        for capacity in [0, 2] {
            var configuration = database.configuration
            configuration.statementCacheCapacity = capacity
            let connection = try await PostgresConnection.connect(configuration)
            try await connection.executeUnsafeRawSQL("DROP TABLE IF EXISTS a, b; CREATE TABLE a (v int); CREATE TABLE b (v int)")
            _ = try await connection.pipeline([
                "INSERT INTO a VALUES (\(Int32(1)))", "INSERT INTO b VALUES (\(Int32(2)))",
                "INSERT INTO a VALUES (\(Int32(3))) RETURNING v", "INSERT INTO b VALUES (\(Int32(4))) RETURNING v * 1",
                "SELECT \(Int32(5))",
            ])
            #expect(try await connection.value(String.self, "SELECT string_agg(v::text, ',' ORDER BY v) FROM a") == "1,3")
            #expect(try await connection.value(String.self, "SELECT string_agg(v::text, ',' ORDER BY v) FROM b") == "2,4")
            await connection.close()
        }
    }

    @Test func aPipelineRePreparesAfterAlterTable() async throws {
        let (connection, _) = try await freshConnection()
        try await connection.execute("CREATE TABLE t (a int)")
        _ = try await connection.pipeline(["INSERT INTO t VALUES (\(Int32(1)))", "SELECT * FROM t"])
        try await connection.execute("ALTER TABLE t ADD COLUMN b text DEFAULT 'x'")
        let results = try await connection.pipeline(["INSERT INTO t VALUES (\(Int32(2)))", "SELECT * FROM t"])
        #expect(results[1].columns.count == 2 && results[1].count == 2)
    }

    @Test func aFailedCopyLeavesTheConnectionReadyForEveryPath() async throws {
        let (connection, _) = try await freshConnection()
        try await connection.execute("CREATE TABLE t (id int PRIMARY KEY)")
        try await connection.execute("INSERT INTO t VALUES (1)")
        await expectPostgresError(.uniqueViolation) {
            _ = try await connection.copyIn(table: "t", columns: ["id"]) { writer in try writer.append([Int32(1)]) }
        }
        _ = try await connection.pipeline(["SELECT \(Int32(1))"])
        var rows = 0
        for try await _ in try await connection.stream("SELECT n FROM generate_series(1, 3) AS n") { rows += 1 }
        #expect(rows == 3)
    }

    @Test func streamsNeverIteratedOrUsedWronglyDoNotWedgeTheConnection() async throws {
        let (connection, _) = try await freshConnection()
        do {
            _ = try await connection.stream("SELECT n FROM generate_series(1, 100000) AS n")
        }
        #expect(try await connection.value(Int.self, "SELECT 6") == 6)
        // A transaction while a stream is still being read is refused, not silently truncating it.
        let stream = try await connection.stream("SELECT n FROM generate_series(1, 10) AS n")
        var iterator = stream.makeAsyncIterator()
        _ = try await iterator.next()
        await expectPostgresError(.misuse) { try await connection.transaction { _ in } }
        var rest = 0
        while try await iterator.next() != nil { rest += 1 }
        #expect(rest == 9)
        // COPY through a stream is refused, and the connection stays usable.
        try await connection.execute("CREATE TABLE c (v int)")
        await expectPostgresError(.misuse) {
            for try await _ in try await connection.stream("COPY c TO STDOUT") {}
        }
        #expect(try await connection.value(Int.self, "SELECT 8") == 8)
    }
}

import EmbeddedPostgres
import PostgresTestKit
