import Foundation

/// One thing sent to the server and awaited by one caller: a few extended-protocol steps and
/// their sync point (pipeline mode), a simple-protocol script, or a streamed query. The
/// driver keeps it while the machine decides its fate: its messages, its caller's
/// continuation and the results gathered for it.
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

        /// Whether the step only prepares, describes or deallocates: it cannot change data.
        var changesNothing: Bool {
            switch self {
            case .prepare, .describe, .deallocate: true
            case .execute, .executeUnnamed: false
            }
        }

        /// The statement an error of this step came from, if it runs one.
        var statementText: String? {
            switch self {
            case .execute(_, let statement, _), .executeUnnamed(let statement, _): statement.text
            case .prepare, .describe, .deallocate: nil
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

    let id: UInt64
    let kind: Kind
    /// The SQL, for error messages.
    let text: String
    /// What the state machine is told about it.
    var info: ConnectionStateMachine.RequestInfo
    var continuation: CheckedContinuation<[ResultStorage], any Error>?
    var results: [ResultStorage] = []
    /// The loop's ids of its timers that run.
    var timerIDs = RequestTimerIDs()
    /// The caller was answered (once is all).
    private var answered = false

    init(id: UInt64, kind: Kind, text: String) {
        self.id = id
        self.kind = kind
        self.text = text
        var info = ConnectionStateMachine.RequestInfo(id: id, mode: .simple)
        switch kind {
        case .extended(let steps):
            info.mode = .pipelined(steps: steps.count)
            info.changesNothing = steps.allSatisfy(\.changesNothing)
            if steps.count == 1, let statement = steps[0].statementText { info.isCommit = Self.isCommitText(statement) }
        case .simple(let script):
            info.isCommit = Self.isCommitText(script)
        case .stream(let step, let state):
            info.mode = .stream
            state.requestID = id
            _ = step
        }
        self.info = info
    }

    static func isCommitText(_ text: String) -> Bool {
        // Byte by byte, ASCII case folded: this runs for every request, and uppercasing a
        // prefix allocated a string each time.
        let start = text.utf8.drop { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\n") }
        return startsWithKeyword(start, "COMMIT") || startsWithKeyword(start, "END")
    }

    private static func startsWithKeyword(_ bytes: Substring.UTF8View, _ keyword: StaticString) -> Bool {
        var iterator = bytes.makeIterator()
        return keyword.withUTF8Buffer { expected in
            expected.allSatisfy { letter in iterator.next().map { $0 & 0xDF == letter } ?? false }
        }
    }

    /// The text of the statement step `index` runs, if it runs one.
    func statementText(ofStep index: Int) -> String? {
        guard case .extended(let steps) = kind, steps.indices.contains(index) else { return nil }
        return steps[index].statementText
    }

    /// Answers the caller (once).
    func finish(_ outcome: Result<[ResultStorage], any Error>) {
        guard !answered, let continuation else { return }
        answered = true
        self.continuation = nil
        continuation.resume(with: outcome)
    }
}

/// The loop's ids of one request's running timers, one slot per kind of
/// `ConnectionStateMachine.Timer`.
struct RequestTimerIDs {
    private var deadline, cancelRetry, cancelAnswer, cancelGrace: TimerHeap.ID?

    subscript(timer: ConnectionStateMachine.Timer) -> TimerHeap.ID? {
        get {
            switch timer {
            case .connect: nil
            case .deadline: deadline
            case .cancelRetry: cancelRetry
            case .cancelAnswer: cancelAnswer
            case .cancelGrace: cancelGrace
            }
        }
        set {
            switch timer {
            case .connect: break
            case .deadline: deadline = newValue
            case .cancelRetry: cancelRetry = newValue
            case .cancelAnswer: cancelAnswer = newValue
            case .cancelGrace: cancelGrace = newValue
            }
        }
    }

    var all: [TimerHeap.ID] { [deadline, cancelRetry, cancelAnswer, cancelGrace].compactMap { $0 } }
}

/// Rows of a streamed query waiting for their reader, and the reader waiting for rows.
final class RowStreamState: @unchecked Sendable {
    /// The request that carries the stream (set when the request is made).
    var requestID: UInt64 = 0
    var rows: [ResultStorage] = []
    var index = 0
    var waiting: CheckedContinuation<ResultStorage?, any Error>?
    var finished = false
    var failure: (any Error)?
    /// The reader went away (left its loop, dropped the sequence); rows are only drained.
    var abandoned = false

    var buffered: Int { rows.count - index }

    func push(_ row: ResultStorage) {
        if let waiting {
            self.waiting = nil
            waiting.resume(returning: row)
        } else if !abandoned {
            rows.append(row)
        }
    }

    /// The reader is gone: what is buffered is dropped, and nothing more is kept.
    func drop() {
        abandoned = true
        rows = []
        index = 0
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
