import AsyncHTTPClient
import NIOHTTP1
import BabyBasicsStore
import Foundation
import NIOCore
import NIOPosix
import Postgres
import Testing

/// Writes over real HTTP: idempotent quick-logs under the client's retries, edits with a
/// revision, delete and restore, sleeps and bottles, and every refusal with its status.
@Suite struct EventRouteTests {
    static func diaper(_ id: UUID, _ contents: String = "both", minutes: Double = -5) -> String {
        #"{"id":"\#(id)","type":"diaper","start_time":"\#(iso(minutesFromNow: minutes))","time_zone":"UTC","data":{"contents":"\#(contents)"}}"#
    }

    @Test func aQuickLogIsCreatedOnceAndItsRetryGetsTheStoredEvent() async throws {
        let fixture = try await ServiceFixture.make()
        defer { Task { await fixture.close() } }
        let (_, child, token) = try await fixture.family()
        let id = UUID()
        let body = Self.diaper(id)
        let first = try await fixture.call(.POST, "/children/\(child.id)/events", token: token, json: body)
        #expect(first.status == 201)
        #expect(first.json["id"] as? String == id.uuidString)
        let retry = try await fixture.call(.POST, "/children/\(child.id)/events", token: token, json: body)
        #expect(retry.status == 200)
        #expect(retry.json["revision"] as? Int == 1)
        let read = try await fixture.call(.GET, "/children/\(child.id)/events/\(id)", token: token)
        #expect(read.status == 200)
        #expect((read.json["data"] as? [String: Any])?["contents"] as? String == "both")
        #expect(Set(read.json.keys).isSuperset(of: ["id", "child_id", "type", "start_time", "start_tz", "start_offset_seconds", "end_time", "data", "notes", "revision", "deleted_at"]))
        // The same id with other content: 409 with the stored version.
        let other = try await fixture.call(.POST, "/children/\(child.id)/events", token: token, json: Self.diaper(id, "wet"))
        #expect(other.status == 409)
        #expect((other.json["current"] as? [String: Any])?["id"] as? String == id.uuidString)
        #expect(try await fixture.eventCount() == 1)
    }

