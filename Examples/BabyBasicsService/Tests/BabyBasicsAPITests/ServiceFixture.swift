import AsyncHTTPClient
import BabyBasicsAPI
import BabyBasicsStore
import EmbeddedPostgres
import PostgresTestKit
import Foundation
import Hummingbird
import Logging
import Migrator
import NIOCore
import NIOHTTP1
import Postgres
import Testing

let migrationsFolder = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Migrations")

/// The service on a loopback port over a fresh migrated database (its store as
/// `babybasics_app`), called over real HTTP with AsyncHTTPClient.
struct ServiceFixture {
    let base: String
    let port: Int
    let store: Store
    let admin: PostgresConnection
    let authority: TokenAuthority
    let service: BabyBasicsService
    let database: TestDatabase
    let server: Task<Void, any Error>
    static let secret = "a test secret that is long enough for HS256!"

    /// Deadlines for tests that are not about deadlines: long, so a loaded machine never turns
    /// a request into a 503 it did not ask for.
    static let patient = StoreDeadlines(read: .seconds(300), write: .seconds(300))

    /// `connect` picks the store's URL (default: the database itself, as `babybasics_app`).
    static func make(
        pool: PoolOptions = PoolOptions(maximumConnections: 6), deadlines: StoreDeadlines = patient,
        authority: TokenAuthority? = nil, exportStall: Duration = .seconds(30), shutdownLimit: Duration = .seconds(15),
        connect: ((TestDatabase) throws -> String)? = nil
    ) async throws -> ServiceFixture {
        let database = try await TestPostgres.shared.makeDatabase(template: "service_template") { connection in
            let name = try #require(try await connection.fetchValue(String.self, "SELECT current_database()"))
            let cluster = try await TestPostgres.shared.cluster()
            try await Migrator(configuration: PostgresConfiguration(try cluster.connectionString(database: name)), options: .init(directory: migrationsFolder)).up()
        }
        let url = try connect?(database) ?? database.connectionString
        let store = Store(configuration: PostgresConfiguration(url + (url.contains("?") ? "&" : "?") + "options=-crole%3Dbabybasics_app"), options: pool, deadlines: deadlines)
        try await retryingPoolTimeouts { try await store.checkSchema() }
        let authority = if let authority { authority } else { try await TokenAuthority(secret: secret) }
        var logger = Logger(label: "service-tests")
        logger.logLevel = .critical
        let service = BabyBasicsService(store: store, authority: authority, port: 0, exportStall: exportStall, shutdownLimit: shutdownLimit, logger: logger)
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let application = service.application { port in continuation.yield(port) }
        let server = Task { try await application.runService(gracefulShutdownSignals: []) }
        var iterator = ports.makeAsyncIterator()
        let port = try #require(await iterator.next())
        return ServiceFixture(base: "http://127.0.0.1:\(port)", port: port, store: store, admin: try await database.connect(), authority: authority,
                              service: service, database: database, server: server)
    }

    func close() async {
        server.cancel()
        _ = try? await server.value
        await admin.close()
        await store.pool.close()
    }

    struct Reply {
        var status: Int
        var headers: HTTPHeaders
        var body: Data
        var json: [String: Any] { ((try? JSONSerialization.jsonObject(with: body)) as? [String: Any]) ?? [:] }
        var text: String { String(decoding: body, as: UTF8.self) }
    }

    /// One request; `token` nil sends no Authorization header.
    func call(_ method: HTTPMethod, _ path: String, token: String?, json: String? = nil, headers: [(String, String)] = []) async throws -> Reply {
        var request = HTTPClientRequest(url: base + path)
        request.method = method
        if let token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let json {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(string: json))
        }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        let body = try await response.body.collect(upTo: 1 << 24)
        return Reply(status: Int(response.status.code), headers: response.headers, body: Data(buffer: body))
    }

    /// A user with a child they are primary of, and a token for them.
    func family(_ name: String = "Parent", zone: String = "America/New_York") async throws -> (user: User, child: Child, token: String) {
        let user = try await retryingPoolTimeouts {
            try await store.users.create(email: "\(name.lowercased())-\(UUID().uuidString.prefix(8))@example.com", displayName: name)
        }
        var draft = ChildDraft(name: "\(name)'s baby", birthDate: PostgresDate(year: 2026, month: 9, day: 1))
        draft.settings.timezone = zone
        let child = try await retryingPoolTimeouts { try await store.children.create(draft, as: user.id) }
        return (user, child, try await authority.issue(for: user.id))
    }

    func eventCount() async throws -> Int {
        try await admin.fetchValue(Int.self, "SELECT count(*) FROM events") ?? -1
    }
}

/// A zone where it is now between 03:00 and 21:00, for a child whose "today" must hold events
/// of the last two hours (UTC, or Asia/Tokyo while it is 21:00-03:00 in UTC).
func zoneFarFromMidnight() throws -> String {
    try #require(["UTC", "Asia/Tokyo"].first { name in
        TimeZone(identifier: name).map { (3..<21).contains(Calendar.current.dateComponents(in: $0, from: Date()).hour ?? 0) } ?? false
    })
}

/// An ISO 8601 timestamp `minutes` from now (negative: ago).
func iso(minutesFromNow minutes: Double) -> String {
    ExportCoding.format(Date().addingTimeInterval(minutes * 60))
}

/// Runs a setup call again while the pool times out. A test's tight acquire timeout is there
/// for its bad case; on a busy machine a cold pool may need longer than that to open its first
/// connection (a load run failed `aBusyDatabaseIs503WithRetryAfter` in its setup, with a 300 ms
/// timeout). Each attempt waits its full timeout while the connection keeps opening; any other
/// error, or the 100th timeout, is the test's.
func retryingPoolTimeouts<T>(_ body: () async throws -> T) async throws -> T {
    var attempt = 1
    while true {
        do {
            return try await body()
        } catch let error as PostgresError where error.kind == .poolTimeout && attempt < 100 {
            attempt += 1
        }
    }
}
