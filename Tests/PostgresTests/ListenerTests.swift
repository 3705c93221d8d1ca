import EmbeddedPostgres
import PostgresTestKit
import Foundation
import Postgres
import Testing

/// `PostgresListener`: notifications as they commit, and a connection that is replaced when it
/// is lost or goes silent, saying so.
@Suite struct ListenerTests {
    @Test func aSilentNetworkIsDetectedAndTheListenerComesBackSayingSo() async throws {
        let (sender, database) = try await freshConnection()
        let proxy = try FaultProxy.start(in: database.cluster)
        defer { proxy.stop() }
        var configuration = PostgresConfiguration(proxy.connectionString(database: database.name))
        configuration.connectTimeout = 2
        let listener = PostgresListener(configuration: configuration, channel: "family news",
                                        healthCheckInterval: .milliseconds(300), retryDelay: .milliseconds(50))
        let heard = EventLog()
        let task = Task { for await event in listener.events() { heard.append(event) } }

        try await until { heard.events == [.listening] }
        try await sender.notify("family news", payload: "one")
        try await until { heard.events.count == 2 }
        #expect(heard.events.last.map { if case .notification(let n) = $0 { n.payload == "one" && n.channel == "family news" } else { false } } == true)

        // The path goes quiet: no FIN, no RST. The health check's deadline notices; once the
        // path is back the listener listens again and reports `.reconnected`.
        // Stay silent until the listener gave up: its health check's deadline passes, the
        // cancel request dials the proxy (one), nothing answers it, and the listener dials a
        // new connection (two). A shorter silence is not a loss: the held answers arrive and
        // the listener rightly keeps its connection.
        // The server end of the lost path may linger (the proxy holds it open, as a dead NAT
        // would): leave that backend out of the counts below.
        let lost = try await sender.fetchValue([Int32].self, """
            SELECT coalesce(array_agg(pid), '{}') FROM pg_stat_activity
            WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'
            """)
        let dialed = proxy.connectionsAccepted
        proxy.mode = .silent
        try await until { proxy.connectionsAccepted >= dialed + 2 }
        proxy.mode = .forward
        try await until { heard.events.contains(.reconnected) }
        // The listener's connection: idle, its last statement the LISTEN or (every 300 ms of
        // quiet) its health check's SELECT 1.
        let listens: SQL = """
            SELECT count(*)::int FROM pg_stat_activity
            WHERE datname = current_database() AND state = 'idle' AND pid <> pg_backend_pid()
              AND query IN ('LISTEN "family news"', 'SELECT 1') AND pid <> ALL(\(lost))
            """
        try await until { try await sender.fetchValue(Int.self, listens) == 1 }
        try await sender.notify("family news", payload: "two")
        try await until { heard.payloads.last == "two" }

        // Cancelling the consumer ends the stream and closes the connection.
        task.cancel()
        await task.value
        try await until { try await sender.fetchValue(Int.self, listens) == 0 }
        #expect(heard.payloads == ["one", "two"])
    }

    private func until(_ condition: () async throws -> Bool, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            if try await condition() { return }
            try await Task.sleep(for: .milliseconds(10))
        }
        Issue.record("the condition did not hold within 30 s", sourceLocation: sourceLocation)
    }
}

private final class EventLog: @unchecked Sendable {
    private let lock = NSLock()
    private var list: [PostgresListener.Event] = []
    func append(_ event: PostgresListener.Event) { lock.withLock { list.append(event) } }
    var events: [PostgresListener.Event] { lock.withLock { list } }
    var payloads: [String] { events.compactMap { if case .notification(let n) = $0 { n.payload } else { nil } } }
}
