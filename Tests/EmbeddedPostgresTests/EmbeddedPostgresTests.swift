import EmbeddedPostgres
import Foundation
import Postgres
import Testing

@Suite struct EmbeddedPostgresTests {
    @Test func createStartStopRestartKeepsData() async throws {
        let directory = URL(fileURLWithPath: "/tmp/bb-embedded-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: directory) }
        let cluster = EmbeddedPostgres(directory: directory, options: .init(durable: false))
        #expect(try cluster.status() == .notInitialized)
        let status = try cluster.start()
        guard case .running(let port, _) = status else {
            Issue.record("not running after start: \(status)")
            return
        }
        #expect(port > 0)
        #expect(try cluster.start() == status) // idempotent
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

        try cluster.stop()
        #expect(try cluster.status() == .stopped)
        #expect(throws: EmbeddedPostgresError.self) { try cluster.connectionString() }
        try cluster.start()
        let again = try await PostgresConnection.connect(try cluster.connectionString(database: "family"))
        #expect(try await again.fetchValue(String.self, "SELECT v FROM kept") == "still here")
        await again.close()
        try cluster.stop(immediate: true)
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
