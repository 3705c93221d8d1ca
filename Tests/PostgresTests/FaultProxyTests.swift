import EmbeddedPostgres
import Foundation
import PostgresTestKit
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The test kit's proxy shares its process with every other test: a descriptor number it has
/// closed belongs to the next socket anyone opens, so the proxy must never shut it down again.
@Suite struct FaultProxyTests {
    /// A load run failed this way: a test's proxy refused connections ("Connection refused")
    /// because another proxy, already stopped, shut down the descriptor number it once listened
    /// on, which the new proxy's listener had been given.
    @Test func aStoppedProxyNeverTouchesTheNumberItsListenerHad() async throws {
        let database = try await TestPostgresDatabase.make()
        // Someone else's listener, to be put on the number the stopped proxy's listener had.
        let template = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #expect(template >= 0)
        defer { close(template) }
        let port = try #require(EmbeddedPostgres.bindLoopback(template))
        #expect(listen(template, 8) == 0)

        // Other tests open sockets meanwhile and may take the number first: then a new proxy.
        for _ in 0..<5 {
            let stopped = try FaultProxy.start(in: database.cluster)
            let number = stopped.listenerDescriptor
            stopped.stop()
            // The accept loop wakes and closes the listener. F_DUPFD takes the lowest free number
            // from `number` up and never closes anything: `number` itself once it is free.
            guard let copy = await dup(template, onto: number) else { continue }
            defer { close(copy) }

            stopped.stop()
            stopped.cutAll()
            #expect(connects(to: port), "the stopped proxy shut down descriptor \(number), which is no longer its own")
            return
        }
        Issue.record("the numbers of five stopped proxies' listeners were each taken by other sockets: run this test alone")
    }

    /// A copy of `template` on descriptor `number`, once that number is free (within 2 s).
    private func dup(_ template: Int32, onto number: Int32) async -> Int32? {
        for _ in 0..<200 {
            let copy = fcntl(template, F_DUPFD, number)
            if copy == number { return copy }
            if copy >= 0 { close(copy) }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return nil
    }

    private func connects(to port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        return EmbeddedPostgres.onLoopback(port: port) { connect(fd, $0, $1) } == 0
    }
}
