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
