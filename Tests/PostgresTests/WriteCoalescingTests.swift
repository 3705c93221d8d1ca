import Foundation
import Testing
@testable import Postgres
import CLibPQ

/// With libpq 17 or newer, the requests that callers send in one batch of the I/O loop leave
/// in one write; with an older libpq, each request is written on its own. `make test` runs the
/// suite on both: the system's libpq (Debian 12: 15) and PostgreSQL 18's.
@Suite struct WriteCoalescingTests {
    /// 32 callers on the connection's own I/O thread, 50 statements each: every caller gets its
    /// own answers, and the writes are fewer than the requests exactly when libpq can queue a
    /// Sync without flushing.
    @Test func requestsOfOneBatchShareAWriteWhenLibpqCanQueueASync() async throws {
        let (connection, _) = try await freshConnection()
        #expect(ConnectionDriver.coalescesWrites == (PQlibVersion() >= 170000 && ProcessInfo.processInfo.environment["BB_POSTGRES_FLUSH_EACH"] != "1"))
        let mirror = connection.core.mirror
        let requestsBefore = mirror.requestsWritten.load(ordering: .relaxed)
        let writesBefore = mirror.writes.load(ordering: .relaxed)
        let wrong = try await withThrowingTaskGroup(of: Int.self) { group in
            for caller in 0..<32 {
                group.addTask(executorPreference: connection.taskExecutor) {
                    var wrong = 0
                    for step in 0..<50 where try await connection.fetchValue(Int.self, "SELECT \(caller * 1000 + step)::int8") != caller * 1000 + step {
                        wrong += 1
                    }
                    return wrong
                }
            }
            return try await group.reduce(0, +)
        }
        #expect(wrong == 0)
        let requests = mirror.requestsWritten.load(ordering: .relaxed) - requestsBefore
        let writes = mirror.writes.load(ordering: .relaxed) - writesBefore
        #expect(requests >= 32 * 50) // and the statement's preparation
        if ConnectionDriver.coalescesWrites {
            // 32 callers resumed in one batch send 32 requests in one write; allow for
            // batches that the scheduling split.
            #expect(writes * 2 <= requests, "requests \(requests), writes \(writes)")
        } else {
            #expect(writes == requests)
        }
        await connection.close()
    }

    /// A batch larger than the socket can take at once (16 callers × 256 kB of text): the
    /// write is finished when the socket drains, and every caller gets its own text back.
    @Test func aBatchLargerThanTheSocketBufferArrivesWhole() async throws {
        let (connection, _) = try await freshConnection()
        let wrong = try await withThrowingTaskGroup(of: Int.self) { group in
            for caller in 0..<16 {
                group.addTask(executorPreference: connection.taskExecutor) {
                    let text = String(repeating: String(UnicodeScalar(UInt8(97 + caller))), count: 256 * 1024) + "\(caller)"
                    let echoed = try await connection.fetchValue(String.self, "SELECT \(text)::text")
                    return echoed == text ? 0 : 1
                }
            }
            return try await group.reduce(0, +)
        }
        #expect(wrong == 0)
        await connection.close()
    }

    /// A batch whose write finds the backend gone fails every request of it, and the
    /// connection's next user gets a clear error, not a hang.
    @Test func aBatchSentToATerminatedBackendFailsEachOfItsRequests() async throws {
        let (connection, database) = try await freshConnection()
        let pid = try await connection.fetchValue(Int32.self, "SELECT pg_backend_pid()")
        let admin = try await database.connect()
        #expect(try await admin.fetchValue(Bool.self, "SELECT pg_terminate_backend(\(pid), 5000)") == true)
        let failures = try await withThrowingTaskGroup(of: Bool.self) { group in
            for caller in 0..<16 {
                group.addTask(executorPreference: connection.taskExecutor) {
                    do {
                        _ = try await connection.fetchValue(Int.self, "SELECT \(caller)::int8")
                        return false
                    } catch let error as PostgresError {
                        return error.kind == .connectionFailure || error.kind == .adminShutdown
                    }
                }
            }
            return try await group.reduce(into: [Bool]()) { $0.append($1) }
        }
        #expect(failures.count == 16)
        #expect(failures.allSatisfy { $0 }, "every request on the dead backend fails as a lost connection")
        await admin.close()
        await connection.close()
    }
}
