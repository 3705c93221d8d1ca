import EmbeddedPostgres
import PostgresTestKit
import Foundation
import Postgres
import Testing
#if canImport(Glibc)
import Glibc
#endif

@Suite struct EmbeddedPostgresTests {
    @Test func createStartStopRestartKeepsData() async throws {
        let directory = URL(fileURLWithPath: "/tmp/bb-embedded-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: directory) }
        let cluster = EmbeddedPostgres(directory: directory, options: .init(durable: false))
        #expect(try cluster.status() == .notInitialized)
        let status = try await cluster.start()
        guard case .running(let port, _) = status else {
            Issue.record("not running after start: \(status)")
            return
        }
        #expect(port > 0)
        #expect(try await cluster.start() == status) // idempotent
        try await cluster.createDatabase("family")
        #expect(try await cluster.databaseExists("family"))
        #expect(try await cluster.databaseExists("nope") == false)
        let connection = try await PostgresConnection.connect(try cluster.connectionString(database: "family"))
        try await connection.execute("CREATE TABLE kept (v text)")
        try await connection.execute("INSERT INTO kept VALUES (\("still here"))")
        await connection.close()

        try await cluster.createDatabase("copy", template: "family")
        let copy = try await PostgresConnection.connect(try cluster.connectionString(database: "copy"))
        #expect(try await copy.fetchValue(String.self, "SELECT v FROM kept") == "still here")
        await copy.close()

        try await cluster.stop()
        #expect(try cluster.status() == .stopped)
        #expect(throws: EmbeddedPostgresError.self) { try cluster.connectionString() }
        try await cluster.start()
        // The same port as before, so a URL printed before the stop still connects.
        #expect(try cluster.port() == port)
        let again = try await PostgresConnection.connect(try cluster.connectionString(database: "family"))
        #expect(try await again.fetchValue(String.self, "SELECT v FROM kept") == "still here")
        await again.close()
        try await cluster.stop(immediate: true)
    }

    /// With TCP on, a remembered port that something else now listens on is given up for a
    /// free one (the cluster starts); a free one is kept.
    @Test func aTakenPortIsGivenUpForAFreeOne() async throws {
        let directory = URL(fileURLWithPath: "/tmp/bb-port-\(UUID().uuidString.prefix(8))")
        let cluster = EmbeddedPostgres(directory: directory, options: .init(durable: false, tcp: true))
        defer { Task { try? await cluster.stop(immediate: true); try? FileManager.default.removeItem(at: directory) } }
        try await cluster.start()
        let first = try cluster.port()
        // A TCP connection the server closes on stop leaves its side in TIME_WAIT: the port is
        // still free to listen on, as PostgreSQL binds (SO_REUSEADDR).
        let lingering = try await PostgresConnection.connect(try cluster.tcpConnectionString())
        #expect(try await lingering.fetchValue(Int.self, "SELECT 1") == 1)
        try await cluster.stop()
        await lingering.close()
        try await cluster.start()
        #expect(try cluster.port() == first)
        try await cluster.stop()

        let squatter = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(squatter) }
        var reuse: Int32 = 1
        setsockopt(squatter, SOL_SOCKET, SO_REUSEADDR, &reuse, socklen_t(MemoryLayout<Int32>.size))
        let bound = EmbeddedPostgres.onLoopback(port: first) { bind(squatter, $0, $1) }
        try #require(bound == 0 && listen(squatter, 1) == 0)
        try await cluster.start()
        let second = try cluster.port()
        #expect(second != first)
        let connection = try await PostgresConnection.connect(try cluster.connectionString())
        #expect(try await connection.fetchValue(Int.self, "SELECT 1") == 1)
        await connection.close()
        try await cluster.stop(immediate: true)
        try FileManager.default.removeItem(at: directory)
    }

