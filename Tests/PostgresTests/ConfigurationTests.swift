import EmbeddedPostgres
import PostgresTestKit
import Foundation
import Postgres
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Connecting from URLs, conninfo strings and libpq's environment; failing fast and safely.
@Suite struct ConfigurationTests {
    static let secret = "hunter2-Sup3rSecret"

    @Test func urlAndConninfoForms() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        let port = try database.cluster.port()
        let host = database.cluster.directory.path
        let viaConninfo = try await PostgresConnection.connect("host=\(host) port=\(port) user=postgres dbname=\(database.name) passfile=\(database.cluster.passFile.path)")
        #expect(try await viaConninfo.value(String.self, "SELECT current_database()") == database.name)
        let tcp = try database.cluster.tcpConnectionString(database: database.name)
        let viaURL = try await PostgresConnection.connect(tcp + "?sslmode=disable&application_name=bb-test")
        #expect(try await viaURL.value(String.self, "SHOW application_name") == "bb-test")
        #expect(try await viaURL.value(Bool.self, "SELECT NOT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"))
        let legacyScheme = try await PostgresConnection.connect(tcp.replacingOccurrences(of: "postgresql://", with: "postgres://"))
        #expect(try await legacyScheme.value(Int.self, "SELECT 1") == 1)
        for connection in [viaConninfo, viaURL, legacyScheme] { await connection.close() }
    }

    @Test func sslmodeRequireAgainstAServerWithoutTLSFailsClearly() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        let tcp = try database.cluster.tcpConnectionString(database: database.name)
        let error = await expectPostgresError(.connectionFailure) {
            _ = try await PostgresConnection.connect(tcp + "?sslmode=require")
        }
        #expect(error?.message.contains("SSL") == true)
    }

    /// `.pgpass` through libpq's `passfile` keyword. (PG* variables and service files are
    /// process-wide, so they are tested in a child process: see MigratorTests.)
    @Test func passwordFromAPgpassFile() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        let port = try database.cluster.port()
        let password = try String(contentsOf: database.cluster.directory.appendingPathComponent("superuser.password"), encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let passFile = FileManager.default.temporaryDirectory.appendingPathComponent("bb-pgpass-\(UUID().uuidString)")
        try "127.0.0.1:\(port):*:postgres:\(password)\n".write(to: passFile, atomically: true, encoding: .utf8)
        chmod(passFile.path, 0o600)
        defer { try? FileManager.default.removeItem(at: passFile) }
        let connection = try await PostgresConnection.connect("host=127.0.0.1 port=\(port) user=postgres dbname=\(database.name) passfile=\(passFile.path)")
        #expect(try await connection.value(String.self, "SELECT current_database()") == database.name)
        await connection.close()
        await expectPostgresError(.connectionFailure) {
            _ = try await PostgresConnection.connect("host=127.0.0.1 port=\(port) user=postgres dbname=\(database.name) passfile=/nonexistent", connectTimeout: 2)
        }
    }

    @Test func wrongPortFailsFastWithoutThePassword() async throws {
        let port = try unusedPort()
        // Fast means refused, not timed out: with a 60 s timeout, the refusal itself is the
        // answer (no speed asserted; 3.1 s was seen under a full suite on 2 cores).
        let error = await expectPostgresError(.connectionFailure) {
            _ = try await PostgresConnection.connect("postgresql://postgres:\(Self.secret)@127.0.0.1:\(port)/x", connectTimeout: 60)
        }
        #expect(error?.message.contains("refused") == true, "\(error.map { "\($0)" } ?? "")")
        #expect(error?.description.contains(Self.secret) == false)
        #expect(error?.message.contains("\(port)") == true)
    }

    @Test func wrongPasswordFailsWithoutEchoingIt() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        let port = try database.cluster.port()
        let error = await expectPostgresError(.connectionFailure) {
            _ = try await PostgresConnection.connect(
                "postgresql://postgres:\(Self.secret)@127.0.0.1:\(port)/\(database.name)", connectTimeout: 15)
        }
        // (A generous timeout: on a loaded machine SCRAM's hashing took over 2 s and the
        // test saw a timeout instead of the refusal it is about.)
        #expect(error?.message.contains("password authentication failed") == true, "\(error.map { "\($0)" } ?? "")")
        #expect(error?.description.contains(Self.secret) == false)
        let conninfo = await expectPostgresError(.connectionFailure) {
            _ = try await PostgresConnection.connect("host=127.0.0.1 port=\(port) user=postgres password=\(Self.secret) dbname=x", connectTimeout: 2)
        }
        #expect(conninfo?.description.contains(Self.secret) == false)
    }

    @Test func connectTimeoutIsHonoured() async throws {
        // A socket that accepts TCP but never speaks: only the timeout ends the wait.
        let (listener, port) = loopbackSocket()
        defer { close(listener) }
        #expect(listen(listener, 8) == 0)
        let clock = ContinuousClock()
        let started = clock.now
        let error = await expectPostgresError(.connectionFailure) {
            _ = try await PostgresConnection.connect("postgresql://postgres@127.0.0.1:\(port)/x", connectTimeout: 2)
        }
        // The timeout ended it (a busy machine can only make it later, never sooner).
        #expect(error?.message.contains("connect timeout") == true, "\(String(describing: error))")
        #expect(clock.now - started >= .milliseconds(1500))
    }

    @Test func malformedStringsAreRefusedBeforeConnecting() async throws {
        let error = await expectPostgresError(.invalidConfiguration) {
            _ = try await PostgresConnection.connect("host=localhost password=\(Self.secret) bogus")
        }
        #expect(error?.description.contains(Self.secret) == false)
        await expectPostgresError(.invalidConfiguration) { _ = try await PostgresConnection.connect("postgresql://host/db?nosuchoption=1") }
        await expectPostgresError(.invalidConfiguration) { _ = try await PostgresConnection.connect("just some words") }
    }

    func unusedPort() throws -> Int {
        let (fd, port) = loopbackSocket()
        close(fd)
        return port
    }

    /// A TCP socket bound to a free port on 127.0.0.1.
    func loopbackSocket() -> (fd: Int32, port: Int) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        return (fd, Int(UInt16(bigEndian: address.sin_port)))
    }
}
