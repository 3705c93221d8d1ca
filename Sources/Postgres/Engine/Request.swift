import CLibPQ
import Foundation

/// One thing sent to the server and awaited by one caller: a few extended-protocol steps and
/// their sync point (pipeline mode), a simple-protocol script, or a streamed query.
final class Request {
    /// A message sequence of the extended protocol; each produces one set of results.
    enum Step {
        case prepare(name: String, text: String, types: [UInt32])
        case describe(name: String)
        case execute(name: String, statement: RenderedSQL, resultFormat: PostgresFormat)
        /// Parse, bind, describe and execute an unnamed statement in one exchange.
        case executeUnnamed(statement: RenderedSQL, resultFormat: PostgresFormat)
        /// `DEALLOCATE` of one of our own statement names.
        case deallocate(name: String)
    }

    /// Whether the request only prepares or describes (or deallocates our own statement): it
    /// cannot have changed data, whatever became of it.
    var changesNothing: Bool {
        guard case .extended(let steps) = kind else { return false }
        return steps.allSatisfy { step in
            switch step {
            case .prepare, .describe, .deallocate: true
            case .execute, .executeUnnamed: false
            }
        }
    }

    enum Kind {
        /// Pipeline mode: the steps, then one sync point (its own, so a failure touches only
        /// this request).
        case extended([Step])
        /// Simple protocol (`PQsendQuery`): any number of statements, no parameters.
        case simple(String)
        /// One statement in single-row mode; rows go to the stream's buffer as they arrive.
        case stream(Step, RowStreamState)
    }

    /// Why a caller stopped waiting.
    enum Interruption {
        case cancelled
        case deadline(Duration)
    }

    let id: UInt64
    let kind: Kind
    /// The SQL, for error messages.
    let text: String
    var continuation: CheckedContinuation<[ResultStorage], any Error>?

    // Progress, on the loop thread.
    var sent = false
    var stepsDone = 0
    /// NULL results from libpq since the last real one (two in a row means libpq is idle).
    var nullsInARow = 0
    var results: [ResultStorage] = []
    var error: PostgresError?
    /// The transaction status when it was sent: a connection lost afterwards means "rolled
    /// back" inside a transaction, "outcome unknown" for COMMIT or outside one.
    var transactionStatusAtSend: PGTransactionStatusType = PQTRANS_IDLE
    var isCommit = false
    var deadlineTimer: TimerHeap.ID?
    var interruption: Interruption?
    /// The caller was answered already (cancelled, timed out); results are only drained.
    var answered = false
    /// Sending it failed before its last byte (its Sync) could reach the server.
    var undelivered = false
    /// The server had already said it was ending the session when this was sent.
    var sentAfterServerEnded = false

    init(id: UInt64, kind: Kind, text: String) {
        self.id = id
        self.kind = kind
        self.text = text
        if case .extended(let steps) = kind, steps.count == 1 {
            switch steps[0] {
            case .executeUnnamed(let statement, _), .execute(_, let statement, _):
                isCommit = Self.isCommitText(statement.text)
            default: break
            }
        } else if case .simple(let script) = kind {
            isCommit = Self.isCommitText(script)
        }
    }

    static func isCommitText(_ text: String) -> Bool {
        let word = text.drop(while: { $0 == " " || $0 == "\n" }).prefix(6).uppercased()
        return word.hasPrefix("COMMIT") || word.hasPrefix("END")
    }

    /// How many result sets (steps) the extended request expects before its sync.
    var usesPipeline: Bool {
        if case .extended = kind { return true }
        return false
    }

    /// Answers the caller (once).
    func finish(_ outcome: Result<[ResultStorage], any Error>) {
        guard !answered, let continuation else { return }
        answered = true
        self.continuation = nil
        continuation.resume(with: outcome)
    }
}

/// Rows of a streamed query waiting for their reader, and the reader waiting for rows.
final class RowStreamState: @unchecked Sendable {
    var rows: [ResultStorage] = []
    var index = 0
    var waiting: CheckedContinuation<ResultStorage?, any Error>?
    var finished = false
    var failure: (any Error)?
    /// The reader went away (left its loop, dropped the sequence); rows are only drained.
    var abandoned = false
    /// How many rows may wait before the loop stops reading the socket (the server then waits).
    static let bufferLimit = 256

    var buffered: Int { rows.count - index }

    func push(_ row: ResultStorage) {
        if let waiting {
            self.waiting = nil
            waiting.resume(returning: row)
        } else if !abandoned {
            rows.append(row)
        }
    }

    func end(_ failure: (any Error)?) {
        finished = true
        self.failure = failure
        if let waiting {
            self.waiting = nil
            if let failure { waiting.resume(throwing: failure) } else { waiting.resume(returning: nil) }
        }
    }

    func popBuffered() -> ResultStorage? {
        guard index < rows.count else { return nil }
        let row = rows[index]
        index += 1
        if index > 64 && index * 2 > rows.count {
            rows.removeFirst(index)
            index = 0
        }
        return row
    }
}
