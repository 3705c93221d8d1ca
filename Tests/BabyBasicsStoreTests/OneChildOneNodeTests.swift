@testable import BabyBasicsStore
import Foundation
import Postgres
import PostgresTestKit
import Testing

/// Each statement about one child names it by value in every table it reads, so on a Citus
/// cluster it goes whole to the one node that holds the child: EXPLAIN shows one task and no
/// subplan. On one
/// server an index serves each read of `events` (with sequential scans priced out, a read that
/// no index can serve still shows `Seq Scan on events`; at realistic sizes the planner's own
/// choice is tested in IndexUsageTests and the dashboard and feed suites).
@Suite struct OneChildOneNodeTests {
    @Test func everyChildScopedStatementIsOneTask() async throws {
        let fixture = try await StoreFixture.make()
        let (user, child) = try await fixture.family(zone: "UTC")
        for hour in 0..<24 { _ = try await fixture.log(child, user, .diaper(.wet), at("2026-11-20 \(hour < 10 ? "0" : "")\(hour):00", "UTC")) }
        try await fixture.admin.execute("ANALYZE")
        let now = at("2026-11-20 23:30", "UTC").utc
        let draft = EventDraft(childID: child.id, payload: .diaper(.dirty), start: at("2026-11-20 23:00", "UTC"))
        let statements: [(String, SQL)] = [
            ("dashboard", Dashboard.statement(child: child.id, now: now, as: user.id)),
            ("timeline", Timeline.statement(child: child.id, day: PostgresDate(year: 2026, month: 11, day: 20), now: now, as: user.id)),
            ("logging an event", EventRepository.recordStatement(draft, as: user.id)),
            ("a logged event's retry", EventRepository.recordedStatement(draft, as: user.id)),
            ("the feed's events of the child", SyncPageBuilder.events(of: child.id, after: 0, through: 1_000, limit: 500)),
            ("the feed's caregivers and tombstones of the child", SyncPageBuilder.family(of: child.id, after: 0, through: 1_000, limit: 500)),
        ]
        let citus = TestCitus.fromEnvironment() != nil
        for (name, statement) in statements {
            let plan = try await fixture.admin.transaction { connection in
                if !citus { try await connection.execute("SET LOCAL enable_seqscan = off") }
                return try await connection.query("EXPLAIN \(statement)").decodeColumn(String.self).joined(separator: "\n")
            }
            if citus {
                // One task, and nothing run before it: a subplan is another round trip, and its
                // result goes to every node, which makes a write a two-phase commit.
                #expect(plan.contains("Task Count: 1") && !plan.contains("Distributed Subplan"), "\(name) is not one task:\n\(plan)")
            } else {
                #expect(!plan.contains("Seq Scan on events"), "\(name) reads all of events:\n\(plan)")
            }
        }
        // EXPLAIN ran the insert's plan, not the insert.
        #expect(try await fixture.admin.fetchValue(Int.self, "SELECT count(*)::int FROM events WHERE id = \(draft.id)") == 0)
    }
}
