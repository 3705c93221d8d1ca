import AsyncHTTPClient
import BabyBasicsAPI
import BabyBasicsStore
import EmbeddedPostgres
import Foundation
import Hummingbird
import JWTKit
import NIOHTTP1
import Postgres
import PostgresTestKit
import ServiceLifecycle
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// No client, lock, or silent database can hold the service or its pool; bad input is a 4xx
/// naming what is wrong, never a 500.
@Suite struct BoundedServiceTests {
    /// Gives `child` `count` diaper events, a minute apart, written by the superuser in one
    /// statement (about 85 bytes of CSV each).
    static func manyEvents(_ fixture: ServiceFixture, child: Child, user: User, count: Int) async throws {
        try await fixture.admin.execute("""
            INSERT INTO events (id, child_id, event_type, start_time, start_tz, start_offset_seconds, data, logged_by)
            SELECT gen_random_uuid(), \(child.id), 'diaper', now() - interval '60 days' + n * interval '1 minute', 'UTC', 0, '{"contents":"wet"}', \(user.id)
            FROM generate_series(1, \(count)) n
            """)
    }

    /// Twenty clients that ask for an export and stop reading: one user gets two exports at
    /// once (the rest 429), they hold no database connection, another family's dashboard
    /// answers at once, and the stalled exports end on their own.
    @Test func stalledExportClientsShutNobodyOut() async throws {
        let fixture = try await ServiceFixture.make(exportStall: .seconds(2))
        defer { Task { await fixture.close() } }
        let (user, child, token) = try await fixture.family("Stalls", zone: "UTC")
        try await Self.manyEvents(fixture, child: child, user: user, count: 40_000)
        let (_, otherChild, otherToken) = try await fixture.family("Other")
        var clients: [StalledClient] = []
        for _ in 0..<20 {
            clients.append(try StalledClient(port: fixture.port, path: "/children/\(child.id)/export.csv", token: token))
        }
        var statuses: [Int] = []
        for client in clients { statuses.append(try await client.status()) }
        #expect(statuses.filter { $0 == 200 }.count == 2, "\(statuses)")
        #expect(statuses.filter { $0 == 429 }.count == 18, "\(statuses)")
        let dashboard = try await fixture.call(.GET, "/children/\(otherChild.id)/dashboard", token: otherToken)
        #expect(dashboard.status == 200)
        // The stalled exports hold no connection while they wait, and end on their own.
        try await waitUntil { fixture.store.pool.statistics.inUse == 0 }
        try await waitUntil { await fixture.service.exports.count == 0 }
        #expect(try await fixture.admin.fetchValue(Int.self, """
            SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'
            """) == 0)
        // A client that reads gets the whole file.
        let whole = try await fixture.call(.GET, "/children/\(child.id)/export.csv", token: token)
        #expect(whole.status == 200)
        #expect(whole.text.split(separator: "\r\n").count == 1 + 40_000)
        for client in clients { client.close() }
    }

    /// Graceful shutdown (SIGTERM) with a client that stopped reading an export: its export is
    /// ended and the service group finishes, instead of waiting for the client.
    ///
    /// The time limit only turns a hang into a failure: without the shutdown ending it, the
    /// export would wait out its hour-long stall allowance. (The test's own work, 40,000 events
    /// and a 6 MB export, takes seconds since 0030; before it, the events alone took minutes.)
    @Test(.timeLimit(.minutes(5))) func gracefulShutdownEndsAStalledExport() async throws {
        let fixture = try await ServiceFixture.make(exportStall: .seconds(3600))
        defer { Task { await fixture.admin.close() } }
        fixture.server.cancel() // this test runs the whole group instead
        _ = try? await fixture.server.value
        let (user, child, token) = try await fixture.family("Leaving", zone: "UTC")
        try await Self.manyEvents(fixture, child: child, user: user, count: 40_000)
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let group = fixture.service.serviceGroup(gracefulShutdownSignals: []) { continuation.yield($0) }
        let running = Task { try await group.run() }
        var iterator = ports.makeAsyncIterator()
        let port = try #require(await iterator.next())
        let client = try StalledClient(port: port, path: "/children/\(child.id)/export.csv", token: token)
        #expect(try await client.status() == 200)
        try await waitUntil { await fixture.service.exports.count == 1 }
        await group.triggerGracefulShutdown()
        try await running.value
        #expect(await fixture.service.exports.count == 0)
        client.close()
    }

    /// The database stops answering (a silent network, a frozen server): every request is 503
    /// with Retry-After (not a hang), liveness still answers, readiness says not ready; when it
    /// answers again, so does the service, without a restart.
    @Test func aSilentDatabaseIs503AndTheServiceRecovers() async throws {
        let proxies = ProxyBox()
        let fixture = try await ServiceFixture.make(deadlines: StoreDeadlines(read: .milliseconds(500), write: .milliseconds(500))) { database in
            let proxy = try FaultProxy.start(in: database.cluster)
            proxies.proxy = proxy
            return proxy.connectionString(database: database.name)
        }
        let proxy = try #require(proxies.proxy)
        defer { proxy.stop(); Task { await fixture.close() } }
        let (_, child, token) = try await fixture.family()
        // The good case first, retried until it fits its 500 ms on a busy machine.
        try await waitUntil { (try? await fixture.call(.GET, "/children/\(child.id)/dashboard", token: token).status) == 200 }
        try await waitUntil { (try? await fixture.call(.GET, "/health/ready", token: nil).status) == 200 }
        proxy.mode = .silent
        for path in ["/children/\(child.id)/dashboard", "/children/\(child.id)/timeline?date=2026-11-20"] {
            let reply = try await fixture.call(.GET, path, token: token)
            #expect(reply.status == 503, "\(path): \(reply.status) \(reply.text)")
            #expect(reply.headers["Retry-After"].first != nil)
        }
        let write = try await fixture.call(.POST, "/children/\(child.id)/events", token: token, json: EventRouteTests.diaper(UUID()))
        #expect(write.status == 503, "\(write.status) \(write.text)")
        #expect(try await fixture.call(.GET, "/health", token: nil).status == 200)
        #expect(try await fixture.call(.GET, "/health/ready", token: nil).status == 503)
        proxy.mode = .forward
        try await waitUntil { (try? await fixture.call(.GET, "/children/\(child.id)/dashboard", token: token).status) == 200 }
    }

    /// A table locked by a DBA's session: requests are 503 at their deadline, and 200 once the
    /// lock is gone.
    @Test func aLockedTableIs503ThenFine() async throws {
        let fixture = try await ServiceFixture.make(deadlines: StoreDeadlines(read: .milliseconds(500), write: .milliseconds(500)))
        defer { Task { await fixture.close() } }
        let (_, child, token) = try await fixture.family()
        let dba = try await fixture.database.connect()
        try await dba.execute("BEGIN")
        try await dba.execute("LOCK TABLE events IN ACCESS EXCLUSIVE MODE")
        let reply = try await fixture.call(.GET, "/children/\(child.id)/dashboard", token: token)
        #expect(reply.status == 503, "\(reply.status) \(reply.text)")
        #expect(reply.headers["Retry-After"].first != nil)
        try await dba.execute("ROLLBACK")
        try await waitUntil { (try? await fixture.call(.GET, "/children/\(child.id)/dashboard", token: token).status) == 200 }
        await dba.close()
    }

    /// What used to be a 500 is the 4xx that says what is wrong.
    @Test func badInputIsA4xxNamingWhatIsWrong() async throws {
        let fixture = try await ServiceFixture.make()
        defer { Task { await fixture.close() } }
        let (_, child, token) = try await fixture.family()
        let id = UUID()
        let nulInNotes = try await fixture.call(.POST, "/children/\(child.id)/events", token: token, json: """
            {"id":"\(id)","type":"diaper","start_time":"\(iso(minutesFromNow: -5))","time_zone":"UTC","data":{"contents":"wet"},"notes":"a\\u0000b"}
            """)
        #expect(nulInNotes.status == 422 && nulInNotes.json["field"] as? String == "notes", "\(nulInNotes.status) \(nulInNotes.text)")
        let nulInCategory = try await fixture.call(.POST, "/children/\(child.id)/events", token: token, json: """
            {"id":"\(UUID())","type":"note","start_time":"\(iso(minutesFromNow: -5))","time_zone":"UTC","data":{"category":"a\\u0000"}}
            """)
        #expect(nulInCategory.status == 422 && nulInCategory.json["field"] as? String == "data.category", "\(nulInCategory.status) \(nulInCategory.text)")
        #expect(try await fixture.call(.POST, "/children/\(child.id)/events", token: token, json: EventRouteTests.diaper(id)).status == 201)
        let nulInPatch = try await fixture.call(.PATCH, "/children/\(child.id)/events/\(id)", token: token, json: #"{"expected_revision":1,"notes":"x\u0000"}"#)
        #expect(nulInPatch.status == 422 && nulInPatch.json["field"] as? String == "notes", "\(nulInPatch.status) \(nulInPatch.text)")
        #expect(try await fixture.eventCount() == 1)

        let huge = "{\"notes\":\"" + String(repeating: "x", count: 2 << 20) + "\"}"
        #expect(try await fixture.call(.POST, "/children/\(child.id)/events", token: token, json: huge).status == 413)
        let bigStep = "{\"notes\":\"" + String(repeating: "x", count: 120 << 10) + "\"}"
        #expect(try await fixture.call(.POST, "/children/\(child.id)/sleep/start", token: token, json: bigStep).status == 413)

        let farDate = try await fixture.call(.GET, "/children/\(child.id)/timeline?date=294277-01-01", token: token)
        #expect(farDate.status == 422 && farDate.json["field"] as? String == "date", "\(farDate.status) \(farDate.text)")
        #expect(try await fixture.call(.GET, "/children/\(child.id)/timeline?date=1899-12-31", token: token).status == 422)
        #expect(try await fixture.call(.GET, "/sync?limit=0", token: token).json["field"] as? String == "limit")
        #expect(try await fixture.call(.GET, "/sync?limit=100000", token: token).json["field"] as? String == "limit")
        #expect(try await fixture.call(.GET, "/children/\(child.id)/timeline?date=2026-11-20", token: token).status == 200)
    }

    /// Token rules, each both ways: a future `nbf`, a configured issuer and audience, a lifetime
    /// longer than allowed, a user that does not exist.
    @Test func tokensAreCheckedAsACarefulServiceChecksThem() async throws {
        let authority = try await TokenAuthority(secret: ServiceFixture.secret, issuer: "https://id.babybasics.test", audience: "babybasics-api",
                                                 maximumLifetime: .seconds(86_400))
        let fixture = try await ServiceFixture.make(authority: authority)
        defer { Task { await fixture.close() } }
        let (user, child, good) = try await fixture.family()
        let path = "/children/\(child.id)/dashboard"
        #expect(try await fixture.call(.GET, path, token: good).status == 200)

        let keys = JWTKeyCollection()
        await keys.add(hmac: HMACKey(from: ServiceFixture.secret), digestAlgorithm: .sha256)
        let now = Date()
        func token(_ claims: AccessToken) async throws -> String { try await keys.sign(claims) }
        let right = (issuer: "https://id.babybasics.test", audience: "babybasics-api")
        // Not valid yet.
        let future = try await token(AccessToken(user: user.id, expires: now + 7200, issuedAt: now, notBefore: now + 3600, issuer: right.issuer, audience: right.audience))
        #expect(try await fixture.call(.GET, path, token: future).status == 401)
        // Another issuer, another audience, none at all.
        let otherIssuer = try await token(AccessToken(user: user.id, expires: now + 600, issuedAt: now, issuer: "https://evil.test", audience: right.audience))
        #expect(try await fixture.call(.GET, path, token: otherIssuer).status == 401)
        let otherAudience = try await token(AccessToken(user: user.id, expires: now + 600, issuedAt: now, issuer: right.issuer, audience: "another-api"))
        #expect(try await fixture.call(.GET, path, token: otherAudience).status == 401)
        let bare = try await token(AccessToken(user: user.id, expires: now + 600))
        #expect(try await fixture.call(.GET, path, token: bare).status == 401)
        // Valid until the year 9999: longer than the service allows.
        let forever = try await token(AccessToken(user: user.id, expires: Date(timeIntervalSince1970: 253_402_300_799), issuedAt: now, issuer: right.issuer, audience: right.audience))
        #expect(try await fixture.call(.GET, path, token: forever).status == 401)
        let rightOne = try await token(AccessToken(user: user.id, expires: now + 600, issuedAt: now, notBefore: now, issuer: right.issuer, audience: right.audience))
        #expect(try await fixture.call(.GET, path, token: rightOne).status == 200)
        // A user that does not exist: 401 on every route, /sync included.
        let ghost = try await authority.issue(for: UUID())
        #expect(try await fixture.call(.GET, "/sync", token: ghost).status == 401)
        #expect(try await fixture.call(.GET, path, token: ghost).status == 401)
    }

    @Test func settingsAreCheckedBeforeAnythingStarts() throws {
        let secret = ["BB_JWT_SECRET": ServiceFixture.secret]
        #expect(try ServiceSettings(environment: secret).port == 8080)
        #expect(try ServiceSettings(environment: secret.merging(["PORT": "9000", "HOST": "0.0.0.0"]) { $1 }).host == "0.0.0.0")
        #expect(try ServiceSettings(environment: secret.merging(["HOST": "::1"]) { $1 }).host == "::1")
        #expect(try ServiceSettings(environment: secret.merging(["HOST": "api.internal"]) { $1 }).host == "api.internal")
        #expect(throws: ServiceSettings.Invalid.self) { try ServiceSettings(environment: secret.merging(["PORT": "abc"]) { $1 }) }
        #expect(throws: ServiceSettings.Invalid.self) { try ServiceSettings(environment: secret.merging(["PORT": "70000"]) { $1 }) }
        #expect(throws: ServiceSettings.Invalid.self) { try ServiceSettings(environment: secret.merging(["HOST": "not a host"]) { $1 }) }
        #expect(throws: ServiceSettings.Invalid.self) { try ServiceSettings(environment: secret.merging(["HOST": "300.1.1.1"]) { $1 }) }
        #expect(throws: ServiceSettings.Invalid.self) { try ServiceSettings(environment: ["BB_JWT_SECRET": String(repeating: "a", count: 32)]) }
        #expect(throws: ServiceSettings.Invalid.self) { try ServiceSettings(environment: ["BB_JWT_SECRET": "short"]) }
        #expect(throws: ServiceSettings.Invalid.self) { try ServiceSettings(environment: [:]) }
        #expect(try ServiceSettings(environment: [:], secretRequired: false).secret.isEmpty)
    }

    /// The binary itself: a wrong PORT or HOST exits 2 with a line naming it.
    @Test func theServiceExitsTwoOnAWrongSetting() async throws {
        let binary = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("bb-service").path
        try #require(FileManager.default.isExecutableFile(atPath: binary), "bb-service is built beside the tests")
        for (variable, value) in [("PORT", "abc"), ("HOST", "no such host!")] {
            var environment = ProcessInfo.processInfo.environment
            environment["BB_JWT_SECRET"] = ServiceFixture.secret
            environment["DATABASE_URL"] = "postgresql://nowhere.invalid/x"
            environment[variable] = value
            let result = try await ChildProcess.spawn([binary], environment: environment).result()
            #expect(result.status == 2, "\(variable)=\(value): exit \(result.status), \(result.stderr)")
            #expect(result.stderr.contains(variable), "\(result.stderr)")
        }
    }
}

final class ProxyBox: @unchecked Sendable {
    var proxy: FaultProxy?
}

/// An HTTP client that sends one request, reads its status line, and then reads nothing more,
/// with a 4 kB receive buffer: the server soon has nowhere to write.
final class StalledClient: @unchecked Sendable {
    private let fd: Int32

    init(port: Int, path: String, token: String) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EMFILE) }
        var size: Int32 = 4096
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        var timeout = timeval(tv_sec: 60, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { throw POSIXError(.ECONNREFUSED) }
        let request = "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(token)\r\n\r\n"
        _ = request.withCString { send(fd, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
    }

    /// The response's status code (reads the status line only, on a thread of its own).
    func status() async throws -> Int {
        let fd = self.fd
        return try await runOnDedicatedThread {
            var line: [UInt8] = []
            var byte: UInt8 = 0
            while line.count < 200, recv(fd, &byte, 1, 0) == 1 {
                if byte == UInt8(ascii: "\n") { break }
                line.append(byte)
            }
            let parts = String(decoding: line, as: UTF8.self).split(separator: " ")
            return parts.count > 1 ? Int(parts[1]) ?? -1 : -1
        }
    }

    func close() { _ = Glibc.close(fd) }
}

/// Polls `condition` every 10 ms for up to 60 s.
func waitUntil(_ condition: () async throws -> Bool) async throws {
    for _ in 0..<6000 {
        if try await condition() { return }
        try await Task.sleep(for: .milliseconds(10))
    }
    Issue.record("condition never became true")
}
