import Foundation
@testable import Postgres
import Testing

@Suite struct RowDecodingTests {
    struct Child: Decodable, Sendable, Equatable {
        enum Unit: String, Codable { case oz, ml }
        struct Settings: Codable, Equatable { var unit: Unit }
        var id: UUID
        var name: String
        var birthDate: PostgresDate
        var dayStartTime: PostgresTime
        var primaryCaregiverID: UUID
        var settings: Settings
        var unit: Unit
        var nickname: String?
        var createdAt: Date
    }

    static let childQuery: SQL = """
        SELECT 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid AS id, 'Zoë' AS name, '2026-03-08'::date AS birth_date,
               '06:00'::time AS day_start_time, 'b0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid AS primary_caregiver_id,
               '{"unit": "ml"}'::jsonb AS settings, 'oz' AS unit, NULL::text AS nickname,
               '2026-03-08 10:00:00+00'::timestamptz AS created_at
        """

    @Test func structsFromSnakeCaseColumns() async throws {
        do { let (connection, _) = try await freshConnection()
            let child = try #require(try await connection.fetchOne(Child.self, Self.childQuery))
            #expect(child.name == "Zoë")
            #expect(child.birthDate == PostgresDate(year: 2026, month: 3, day: 8))
            #expect(child.dayStartTime == PostgresTime(hour: 6, minute: 0))
            #expect(child.primaryCaregiverID == UUID(uuidString: "b0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"))
            #expect(child.settings == .init(unit: .ml))
            #expect(child.unit == .oz)
            #expect(child.nickname == nil)
            #expect(child.createdAt == Date(timeIntervalSince1970: 1_772_964_000))
        }
    }

    @Test func byNameByIndexAndIntoTuples() async throws {
        do { let (connection, _) = try await freshConnection()
            let rows = try await connection.query("SELECT 1 AS one, 'two' AS two, NULL::int8 AS three")
            let row = try #require(rows.first)
            #expect(try row.decode(Int.self, at: 0) == 1)
            #expect(try row.decode(String.self, column: "two") == "two")
            let two: String = try row["two"]
            let one: Int32 = try row[0]
            #expect(two == "two" && one == 1)
            let (a, b, c) = try row.decode((Int, String, Int?).self)
            #expect(a == 1 && b == "two" && c == nil)
            #expect(rows.columns.map(\.name) == ["one", "two", "three"])
            #expect(rows.commandTag == "SELECT 1")
        }
    }

    /// By name, narrow results are scanned, and wide ones scanned for their first few names,
    /// then indexed: each way finds the first of two columns with the same name, and says which
    /// columns exist when the name is not one.
    @Test(arguments: [3, 40])
    func byNameInNarrowAndWideResults(_ width: Int) async throws {
        do { let (connection, _) = try await freshConnection()
            let columns = (0..<width).map { "\($0) AS c\($0)" }.joined(separator: ", ")
            let rows = try await connection.query(SQL(unsafeRawSQL: "SELECT \(columns), 'first' AS dup, 'second' AS dup"))
            let row = try #require(rows.first)
            // Past the scans a wide result makes before it builds its index, every answer again.
            for round in 0..<(ResultStorage.scansBeforeIndex / 4 + 2) {
                let column = width - 1 - round % width
                #expect(try row.decode(Int.self, column: "c\(column)") == column)
                #expect(try row.decode(String.self, column: "dup") == "first")
                #expect(row.columnIndex("dup") == width)
                #expect(row.columnIndex("nope") == nil)
                #expect(throws: PostgresDecodingError.self) { try row.decode(Int.self, column: "nope") }
            }
            #expect(rows.storage.hasNameIndex == (width > 16))
        }
    }

    /// Where each property is, is remembered per row type between results (PropertyColumns);
    /// results of one type in other layouts (other order, a column missing, the property's
    /// exact name, a wide result) each decode right, in turn and from many tasks at once.
    @Test func oneTypeFromResultsOfDifferentLayouts() async throws {
        struct Visit: Decodable, Sendable, Equatable { var childID: Int; var note: String?; var loggedAt: Int }
        do { let (connection, _) = try await freshConnection()
            let padding = (0..<30).map { "\($0) AS pad\($0)" }.joined(separator: ", ")
            let layouts: [(SQL, [Visit])] = [
                ("SELECT n AS child_id, 'a' || n AS note, 10 * n AS logged_at FROM generate_series(1, 3) AS n",
                 (1...3).map { Visit(childID: $0, note: "a\($0)", loggedAt: 10 * $0) }),
                ("SELECT 20 AS logged_at, 2 AS child_id", [Visit(childID: 2, note: nil, loggedAt: 20)]),
                ("SELECT 3 AS \"childID\", 'c' AS note, 30 AS logged_at, 'x' AS child_id", [Visit(childID: 3, note: "c", loggedAt: 30)]),
                (SQL(unsafeRawSQL: "SELECT \(padding), 40 AS logged_at, NULL::text AS note, 4 AS child_id"), [Visit(childID: 4, note: nil, loggedAt: 40)]),
            ]
            var results: [(PostgresRows, [Visit])] = []
            for (sql, expected) in layouts { results.append((try await connection.query(sql), expected)) }
            for _ in 0..<2 {
                for (rows, expected) in results { #expect(try rows.decode(as: Visit.self) == expected) }
            }
            let all = results
            try await withThrowingTaskGroup(of: Void.self) { group in
                for task in 0..<16 {
                    group.addTask {
                        for round in 0..<50 {
                            let (rows, expected) = all[(task + round) % all.count]
                            let decoded = try rows.decode(as: Visit.self)
                            #expect(decoded == expected)
                        }
                    }
                }
                try await group.waitForAll()
            }
            struct Strict: Decodable { var childID: Int; var missing: Int }
            #expect(throws: PostgresDecodingError.self) { try results[0].0.decode(as: Strict.self) }
        }
    }

    @Test func nullIntoNonOptionalThrowsNamingColumnAndTypes() async throws {
        do { let (connection, _) = try await freshConnection()
            let row = try #require(try await connection.query("SELECT NULL::int8 AS missing").first)
            do {
                _ = try row.decode(Int.self, column: "missing")
                Issue.record("NULL decoded into Int")
            } catch let error as PostgresDecodingError {
                #expect(error.column == "missing")
                #expect(error.postgresType == .int8)
                #expect(error.swiftType == "Int")
                #expect(error.description.contains("NULL"))
            }
            struct Needs: Decodable { var missing: Int }
            #expect(throws: PostgresDecodingError.self) { try row.decode(as: Needs.self) }
            #expect(try row.decode(Int?.self, column: "missing") == nil)
        }
    }

    @Test func wrongTypeAndMissingColumnSayWhat() async throws {
        do { let (connection, _) = try await freshConnection()
            let row = try #require(try await connection.query("SELECT 'Zoë'::text AS name").first)
            do {
                _ = try row.decode(UUID.self, column: "name")
                Issue.record("text decoded as UUID")
            } catch let error as PostgresDecodingError {
                #expect(error.description.contains("name") && error.description.contains("text") && error.description.contains("UUID"))
            }
            do {
                _ = try row.decode(String.self, column: "nope")
                Issue.record("a missing column decoded")
            } catch let error as PostgresDecodingError {
                #expect(error.reason.contains("name"))
            }
            #expect(throws: PostgresDecodingError.self) { try row.decode(Int.self, at: 5) }
            struct Missing: Decodable { var name: String; var age: Int }
            #expect(throws: PostgresDecodingError.self) { try row.decode(as: Missing.self) }
        }
    }
}
