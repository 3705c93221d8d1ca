import Foundation

/// Runs blocking work (process spawning, waiting) on a thread of its own, so that Swift's
/// cooperative pool (one thread per core) never stalls.
///
/// ```swift
/// let status = try await runOnDedicatedThread { try cluster.start() }
/// ```
public func runOnDedicatedThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread {
            do { continuation.resume(returning: try body()) } catch { continuation.resume(throwing: error) }
        }
        thread.start()
    }
}
