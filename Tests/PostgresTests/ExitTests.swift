@testable import Postgres
import Testing

/// A process may exit while another of its threads is inside libpq (a pool still opening a
/// connection when `main` returns). OpenSSL's own `atexit` cleanup would then free the locks
/// that thread is using, and the process would die with SIGSEGV after its work had succeeded:
/// a load-test run of this suite did, after all 447 of its tests had passed.
@Suite struct ExitTests {
    /// Opening a connection first tells OpenSSL to leave its state to the operating system at
    /// exit; OpenSSL accepted the flag (it would say 0 if it had already been stopped, and the
    /// lookup would fail without OpenSSL 1.1.1+).
    @Test func openSSLIsToldToSkipItsCleanupAtExitBeforeTheFirstConnection() async throws {
        let database = try await TestPostgresDatabase.make()
        let connection = try await PostgresConnection.connect(database.configuration)
        #expect(try await connection.fetchValue(Int.self, "SELECT 1") == 1)
        await connection.close()
        #expect(openSSLKeptUntilExit)
    }
}
