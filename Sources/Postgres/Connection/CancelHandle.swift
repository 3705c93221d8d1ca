import CLibPQ
import Foundation

/// Sends libpq cancel requests for the connection's running query, from any thread.
///
/// `PQcancel` is thread-safe with its own `PGcancel` object. The handle remembers which query
/// is running so that a late cancellation never hits the next query.
final class CancelHandle: @unchecked Sendable {
    private let lock = NSLock()
    private var cancelObject: OpaquePointer?
    private var runningQuery: UInt64 = 0
    private var nextQuery: UInt64 = 0
    /// Cancel requests being sent right now (outside the lock), and an object retired meanwhile.
    private var inFlight = 0
    private var retired: [OpaquePointer] = []

    init() {}

    /// Creates the libpq cancel object once the connection is open.
    func attach(_ connection: OpaquePointer) {
        let created = PQgetCancel(connection)
        lock.withLock {
            if let old = cancelObject {
                if inFlight > 0 { retired.append(old) } else { PQfreeCancel(old) }
            }
            cancelObject = created
        }
    }

    /// Marks a query as running; returns its ticket.
    func begin() -> UInt64 {
        lock.withLock {
            nextQuery &+= 1
            runningQuery = nextQuery
            return nextQuery
        }
    }

    func end(_ ticket: UInt64) {
        lock.withLock {
            if runningQuery == ticket { runningQuery = 0 }
        }
    }

    /// Asks the server to cancel query `ticket` while it is still the running one.
    ///
    /// A cancel request that reaches the server between two messages of one call (after
    /// Parse, before Execute) finds the backend idle and is dropped, so the request is repeated
    /// every 100 ms until the query ends. It runs on its own thread: `PQcancel` opens a
    /// connection and must not block the cancelling task's thread.
    func cancel(_ ticket: UInt64) {
        let thread = Thread { [self] in
            for _ in 0..<600 {
                // Take the object under the lock, send outside it: a slow network must not
                // block the connection's thread (begin/end/invalidate take this lock).
                let target = lock.withLock { () -> OpaquePointer? in
                    guard runningQuery == ticket, let cancelObject else { return nil }
                    inFlight += 1
                    return cancelObject
                }
                guard let target else { return }
                var buffer = [CChar](repeating: 0, count: 256)
                _ = PQcancel(target, &buffer, Int32(buffer.count))
                lock.withLock {
                    inFlight -= 1
                    if inFlight == 0 { retired.forEach { PQfreeCancel($0) }; retired.removeAll() }
                }
                Thread.sleep(forTimeInterval: 0.1)
            }
        }
        thread.start()
    }

    /// Frees the libpq cancel object; later cancels do nothing.
    func invalidate() {
        lock.withLock {
            if let cancelObject {
                if inFlight > 0 { retired.append(cancelObject) } else { PQfreeCancel(cancelObject) }
            }
            cancelObject = nil
            runningQuery = 0
        }
    }

    deinit {
        if let cancelObject { PQfreeCancel(cancelObject) }
        retired.forEach { PQfreeCancel($0) }
    }
}