    /// The spec's offline client retries up to five times: five concurrent sends of one
    /// event store one row; exactly one is 201.
    @Test func fiveConcurrentRetriesStoreOneEvent() async throws {
        let fixture = try await ServiceFixture.make()
        defer { Task { await fixture.close() } }
        let (_, child, token) = try await fixture.family()
        let body = Self.diaper(UUID())
        let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<5 { group.addTask { try await fixture.call(.POST, "/children/\(child.id)/events", token: token, json: body).status } }
            return try await group.reduce(into: [Int]()) { $0.append($1) }
        }
        #expect(statuses.sorted() == [200, 200, 200, 200, 201])
        #expect(try await fixture.eventCount() == 1)
    }

    /// A POST whose response never reaches the client (it hangs up after sending): the retry
    /// finds the stored event (200), and there is one row.
    @Test func aRetryAfterALostResponseStoresOneEvent() async throws {
        let fixture = try await ServiceFixture.make()
        defer { Task { await fixture.close() } }
        let (_, child, token) = try await fixture.family()
        let body = Self.diaper(UUID())
        // Raw HTTP over a socket that is closed as soon as the request is out.
        let request = "POST /children/\(child.id)/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(token)\r\n"
            + "Content-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n" + body
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: "127.0.0.1", port: fixture.port).get()
        try await channel.writeAndFlush(ByteBuffer(string: request)).get()
        // The server stored it (or is about to): wait for the row, then hang up unanswered.
        for _ in 0..<500 where try await fixture.eventCount() == 0 { try await Task.sleep(for: .milliseconds(10)) }
        // (The server may have answered and closed first: the answer is never read either way.)
        try? await channel.close().get()
        let retry = try await fixture.call(.POST, "/children/\(child.id)/events", token: token, json: body)
        #expect(retry.status == 200)
        #expect(try await fixture.eventCount() == 1)
    }

    @Test func anEditNeedsTheRevisionSeenAndAConflictReturnsBothVersions() async throws {
        let fixture = try await ServiceFixture.make()
        defer { Task { await fixture.close() } }
        let (_, child, token) = try await fixture.family()
        let id = UUID()
        _ = try await fixture.call(.POST, "/children/\(child.id)/events", token: token, json: Self.diaper(id))
        let path = "/children/\(child.id)/events/\(id)"
        let edited = try await fixture.call(.PATCH, path, token: token, json: #"{"expected_revision":1,"notes":"after the bath"}"#)
        #expect(edited.status == 200)
        #expect(edited.json["revision"] as? Int == 2)
        #expect(edited.json["notes"] as? String == "after the bath")
        // A second device still at revision 1.
        let stale = try await fixture.call(.PATCH, path, token: token, json: #"{"expected_revision":1,"notes":"before the bath"}"#)
        #expect(stale.status == 409)
        #expect((stale.json["current"] as? [String: Any])?["notes"] as? String == "after the bath")
        #expect((stale.json["yours"] as? [String: Any])?["notes"] as? String == "before the bath")
        #expect(try await fixture.admin.fetchValue(String.self, "SELECT notes FROM events WHERE id = \(id)") == "after the bath")
    }

    /// Event ids are unique per child (migration 0022). A caregiver of two families, each with
    /// an event of the same id, edits and reads the one the path names, never the other.
    @Test func theSameEventIdInTwoFamiliesIsAddressedByItsChild() async throws {
        let fixture = try await ServiceFixture.make()
        defer { Task { await fixture.close() } }
        let (ana, childA, anaToken) = try await fixture.family("Ana")
        let (bo, childB, boToken) = try await fixture.family("Bo")
        let invite = try await fixture.store.invites.create(for: childB.id, as: bo.id)
        _ = try await fixture.store.invites.redeem(invite.code, as: ana.id)
        let id = UUID()
        #expect(try await fixture.call(.POST, "/children/\(childA.id)/events", token: anaToken, json: Self.diaper(id, "both")).status == 201)
        #expect(try await fixture.call(.POST, "/children/\(childB.id)/events", token: boToken, json: Self.diaper(id, "wet")).status == 201)
        for (child, note) in [(childA.id, "in A"), (childB.id, "in B")] {
            let edited = try await fixture.call(.PATCH, "/children/\(child)/events/\(id)", token: anaToken, json: #"{"expected_revision":1,"notes":"\#(note)"}"#)
            #expect(edited.status == 200, "\(edited.text)")
            #expect(edited.json["child_id"] as? String == child.uuidString)
        }
        #expect(try await fixture.admin.fetchValue(String.self, "SELECT notes FROM events WHERE id = \(id) AND child_id = \(childA.id)") == "in A")
        #expect(try await fixture.admin.fetchValue(String.self, "SELECT notes FROM events WHERE id = \(id) AND child_id = \(childB.id)") == "in B")
        let inA = try await fixture.call(.GET, "/children/\(childA.id)/events/\(id)", token: anaToken)
        let inB = try await fixture.call(.GET, "/children/\(childB.id)/events/\(id)", token: anaToken)
        #expect((inA.json["data"] as? [String: Any])?["contents"] as? String == "both")
        #expect((inB.json["data"] as? [String: Any])?["contents"] as? String == "wet")
        let deleted = try await fixture.call(.DELETE, "/children/\(childB.id)/events/\(id)", token: anaToken)
        #expect(deleted.status == 200)
        #expect(try await fixture.admin.fetchValue(Int.self, "SELECT count(*) FROM events WHERE id = \(id) AND deleted_at IS NOT NULL") == 1)
        #expect(try await fixture.admin.fetchValue(Bool.self, "SELECT deleted_at IS NULL FROM events WHERE id = \(id) AND child_id = \(childA.id)") == true)
    }

    @Test func deleteIsSoftAndRestoreBringsItBack() async throws {
        let fixture = try await ServiceFixture.make()
        defer { Task { await fixture.close() } }
        let (_, child, token) = try await fixture.family()
        let id = UUID()
        _ = try await fixture.call(.POST, "/children/\(child.id)/events", token: token, json: Self.diaper(id))
        let deleted = try await fixture.call(.DELETE, "/children/\(child.id)/events/\(id)?expected_revision=1", token: token)
        #expect(deleted.status == 200)
        #expect(deleted.json["deleted_at"] is String)
        #expect(try await fixture.call(.DELETE, "/children/\(child.id)/events/\(id)?expected_revision=abc", token: token).status == 422)
        let restored = try await fixture.call(.POST, "/children/\(child.id)/events/\(id)/restore", token: token)
        #expect(restored.status == 200)
        #expect(restored.json["deleted_at"] is NSNull)
        #expect(try await fixture.eventCount() == 1)
    }

    @Test func sleepsStartOnceAndEnd() async throws {
        let fixture = try await ServiceFixture.make()
        defer { Task { await fixture.close() } }
        let (_, child, token) = try await fixture.family()
        let started = try await fixture.call(.POST, "/children/\(child.id)/sleep/start", token: token, json: #"{"at":"\#(iso(minutesFromNow: -90))","time_zone":"UTC"}"#)
        #expect(started.status == 201)
        // A second tap while one runs: 409 with the running one (PRD §12).
        let again = try await fixture.call(.POST, "/children/\(child.id)/sleep/start", token: token, json: #"{"time_zone":"UTC"}"#)
        #expect(again.status == 409)
        #expect(again.json["error"] as? String == "sleep_already_active")
        #expect((again.json["current"] as? [String: Any])?["id"] as? String == started.json["id"] as? String)
        let ended = try await fixture.call(.POST, "/children/\(child.id)/sleep/end", token: token, json: #"{"time_zone":"UTC"}"#)
        #expect(ended.status == 200)
        #expect(ended.json["minutes"] as? Int == 90)
        #expect(try await fixture.call(.POST, "/children/\(child.id)/sleep/end", token: token, json: "{}").status == 409)
    }

    @Test func aBottleIsPreparedFedAndFinished() async throws {
        let fixture = try await ServiceFixture.make()
        defer { Task { await fixture.close() } }
        let (_, child, token) = try await fixture.family()
        let prepared = try await fixture.call(.POST, "/children/\(child.id)/bottles", token: token, json: #"{"prepared_ml":150,"at":"\#(iso(minutesFromNow: -30))","time_zone":"UTC"}"#)
        #expect(prepared.status == 201)
        let bottle = try #require(prepared.json["id"] as? String)
        #expect(try await fixture.call(.POST, "/children/\(child.id)/bottles", token: token, json: #"{"time_zone":"UTC"}"#).json["field"] as? String == "prepared_ml")
        let started = try await fixture.call(.POST, "/children/\(child.id)/bottles/\(bottle)/start", token: token, json: #"{"at":"\#(iso(minutesFromNow: -20))"}"#)
        #expect(started.status == 200)
        let finished = try await fixture.call(.POST, "/children/\(child.id)/bottles/\(bottle)/finish", token: token, json: #"{"remaining_ml":30,"time_zone":"UTC"}"#)
        #expect(finished.status == 200)
        #expect(finished.json["consumed_ml"] as? Double == 120)
        #expect((finished.json["event"] as? [String: Any]).flatMap { $0["data"] as? [String: Any] }?["amount_ml"] as? Double == 120)
        let discarded = try await fixture.call(.POST, "/children/\(child.id)/bottles", token: token, json: #"{"prepared_ml":90,"time_zone":"UTC"}"#)
        let other = try #require(discarded.json["id"] as? String)
        #expect(try await fixture.call(.POST, "/children/\(child.id)/bottles/\(other)/discard", token: token, json: #"{"time_zone":"UTC"}"#).status == 200)
    }

    /// Invalid input is 422 naming the field, and writes nothing.
    @Test func invalidInputIs422NamingTheField() async throws {
        let fixture = try await ServiceFixture.make()
        defer { Task { await fixture.close() } }
        let (_, child, token) = try await fixture.family()
        let cases: [(String, String)] = [
            (#"{"id":"\#(UUID())","type":"diaper","start_time":"\#(iso(minutesFromNow: -5))","time_zone":"Mars/Olympus","data":{"contents":"wet"}}"#, "time_zone"),
            (#"{"id":"\#(UUID())","type":"diaper","start_time":"yesterday","time_zone":"UTC","data":{"contents":"wet"}}"#, "start_time"),
            (#"{"id":"\#(UUID())","type":"diaper","time_zone":"UTC","data":{"contents":"wet"}}"#, "start_time"),
            (#"{"id":"\#(UUID())","type":"diaper","start_time":"\#(iso(minutesFromNow: -5))","time_zone":"UTC","data":{"contents":"green"}}"#, "data.contents"),
            (#"{"id":"\#(UUID())","type":"feeding","start_time":"\#(iso(minutesFromNow: -5))","time_zone":"UTC","data":{"kind":"breast"}}"#, "data.started_side"),
            (#"{"id":"\#(UUID())","type":"sleep","start_time":"\#(iso(minutesFromNow: -5))","end_time":"\#(iso(minutesFromNow: -10))","time_zone":"UTC"}"#, "end_time"),
            (#"{"id":"not-a-uuid","type":"diaper","start_time":"\#(iso(minutesFromNow: -5))","time_zone":"UTC","data":{"contents":"wet"}}"#, "id"),
            (#"{"id":"\#(UUID())","type":"bath","start_time":"\#(iso(minutesFromNow: -5))","time_zone":"UTC"}"#, "type"),
        ]
        for (body, field) in cases {
            let reply = try await fixture.call(.POST, "/children/\(child.id)/events", token: token, json: body)
            #expect(reply.status == 422, "\(field): \(reply.text)")
            #expect(reply.json["field"] as? String == field, "\(reply.text)")
        }
        #expect(try await fixture.eventCount() == 0)
    }
}
