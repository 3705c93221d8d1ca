@testable import BabyBasicsStore
import Foundation
import Postgres
import Testing

/// `Event.Row` reads `Event.columns` by position: the layout is checked by name, so a query
/// that selects other columns, or them in another order, is a decoding error naming the
/// column, never a value read from the wrong column.
@Suite struct EventRowTests {
    @Test func readsEventColumnsWhereverTheyStart() async throws {
        let fixture = try await StoreFixture.make()
        let (alice, child) = try await fixture.family(zone: "Europe/Paris")
        let logged = try await fixture.log(child, alice, .feeding(.breast(startedSide: .left, bothSides: true)),
                                           at("2026-03-29 01:30", "Europe/Paris"), end: at("2026-03-29 03:10", "Europe/Paris"), notes: "DST night")
        let plain = try #require(try await fixture.admin.query("SELECT \(Event.columns) FROM events e").first)
        #expect(try Event.Row(plain).event() == logged)
        let prefixed = try await fixture.admin.query("SELECT 1 AS x, now() AS at, \(Event.columns), 'tail' AS y FROM events e")
        #expect(try Event.Row.start(in: prefixed.columns) == 2)
        #expect(try Event.Row.all(prefixed).map { try $0.event() } == [logged])
    }

    @Test func aQueryWithAnotherLayoutIsADecodingErrorNamingTheColumn() async throws {
        let fixture = try await StoreFixture.make()
        let (alice, child) = try await fixture.family(zone: "UTC")
        _ = try await fixture.log(child, alice, .diaper(.wet), at("2026-11-20 08:00", "UTC"))
        let cases: [(SQL, String)] = [
            ("SELECT e.child_id, e.id, e.event_type FROM events e", "child_id"),        // not after id
            ("SELECT e.id, e.child_id, e.event_type, e.start_time FROM events e", "start_tz"),   // cut short
            ("SELECT e.child_id, e.revision FROM events e", "id"),                      // no id at all
        ]
        for (sql, column) in cases {
            let row = try #require(try await fixture.admin.query(sql).first)
            let error = #expect(throws: PostgresDecodingError.self, "\(sql)") { try Event.Row(row) }
            #expect(error?.column == column, "\(String(describing: error))")
        }
    }
}

/// `Dashboard.Row` reads the dashboard's one row by position, after the same check by name.
@Suite struct DashboardRowTests {
    @Test func theDashboardsOwnStatementIsReadAndAnotherLayoutIsRefused() async throws {
        let fixture = try await StoreFixture.make()
        let (alice, child) = try await fixture.family(zone: "UTC")
        try await fixture.log(child, alice, .diaper(.both), at("2026-11-20 08:00", "UTC"))
        try await fixture.log(child, alice, .feeding(.breast(startedSide: .right, bothSides: false)), at("2026-11-20 09:00", "UTC"))
        let now = at("2026-11-20 10:00", "UTC").utc
        let statement = Dashboard.statement(child: child.id, now: now, as: alice.id)
        let result = try await fixture.admin.query(statement)
        #expect(result.columns.map(\.name) == Dashboard.Row.columnNames)
        let dashboard = try Dashboard.Row(try #require(result.first)).dashboard(now: now)
        #expect(dashboard.lastDiaper?.contents == .both && dashboard.suggestedSide == .left && dashboard.today.feeds == 1)

        let names = Dashboard.Row.columnNames
        let swapped = names.enumerated().map { index, name in index == 4 ? names[3] : index == 3 ? names[4] : name }
        let cases: [(String, String)] = [
            (swapped.map { "NULL AS \($0)" }.joined(separator: ", "), names[3]),       // two columns in each other's place
            (names.dropLast().map { "NULL AS \($0)" }.joined(separator: ", "), "sleep_seconds"), // one short
        ]
        for (select, column) in cases {
            let row = try #require(try await fixture.admin.query(SQL(unsafeRawSQL: "SELECT " + select)).first)
            let error = #expect(throws: PostgresDecodingError.self, "\(select)") { try Dashboard.Row(row) }
            #expect(error?.column == column, "\(String(describing: error))")
        }
        // The right names, and a value that is not one of the type's, say which column.
        let values = ["day_from": "now()", "day_to": "now()", "feeds": "0::int8", "pee": "0::int8", "poop": "0::int8", "notes": "0::int8",
                      "sleep_seconds": "0::float8", "diaper_contents": "'soggy'"]
        let typed = names.map { "\(values[$0] ?? "NULL") AS \($0)" }.joined(separator: ", ")
        let row = try #require(try await fixture.admin.query(SQL(unsafeRawSQL: "SELECT " + typed)).first)
        let error = #expect(throws: PostgresDecodingError.self) { try Dashboard.Row(row) }
        #expect(error?.column == "diaper_contents", "\(String(describing: error))")
    }
}
