import Foundation

/// A serial executor that runs every job on one dedicated thread.
///
/// libpq calls block (network I/O), and libpq forbids two threads on one connection at once.
/// Running a connection actor on its own thread satisfies both: jobs are serial, and blocking
/// never starves Swift's cooperative thread pool.
final class ConnectionExecutor: SerialExecutor, @unchecked Sendable {
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []
    private var stopping = false
    private var threadID: pthread_t?

    init(name: String) {
        let thread = Thread { [self] in run() }
        thread.name = name
        thread.stackSize = 1 << 20
        thread.start()
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let unowned = UnownedJob(job)
        condition.lock()
        jobs.append(unowned)
        condition.signal()
        condition.unlock()
    }

    func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
    }

    /// Ends the thread once the queued jobs have run.
    func shutdown() {
        condition.lock()
        stopping = true
        condition.signal()
        condition.unlock()
    }

    /// Whether the caller runs on this executor's thread.
    var isCurrent: Bool {
        condition.lock()
        defer { condition.unlock() }
        guard let threadID else { return false }
        return pthread_equal(threadID, pthread_self()) != 0
    }

    /// Debug check of the wrapper's own invariant (never of input): libpq must never be used
    /// from two threads, and its blocking calls must never occupy Swift's cooperative pool.
    func preconditionOnThread() {
        assert(isCurrent, "a libpq call ran off its connection's thread")
    }

    private func run() {
        condition.lock()
        threadID = pthread_self()
        condition.unlock()
        var batch: [UnownedJob] = []
        while true {
            condition.lock()
            while jobs.isEmpty && !stopping { condition.wait() }
            if jobs.isEmpty && stopping {
                condition.unlock()
                return
            }
            swap(&batch, &jobs)
            condition.unlock()
            for job in batch { job.runSynchronously(on: asUnownedSerialExecutor()) }
            batch.removeAll(keepingCapacity: true)
        }
    }
}
