/// Whether a caller's thread should wait for its own answer this time
/// (`ConnectionDriver.awaitAnswerInPlace`), from how the connection's last waits went.
///
/// A wait that runs out of time blocked a thread of Swift's cooperative pool for nothing, so
/// after one the connection lets the next chance go by, after two in a row the next three, and
/// so on, doubling to 63; one answer that came in time starts over. A connection whose
/// statements are slow (a long report, a far server) thus waits on one call in 64 at most,
/// and one whose statements are quick waits on each.
///
/// ```swift
/// var policy = AnswerWaitPolicy()
/// if policy.mayWait() { policy.record(answered: waitForAnswer()) }
/// ```
struct AnswerWaitPolicy: Equatable {
    /// The most chances let go by after waits that ran out.
    static let longestPause = 63

    /// Waits that ran out in a row.
    private(set) var runOut = 0
    /// Chances still to let go by.
    private(set) var pause = 0

    /// Whether to wait this time (a chance let go by counts down the pause).
    mutating func mayWait() -> Bool {
        guard pause == 0 else {
            pause -= 1
            return false
        }
        return true
    }

    /// How the wait went.
    mutating func record(answered: Bool) {
        if answered {
            runOut = 0
            pause = 0
        } else {
            runOut = min(runOut + 1, 6)
            pause = min((1 << runOut) - 1, Self.longestPause)
        }
    }
}
