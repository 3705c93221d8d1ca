import AsyncHTTPClient
import NIOHTTP1
import BabyBasicsAPI
import BabyBasicsStore
import Foundation
import JWTKit
import Postgres
import ServiceLifecycle
import Testing

/// Who may call what: a verified token or 401; another family's child is 404 on every route;
/// a primary-only call is 403 for a caregiver; a busy database is 503 with Retry-After.
@Suite struct AccessRouteTests {
    @Test func theActingUserComesOnlyFromAVerifiedToken() async throws {
        let fixture = try await ServiceFixture.make()
        defer { Task { await fixture.close() } }
        let (user, child, token) = try await fixture.family()
        let path = "/children/\(child.id)/dashboard"
        #expect(try await fixture.call(.GET, path, token: token).status == 200)
        // No token, a header naming the user, a token signed with another key, an expired one, garbage.
        let none = try await fixture.call(.GET, path, token: nil, headers: [("X-User-Id", user.id.uuidString)])
        #expect(none.status == 401)
        #expect(none.headers["WWW-Authenticate"].first == "Bearer")
        let forged = try await TokenAuthority(secret: "another secret, also long enough for HS256").issue(for: user.id)
        #expect(try await fixture.call(.GET, path, token: forged).status == 401)
        let expired = try await fixture.authority.issue(for: user.id, lifetime: -60)
        #expect(try await fixture.call(.GET, path, token: expired).status == 401)
        #expect(try await fixture.call(.GET, path, token: "not.a.token").status == 401)
        #expect(try await fixture.call(.GET, "/health", token: nil).status == 200)
    }

    @Test func anotherFamilysChildIs404Everywhere() async throws {
        let fixture = try await ServiceFixture.make()
        defer { Task { await fixture.close() } }
        let (_, child, token) = try await fixture.family("Ana")
        let (_, _, strangerToken) = try await fixture.family("Bo")
        let id = UUID()
        #expect(try await fixture.call(.POST, "/children/\(child.id)/events", token: token, json: EventRouteTests.diaper(id)).status == 201)
        let before = try await fixture.eventCount()
        let calls: [(HTTPMethod, String, String?)] = [
            (.GET, "/children/\(child.id)/dashboard", nil),
            (.GET, "/children/\(child.id)/timeline?date=today", nil),
            (.POST, "/children/\(child.id)/events", EventRouteTests.diaper(UUID())),
            (.GET, "/children/\(child.id)/events/\(id)", nil),
            (.PATCH, "/children/\(child.id)/events/\(id)", #"{"expected_revision":1,"notes":"x"}"#),
            (.DELETE, "/children/\(child.id)/events/\(id)", nil),
            (.POST, "/children/\(child.id)/events/\(id)/restore", nil),
            (.POST, "/children/\(child.id)/sleep/start", #"{"time_zone":"UTC"}"#),
            (.POST, "/children/\(child.id)/bottles", #"{"prepared_ml":100,"time_zone":"UTC"}"#),
            (.POST, "/children/\(child.id)/invites", nil),
            (.GET, "/children/\(child.id)/export.csv", nil),
            (.GET, "/children/not-a-uuid/dashboard", nil),
        ]
        for (method, path, body) in calls {
            let reply = try await fixture.call(method, path, token: strangerToken, json: body)
            #expect(reply.status == 404, "\(method) \(path): \(reply.status) \(reply.text)")
        }
        #expect(try await fixture.eventCount() == before)
        // The owner's event under another child's path is 404 too.
        let (_, ownOther, _) = try await fixture.family("Cy")
        #expect(try await fixture.call(.GET, "/children/\(ownOther.id)/events/\(id)", token: token).status == 404)
    }

    @Test func aPrimaryOnlyCallIs403ForACaregiver() async throws {
        let fixture = try await ServiceFixture.make()
        defer { Task { await fixture.close() } }
        let (primary, child, primaryToken) = try await fixture.family()
        let partner = try await fixture.store.users.create(email: "partner-\(UUID().uuidString.prefix(8))@example.com", displayName: "Partner")
        let invite = try await fixture.call(.POST, "/children/\(child.id)/invites", token: primaryToken)
        #expect(invite.status == 201)
        let code = try #require(invite.json["code"] as? String)
        _ = try await fixture.store.invites.redeem(code, as: partner.id)
        let partnerToken = try await fixture.authority.issue(for: partner.id)
        let refused = try await fixture.call(.POST, "/children/\(child.id)/invites", token: partnerToken)
        #expect(refused.status == 403)
        #expect(refused.json["required_role"] as? String == "primary")
        // The caregiver may log and read (not primary-only).
        #expect(try await fixture.call(.GET, "/children/\(child.id)/dashboard", token: partnerToken).status == 200)
        _ = primary
    }

    /// The service as it runs in production: the pool and the server in one ServiceGroup. A
    /// graceful shutdown stops the server, then closes the pool (its connections are gone).
    @Test func theServiceGroupShutsDownServerThenPool() async throws {
        let fixture = try await ServiceFixture.make()
        defer { Task { await fixture.close() } }
        let (_, child, token) = try await fixture.family()
        let service = BabyBasicsService(store: fixture.store, authority: fixture.authority, port: 0)
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let group = service.serviceGroup(gracefulShutdownSignals: []) { continuation.yield($0) }
        let running = Task { try await group.run() }
        var iterator = ports.makeAsyncIterator()
        let port = try #require(await iterator.next())
        var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)/children/\(child.id)/dashboard")
        request.headers.add(name: "Authorization", value: "Bearer \(token)")
        #expect(try await HTTPClient.shared.execute(request, timeout: .seconds(30)).status.code == 200)
        await group.triggerGracefulShutdown()
        try await running.value
        await #expect(throws: (any Error).self) { _ = try await HTTPClient.shared.execute(request, timeout: .seconds(5)) }
        do {
            _ = try await fixture.store.pool.query("SELECT 1")
            Issue.record("the pool still lends connections after the group shut down")
        } catch let error as PostgresError {
            #expect(error.kind == .poolClosed)
        }
    }

    /// Every connection of the pool held elsewhere: the request waits out the pool's acquire
    /// timeout and gets 503 with Retry-After, not a hang and not a 500.
    @Test func aBusyDatabaseIs503WithRetryAfter() async throws {
        let fixture = try await ServiceFixture.make(pool: PoolOptions(maximumConnections: 1, acquireTimeout: .milliseconds(300)))
        defer { Task { await fixture.close() } }
        let (_, child, token) = try await fixture.family()
        let (held, release) = AsyncStream<Void>.makeStream()
        let (taken, signal) = AsyncStream<Void>.makeStream()
        let holder = Task {
            try await fixture.store.pool.withConnection { _ in
                signal.yield()
                for await _ in held { break }
            }
        }
        for await _ in taken { break }
        let reply = try await fixture.call(.GET, "/children/\(child.id)/dashboard", token: token)
        release.yield()
        try await holder.value
        #expect(reply.status == 503)
        #expect(reply.headers["Retry-After"].first == "1")
        #expect(reply.json["error"] as? String == "busy")
        // Free again: answered (retried until it fits its 300 ms on a busy machine).
        try await waitUntil { (try? await fixture.call(.GET, "/children/\(child.id)/dashboard", token: token).status) == 200 }
    }
}
