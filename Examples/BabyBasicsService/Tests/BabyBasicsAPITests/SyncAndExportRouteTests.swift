import AsyncHTTPClient
import NIOHTTP1
import BabyBasicsStore
import Foundation
import Testing

@Suite struct SyncAndExportRouteTests {
    @Test func theSyncFeedPagesAndItsCursorComesBack() async throws {
        let fixture = try await ServiceFixture.make()
        defer { Task { await fixture.close() } }
        let (_, child, token) = try await fixture.family()
        let id = UUID()
        _ = try await fixture.call(.POST, "/children/\(child.id)/events", token: token, json: EventRouteTests.diaper(id))
        let first = try await fixture.call(.GET, "/sync", token: token)
        #expect(first.status == 200)
        let events = try #require(first.json["events"] as? [[String: Any]])
        #expect(events.compactMap { $0["id"] as? String } == [id.uuidString])
        #expect((first.json["children"] as? [[String: Any]])?.count == 1)
        let cursor = try #require(first.json["next_cursor"] as? String)
        // Nothing new after the cursor; a second event comes on the next page.
        let quiet = try await fixture.call(.GET, "/sync?cursor=\(cursor.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? cursor)", token: token)
        #expect((quiet.json["events"] as? [Any])?.isEmpty == true)
        let second = UUID()
        _ = try await fixture.call(.POST, "/children/\(child.id)/events", token: token, json: EventRouteTests.diaper(second))
        let next = try await fixture.call(.GET, "/sync?cursor=\(cursor.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? cursor)", token: token)
        #expect((next.json["events"] as? [[String: Any]])?.compactMap { $0["id"] as? String } == [second.uuidString])
        // A damaged cursor or limit: 422 naming it.
        #expect(try await fixture.call(.GET, "/sync?cursor=garbage", token: token).json["field"] as? String == "cursor")
        #expect(try await fixture.call(.GET, "/sync?limit=many", token: token).json["field"] as? String == "limit")
    }

    @Test func theExportIsStreamedAsCSV() async throws {
        let fixture = try await ServiceFixture.make()
        defer { Task { await fixture.close() } }
        let (_, child, token) = try await fixture.family()
        for minutes in stride(from: -600.0, to: -5, by: 5) {
            _ = try await fixture.call(.POST, "/children/\(child.id)/events", token: token, json: EventRouteTests.diaper(UUID(), minutes: minutes))
        }
        let reply = try await fixture.call(.GET, "/children/\(child.id)/export.csv?range=7d", token: token)
        #expect(reply.status == 200)
        #expect(reply.headers["Content-Type"].first?.hasPrefix("text/csv") == true)
        let lines = reply.text.split(separator: "\r\n")
        #expect(lines.first.map(String.init) == EventRepository.csvHeader)
        #expect(lines.count == 1 + 119)
        #expect(try await fixture.call(.GET, "/children/\(child.id)/export.csv?range=forever", token: token).json["field"] as? String == "range")
    }
}
