import EmbeddedPostgres
import Foundation
import Postgres
import PostgresTestKit
import Testing

/// What a DBA runs, as the read-only role: the ids in the first column of the answer.
///
/// On one server, `statement` with bound parameters, through the wrapper. On a Citus cluster
/// (`BB_TEST_CITUS=1`), `psqlText` through psql, as a DBA types it: psql writes each `:'name'`
/// variable into the text it sends, quoted, and binds no parameters. That is the way Citus plans
/// a SQL function that reads a distributed table (`timeline_events()`, `sync_events_since()`);
/// with bound parameters it refuses ("parameterized queries for SQL functions referencing
/// distributed tables are not supported"), which docs/scale-out.md tells a DBA.
func dbaIDs(_ fixture: StoreFixture, _ statement: SQL, psql psqlText: String, _ variables: [String: String]) async throws -> [UUID] {
    let url = fixture.database.connectionString + "&options=-crole%3Dbabybasics_readonly"
    guard TestCitus.fromEnvironment() != nil else {
        let dba = try await PostgresConnection.connect(PostgresConfiguration(url))
        let ids = try await dba.query(statement).decodeColumn(UUID.self)
        await dba.close()
        return ids
    }
    let script = FileManager.default.temporaryDirectory.appendingPathComponent("bb-dba-\(UUID().uuidString).sql")
    try (psqlText + ";\n").write(to: script, atomically: true, encoding: .utf8)
    defer { try? FileManager.default.removeItem(at: script) }
    let psql = try ServerBinaries.locate().directory + "/psql"
    let settings = variables.sorted { $0.key < $1.key }.flatMap { ["-v", "\($0.key)=\($0.value)"] }
    let result = try await ChildProcess.spawn([psql, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"] + settings + ["-d", url, "-f", script.path]).result()
    guard result.status == 0 else { throw PsqlFailed(status: result.status, stderr: result.stderr) }
    return result.stdout.split(separator: "\n").compactMap { UUID(uuidString: String($0)) }
}

/// An instant as psql's variable for a `timestamptz` (microseconds kept).
func psqlInstant(_ date: Date) -> String {
    let formatter = ISO8601DateFormatter()
    formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
    return formatter.string(from: date)
}

/// psql ended with an error: its status and what it wrote.
struct PsqlFailed: Error, CustomStringConvertible {
    var status: Int32
    var stderr: String
    var description: String { "psql exited \(status): \(stderr)" }
}
