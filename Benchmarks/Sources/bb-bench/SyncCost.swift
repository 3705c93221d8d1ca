import Foundation
import Postgres

extension Runner {
    /// What the per-child sync counter (migration 0011) costs a write, against the cost model
    /// of the cursor it replaced, measured side by side in this run: the same triggers, with
    /// `sync_next_seq` swapped for what the old trigger did (`pg_current_xact_id()` and a
    /// global `nextval`, no child row lock, no NOTIFY).
    mutating func syncCost(_ clients: Clients) async throws {
        let count = quick ? 2000 : 10_000
        let copyCount = quick ? 20_000 : 100_000
        let families = try await DomainData.families(clients.ours, count: 1, tag: "synccost")
        let child = families[0].child, user = families[0].user
        let current = try await clients.ours.fetchValue(String.self, "SELECT pg_get_functiondef('sync_next_seq(uuid)'::regprocedure)") ?? ""
        try await clients.ours.executeUnsafeRawSQL("CREATE SEQUENCE bench_v1_change_seq")
        let v1 = """
            CREATE OR REPLACE FUNCTION public.sync_next_seq(p_child_id uuid) RETURNS bigint LANGUAGE sql
            AS $$ SELECT nextval('bench_v1_change_seq') + 0 * (pg_current_xact_id()::text::numeric)::bigint $$
            """
        var inserts: [String: Measurement] = ["v2": Measurement(count: count), "v1": Measurement(count: count)]
        var copies: [String: Measurement] = ["v2": Measurement(count: copyCount), "v1": Measurement(count: copyCount)]
        for rep in 0..<3 {
            for variant in rep % 2 == 0 ? ["v2", "v1"] : ["v1", "v2"] {
                log("sync cost (\(variant)), repetition \(rep + 1)/3")
                try await clients.ours.executeUnsafeRawSQL(variant == "v1" ? v1 : current)
                inserts[variant]?.runs.append(try await timed { try await clients.insertOurs(count, child: child, user: user, mode: "sequential") }.1)
                try await clients.ours.executeUnsafeRawSQL("TRUNCATE events, event_history, sync_tombstones")
                copies[variant]?.runs.append(try await timed { try await clients.insertOurs(copyCount, child: child, user: user, mode: "copy") }.1)
                try await clients.ours.executeUnsafeRawSQL("TRUNCATE events, event_history, sync_tombstones")
            }
        }
        try await clients.ours.executeUnsafeRawSQL(current)
        try await clients.ours.executeUnsafeRawSQL("DROP SEQUENCE bench_v1_change_seq")
        for (name, measured) in [("\(count) single-statement event inserts", inserts), ("COPY of \(copyCount) events, triggers on", copies)] {
            guard let ours = measured["v2"], let old = measured["v1"], let a = ours.median, let b = old.median else { continue }
            results.append(CaseResult(
                name: "Sync counter cost: \(name)", unit: "s", ours: ours,
                goal: "≤ 1.10× the old cursor's trigger (\(duration(b)) in this run; here \(String(format: "%.2f", a / b))×)",
                goalMet: a / b <= 1.10,
                note: "same triggers and indexes; sync_next_seq swapped for the old cost (xid + global sequence)"))
        }
    }
}