    /// Only the server's account (and root) may reach the socket; every connection needs the
    /// generated password; TCP is off unless asked for; an older cluster that trusted local
    /// connections is locked down when it starts.
    @Test func anotherLocalAccountCannotConnect() async throws {
        let directory = URL(fileURLWithPath: "/tmp/bb-locked-\(UUID().uuidString.prefix(8))")
        let cluster = EmbeddedPostgres(directory: directory, options: .init(durable: false))
        // The folder goes once the server has stopped (a server still running recreates it).
        defer { Task { try? await cluster.stop(immediate: true); try? FileManager.default.removeItem(at: directory) } }
        try await cluster.start()
        let port = try cluster.port()

        func mode(_ url: URL) throws -> Int {
            ((try FileManager.default.attributesOfItem(atPath: url.path)[.posixPermissions]) as? NSNumber)?.intValue ?? -1
        }
        #expect(try mode(directory) == 0o700)
        #expect(try mode(cluster.passFile) == 0o600)
        #expect(try mode(directory.appendingPathComponent("superuser.password")) == 0o600)
        let hba = try String(contentsOf: cluster.dataDirectory.appendingPathComponent("pg_hba.conf"), encoding: .utf8)
        #expect(!hba.contains("trust") && hba.contains("scram-sha-256"))
        let owner = (try FileManager.default.attributesOfItem(atPath: directory.path)[.ownerAccountName]) as? String
        #expect(owner == (getuid() == 0 ? "postgres" : ProcessInfo.processInfo.userName))

        // The good case: the URL names the passfile.
        let connection = try await PostgresConnection.connect(try cluster.connectionString())
        #expect(try await connection.fetchValue(String.self, "SELECT auth_method FROM pg_hba_file_rules WHERE type = 'local'") == "scram-sha-256")
        await connection.close()
        // Without the password: refused, by the server.
        let withoutPassword = "host=\(directory.path) port=\(port) user=postgres dbname=postgres passfile=/nonexistent"
        await #expect(throws: PostgresError.self) { _ = try await PostgresConnection.connect(withoutPassword, connectTimeout: 5) }
        // No TCP unless asked for.
        await #expect(throws: PostgresError.self) {
            _ = try await PostgresConnection.connect("postgresql://postgres:\(try cluster.superuserPassword())@127.0.0.1:\(port)/postgres", connectTimeout: 5)
        }
        #expect(throws: EmbeddedPostgresError.self) { try cluster.tcpConnectionString() }

        // Another account, even with the right password, cannot reach the socket.
        if getuid() == 0 {
            // ChildProcess, not Foundation's Process: its waitUntilExit can miss a child's exit
            // on Linux and wait forever (seen here once, with runuser left a zombie).
            let password = try cluster.superuserPassword()
            let other = try ChildProcess.spawn(["/usr/sbin/runuser", "-u", "nobody", "--", "/usr/bin/env", "PGPASSWORD=\(password)", "PGCONNECT_TIMEOUT=5",
                                                "psql", "-X", "-w", "host=\(directory.path) port=\(port) user=postgres dbname=postgres", "-c", "SELECT 1"])
            let result = try await other.result()
            let message = result.stderr
            #expect(result.status != 0)
            #expect(message.contains("Permission denied"), "\(message)")
        }

        // A cluster made by an older version (trust, an open folder) is locked down on start.
        try await cluster.stop()
        try "local all all trust\nhost all all 127.0.0.1/32 trust\n".write(to: cluster.dataDirectory.appendingPathComponent("pg_hba.conf"), atomically: false, encoding: .utf8)
        chmod(directory.path, 0o755)
        try await cluster.start()
        #expect(try mode(directory) == 0o700)
        #expect(!(try String(contentsOf: cluster.dataDirectory.appendingPathComponent("pg_hba.conf"), encoding: .utf8)).contains("trust"))
        await #expect(throws: PostgresError.self) { _ = try await PostgresConnection.connect(withoutPassword, connectTimeout: 5) }
    }

    @Test func aTooLongFolderIsRefusedWithAFix() throws {
        let long = URL(fileURLWithPath: "/tmp/" + String(repeating: "x", count: 120))
        let cluster = EmbeddedPostgres(directory: long)
        do {
            try cluster.start()
            Issue.record("a 120-character folder was accepted")
        } catch let error as EmbeddedPostgresError {
            #expect(error.description.contains("What to do"))
        }
    }

    /// Many tests asking for a database at once create them a few at a time, and each gets one.
    @Test func databasesAskedForAtOnceAreCreatedAFewAtATime() async throws {
        let names = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<(3 * TestPostgres.creationLimit) {
                group.addTask { try await TestPostgres.shared.makeDatabase().name }
            }
            return try await group.reduce(into: Set<String>()) { $0.insert($1) }
        }
        #expect(names.count == 3 * TestPostgres.creationLimit)
        let peak = await TestPostgres.shared.peakCreations
        #expect(peak >= 1 && peak <= TestPostgres.creationLimit, "\(peak) at once")
    }

    @Test func testDatabasesAreFreshAndClonedFromTemplates() async throws {
        let first = try await TestPostgres.shared.makeDatabase(template: "embedded_tests_template") { connection in
            try await connection.execute("CREATE TABLE seeded (v int)")
            try await connection.execute("INSERT INTO seeded VALUES (42)")
        }
        let second = try await TestPostgres.shared.makeDatabase(template: "embedded_tests_template") { _ in
            Issue.record("the template was built twice")
        }
        #expect(first.name != second.name)
        let a = try await first.connect()
        let b = try await second.connect()
        try await a.execute("INSERT INTO seeded VALUES (1)")
        #expect(try await b.fetchValue(Int.self, "SELECT count(*) FROM seeded") == 1)
        #expect(try await a.fetchValue(Int.self, "SELECT count(*) FROM seeded") == 2)
        await a.close()
        await b.close()
    }
}
