import Foundation
import Postgres
import Testing

@Suite struct SQLInterpolationTests {
    static let injectionCorpus = [
        "'); DROP TABLE t; --",
        "' OR '1'='1",
        "\"; DROP TABLE t; --",
        "\\'; DROP TABLE t; --",
        "back\\slash \\\\ double",
        "$1", "$2::text", "?", "%s", "E'\\x00'",
        "'' quoted ''", "line\nbreak\r\ttab",
        "/* comment */ -- dash",
        "😀'; SELECT pg_sleep(10); --",
    ]

    @Test func valuesAreParametersNeverText() {
        let name = "x'; DROP TABLE t; --"
        let query: SQL = "SELECT * FROM users WHERE name = \(name) AND age > \(3)"
        #expect(query.description == "SELECT * FROM users WHERE name = $1 AND age > $2")
        #expect(query.parameterCount == 2)
        #expect(!query.description.contains("DROP"))
    }

    /// `parameters` lists what `$1…$n` stand for, in order, fragments and NULLs included, so
    /// the statement can be handed to another client or EXPLAINed in psql.
    @Test func parametersAreWhatThePlaceholdersStandFor() throws {
        let child = UUID(), since = Date(timeIntervalSince1970: 1_780_000_000)
        let filter: SQL = "AND note = \("it's")"
        let sql: SQL = "SELECT \(child), \(since), \(nil as Int?) IS NULL, \(json: ["a": 1]) \(filter)"
        #expect(sql.description == "SELECT $1, $2, $3 IS NULL, $4 AND note = $5")
        #expect(sql.parameters.map(\.type) == [.uuid, .timestamptz, .int8, .jsonb, .text])
        #expect(sql.parameters.count == sql.parameterCount)
        let values = sql.parameters.map(\.value)
        #expect(values[0] as? UUID == child)
        #expect(values[1] as? Date == since)
        #expect(values[2] == nil)
        #expect(values[4] as? String == "it's")
        var bytes: [UInt8] = []
        try values[3]?.encode(into: &bytes)
        #expect(bytes == [1] + Array(#"{"a":1}"#.utf8)) // jsonb: version 1, then the text
    }

    @Test func injectionCorpusIsStoredVerbatimAndTheTableSurvives() async throws {
        do { let (connection, _) = try await freshConnection()
            try await connection.execute("CREATE TABLE t (id serial PRIMARY KEY, v text NOT NULL)")
            for value in Self.injectionCorpus {
                try await connection.execute("INSERT INTO t (v) VALUES (\(value))")
            }
            let stored = try await connection.query("SELECT v FROM t ORDER BY id").decodeColumn(String.self)
            #expect(stored == Self.injectionCorpus)
            for value in Self.injectionCorpus {
                #expect(try await connection.value(Int.self, "SELECT count(*) FROM t WHERE v = \(value)") == 1)
            }
            #expect(try await connection.value(Bool.self, "SELECT to_regclass('t') IS NOT NULL"))
        }
    }

    @Test func identifiersAreQuotedByLibpq() async throws {
        do { let (connection, _) = try await freshConnection()
            let table = "weird \"table\"; DROP TABLE x; --"
            let column = "Mixed Case"
            try await connection.execute("CREATE TABLE x (id int)")
            try await connection.execute("CREATE TABLE \(identifier: table) (\(identifier: column) text)")
            try await connection.execute("INSERT INTO \(identifier: "public", table) (\(identifier: column)) VALUES (\("ok"))")
            #expect(try await connection.value(String.self, "SELECT \(identifier: column) FROM \(identifier: table)") == "ok")
            #expect(try await connection.value(Bool.self, "SELECT to_regclass('x') IS NOT NULL"))
        }
    }

    @Test func fragmentsComposeAndParametersAreRenumbered() async throws {
        let low = 2
        let high = 5
        let range: SQL = "n BETWEEN \(low) AND \(high)"
        let odd: SQL = "n % \(2) = \(1)"
        var query: SQL = "SELECT n FROM generate_series(\(1), \(10)) AS n WHERE \(range) AND \(odd)"
        query.append("ORDER BY n")
        #expect(query.description == "SELECT n FROM generate_series($1, $2) AS n WHERE n BETWEEN $3 AND $4 AND n % $5 = $6 ORDER BY n")
        let joined = SQL.joined(["\(1)", "\(2)", "\(3)"], separator: " + ")
        #expect(joined.description == "$1 + $2 + $3")
        do { let (connection, _) = try await freshConnection()
            #expect(try await connection.query(query).decodeColumn(Int.self) == [3, 5])
            #expect(try await connection.value(Int.self, "SELECT \(joined)") == 6)
        }
    }

    @Test func rawSQLOnlyThroughTheUnsafeNamedAPI() async throws {
        do { let (connection, _) = try await freshConnection()
            let script = "CREATE TABLE a (id int); INSERT INTO a VALUES (1), (2); CREATE TABLE b (id int);"
            try await connection.executeUnsafeRawSQL(script)
            #expect(try await connection.value(Int.self, "SELECT count(*) FROM a") == 2)
            let raw = SQL(unsafeRawSQL: "SELECT count(*) FROM b")
            #expect(try await connection.value(Int.self, raw) == 0)
        }
    }
}
