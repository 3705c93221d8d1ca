import AsyncHTTPClient
import NIOHTTP1
import BabyBasicsStore
import Foundation
import Testing

/// The dashboard spec's test cases (seed 000, "Test Cases: Dashboard"), over real HTTP, with
/// the spec's JSON field names.
@Suite struct DashboardRouteTests {
    /// Spec TC 1 (empty dashboard) and the field names the spec gives the client.
    @Test func anEmptyDashboardHasEveryCardNullAndCountsZero() async throws {
        let fixture = try await ServiceFixture.make()
        defer { Task { await fixture.close() } }
        let (_, child, token) = try await fixture.family()
        let reply = try await fixture.call(.GET, "/children/\(child.id)/dashboard", token: token)
        #expect(reply.status == 200)
        let json = reply.json
        #expect(Set(json.keys) == ["last_feeding", "last_diaper", "last_sleep", "active_sleep", "suggested_side", "today"])
        for card in ["last_feeding", "last_diaper", "last_sleep", "active_sleep", "suggested_side"] {
            #expect(json[card] is NSNull, "\(card) should be null")
        }
        let today = try #require(json["today"] as? [String: Any])
        #expect(Set(today.keys) == ["from", "to", "feeds", "pee", "poop", "sleep_minutes", "notes"])
        for count in ["feeds", "pee", "poop", "sleep_minutes", "notes"] { #expect(today[count] as? Int == 0) }
        #expect(reply.headers["Content-Type"].first?.hasPrefix("application/json") == true)
    }

    /// Spec TC 7, 8, 10 and 11: side indicators, the suggested side, today's counts; the
    /// active sleep as `{id, start_time}`; a bottle's `amount_ml`.
    ///
    /// The events are from the last two hours, so the child's zone is one where "today" began
    /// at least three hours ago (in UTC the test failed from 00:00 to 00:50).
    @Test func aFullDayShowsTheSpecsCards() async throws {
        let fixture = try await ServiceFixture.make()
        defer { Task { await fixture.close() } }
        let (_, child, token) = try await fixture.family(zone: try zoneFarFromMidnight())
        func post(_ body: String) async throws -> Int {
            try await fixture.call(.POST, "/children/\(child.id)/events", token: token, json: body).status
        }
        // 3 feedings, 2 pee diapers and 1 "both": "3 feeds · 3 pee · 1 poop" (TC 11).
        #expect(try await post(#"{"id":"\#(UUID())","type":"feeding","start_time":"\#(iso(minutesFromNow: -50))","time_zone":"UTC","data":{"kind":"bottle","amount_ml":120}}"#) == 201)
        #expect(try await post(#"{"id":"\#(UUID())","type":"feeding","start_time":"\#(iso(minutesFromNow: -40))","time_zone":"UTC","data":{"kind":"breast","started_side":"right","both_sides":false}}"#) == 201)
        #expect(try await post(#"{"id":"\#(UUID())","type":"feeding","start_time":"\#(iso(minutesFromNow: -30))","time_zone":"UTC","data":{"kind":"breast","started_side":"left","both_sides":true}}"#) == 201)
        for contents in ["wet", "wet", "both"] {
            #expect(try await post(#"{"id":"\#(UUID())","type":"diaper","start_time":"\#(iso(minutesFromNow: -20))","time_zone":"UTC","data":{"contents":"\#(contents)"}}"#) == 201)
        }
        // A finished nap (the last sleep), then one running now (the active sleep).
        #expect(try await post(#"{"id":"\#(UUID())","type":"sleep","start_time":"\#(iso(minutesFromNow: -120))","end_time":"\#(iso(minutesFromNow: -75))","time_zone":"UTC"}"#) == 201)
        let sleep = try await fixture.call(.POST, "/children/\(child.id)/sleep/start", token: token, json: #"{"at":"\#(iso(minutesFromNow: -5))","time_zone":"UTC"}"#)
        #expect(sleep.status == 201)

        let json = try await fixture.call(.GET, "/children/\(child.id)/dashboard", token: token).json
        let feeding = try #require(json["last_feeding"] as? [String: Any])
        #expect(feeding["started_side"] as? String == "left")
        #expect(feeding["both_sides"] as? Bool == true)
        #expect(feeding["side_indicator"] as? String == "L+R")      // TC 8
        #expect(feeding.keys.contains("amount_ml"))
        #expect(json["suggested_side"] as? String == "right")         // TC 10: opposite of the last breast side
        let active = try #require(json["active_sleep"] as? [String: Any])
        #expect(Set(active.keys) == ["id", "start_time"])
        #expect(active["id"] as? String == sleep.json["id"] as? String)
        let nap = try #require(json["last_sleep"] as? [String: Any])
        #expect(Set(nap.keys) == ["id", "start_time", "end_time", "minutes"])
        #expect(nap["minutes"] as? Int == 45)
        let diaper = try #require(json["last_diaper"] as? [String: Any])
        #expect(diaper["contents"] as? String == "both")
        let today = try #require(json["today"] as? [String: Any])
        #expect(today["feeds"] as? Int == 3)
        #expect(today["pee"] as? Int == 3)
        #expect(today["poop"] as? Int == 1)
    }

    /// Spec TC 9: the last feed a bottle: no side indicator, the amount in mL.
    @Test func aBottleHasNoSideIndicatorAndItsAmount() async throws {
        let fixture = try await ServiceFixture.make()
        defer { Task { await fixture.close() } }
        let (_, child, token) = try await fixture.family(zone: "UTC")
        let body = #"{"id":"\#(UUID())","type":"feeding","start_time":"\#(iso(minutesFromNow: -10))","time_zone":"UTC","data":{"kind":"bottle","amount_ml":120}}"#
        #expect(try await fixture.call(.POST, "/children/\(child.id)/events", token: token, json: body).status == 201)
        let feeding = try #require(try await fixture.call(.GET, "/children/\(child.id)/dashboard", token: token).json["last_feeding"] as? [String: Any])
        #expect(feeding["type"] as? String == "bottle")
        #expect(feeding["side_indicator"] is NSNull)
        #expect(feeding["amount_ml"] as? Double == 120)
    }

    /// The timeline of `date=today` in the child's zone, newest first (spec: "Timeline sorting").
    @Test func todaysTimelineIsNewestFirst() async throws {
        let fixture = try await ServiceFixture.make()
        defer { Task { await fixture.close() } }
        let (_, child, token) = try await fixture.family(zone: try zoneFarFromMidnight())
        var ids: [String] = []
        for minutes in [-30.0, -20, -10] {
            let id = UUID().uuidString
            ids.append(id)
            _ = try await fixture.call(.POST, "/children/\(child.id)/events", token: token,
                                       json: #"{"id":"\#(id)","type":"diaper","start_time":"\#(iso(minutesFromNow: minutes))","time_zone":"UTC","data":{"contents":"wet"}}"#)
        }
        let reply = try await fixture.call(.GET, "/children/\(child.id)/timeline?date=today", token: token)
        #expect(reply.status == 200)
        let events = try #require(reply.json["events"] as? [[String: Any]])
        #expect(events.compactMap { $0["id"] as? String } == ids.reversed())
        #expect(try await fixture.call(.GET, "/children/\(child.id)/timeline?date=2026-13-01", token: token).json["field"] as? String == "date")
    }
}
