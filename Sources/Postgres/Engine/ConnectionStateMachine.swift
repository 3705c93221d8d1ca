/// Every rule of one connection, as data: which request goes out when, what each result
/// libpq hands back means and for which caller, when a cancel is safe, what a deadline does,
/// and what each caller hears when the connection is lost.
///
/// The machine is pure: it never calls libpq, never touches a socket, a clock or a
/// continuation. Events go in (a request submitted, a result read, a timer fired, the cancel
/// call returned, the socket lost) and actions come out, which `ConnectionDriver` performs.
/// So every ordering — an error and its Sync's answer in separate reads, a deadline while a
/// cancel is in flight, a socket lost between two steps — can be driven by a test, with a
/// manual clock and no server (see ConnectionStateMachineTests).
///
/// ```swift
/// var machine = ConnectionStateMachine()
/// _ = machine.connected(canCancel: true)
/// _ = machine.submit(.init(id: 1, mode: .pipelined(steps: 1), deadline: .seconds(5)))
/// guard case .send(1, enterPipeline: true, exitPipeline: false)? = machine.nextSend(transactionStatus: .idle) else { return }
/// _ = machine.received(.result)     // .keep(1, replacing: false)
/// _ = machine.received(.endOfStep)
/// _ = machine.received(.sync)       // .complete(1, .success), its deadline timer stopped
/// ```
struct ConnectionStateMachine {
    typealias RequestID = UInt64

    /// How a request travels.
    enum Mode: Equatable {
        /// Extended-protocol steps in pipeline mode, then the request's own Sync, so a failure
        /// touches only this request. Several such requests may be in flight at once.
        case pipelined(steps: Int)
        /// A script through the simple protocol; nothing else is in flight meanwhile.
        case simple
        /// One statement in single-row mode, its rows handed over one by one; alone in flight,
        /// in pipeline mode with its own Sync.
        case stream
    }

    /// What the machine needs to know of a request.
    struct RequestInfo: Equatable {
        var id: RequestID
        var mode: Mode
        /// A COMMIT or END: a connection lost after it leaves its outcome unknown even inside a
        /// transaction.
        var isCommit = false
        /// It only prepares, describes or deallocates: whatever became of it, no data changed.
        var changesNothing = false
        /// How long the caller waits before the statement is interrupted.
        var deadline: Duration?
    }

    /// Why a caller stopped waiting.
    enum Interruption: Equatable {
        case cancelled
        case deadline(Duration)
    }

    /// A timer the machine asked for; the driver fires it back with `timerFired`.
    enum Timer: Hashable {
        case connect
        case deadline(RequestID)
        /// Ask the server to cancel again (a cancel that arrives before the statement is lost).
        case cancelRetry(RequestID)
        /// The caller of a cancelled statement stops waiting for the server's confirmation.
        case cancelAnswer(RequestID)
        /// The server has not answered a cancelled statement: give the connection up.
        case cancelGrace(RequestID)

        var request: RequestID? {
            switch self {
            case .connect: nil
            case .deadline(let id), .cancelRetry(let id), .cancelAnswer(let id), .cancelGrace(let id): id
            }
        }

        /// Its bit in the request's `RequestTimers` (nil for `.connect`).
        fileprivate var bit: RequestTimers? {
            switch self {
            case .connect: nil
            case .deadline: .deadline
            case .cancelRetry: .cancelRetry
            case .cancelAnswer: .cancelAnswer
            case .cancelGrace: .cancelGrace
            }
        }
    }

    /// Which of a request's timers run: kept in the request's own entry, so starting and
    /// stopping them costs no hashing on the per-statement path.
    fileprivate struct RequestTimers: OptionSet {
        let rawValue: UInt8
        static let deadline = RequestTimers(rawValue: 1)
        static let cancelRetry = RequestTimers(rawValue: 2)
        static let cancelAnswer = RequestTimers(rawValue: 4)
        static let cancelGrace = RequestTimers(rawValue: 8)

        /// The timers of request `id` these bits stand for, in a fixed order.
        func timers(of id: RequestID) -> [Timer] {
            var timers: [Timer] = []
            if contains(.deadline) { timers.append(.deadline(id)) }
            if contains(.cancelRetry) { timers.append(.cancelRetry(id)) }
            if contains(.cancelAnswer) { timers.append(.cancelAnswer(id)) }
            if contains(.cancelGrace) { timers.append(.cancelGrace(id)) }
            return timers
        }
    }

    /// What one `PQgetResult` returned, without its payload (the driver keeps that).
    enum ResultEvent: Equatable {
        case endOfStep
        case sync
        case aborted
        case result
        case row
        case copyStarted
        case error(PostgresError)
    }

    /// How a request ended, for its caller.
    enum Outcome: Equatable {
        case success
        /// Boxed (`indirect`), like every error an action carries: a `PostgresError` is large,
        /// and an action is copied several times on every statement's path.
        indirect case failure(PostgresError)
    }

    /// One thing for the driver to do.
    enum Action: Equatable {
        // Results
        /// Keep the result just read for request `id` (`replacing`: a script answers with its
        /// last result only).
        case keep(RequestID, replacing: Bool)
        /// Free the result just read.
        case discard
        /// Hand the row just read to the stream of request `id`.
        case deliverRow(RequestID)
        /// Drop the rows a stream buffered (its reader is gone).
        case dropRows(RequestID)
        /// A query started a COPY: end it (the server rolls it back) and drain its data.
        case abortCopy
        // Callers
        /// Request `id` is done: stop its timers, end its stream, and answer its caller
        /// unless `answerCaller` is false (it was answered when it was interrupted).
        case complete(RequestID, Outcome, answerCaller: Bool)
        /// Answer the caller of request `id` now; the request stays in flight and its results
        /// are drained when they come.
        indirect case answer(RequestID, PostgresError)
        // Cancelling
        /// Ask the server to cancel what runs (on a helper thread); report `cancelReturned`.
        case sendCancel(RequestID)
        // Timers
        case startTimer(Timer, Duration)
        case stopTimer(Timer)
        // The socket
        /// Read again now: reading was paused and the buffer drained (or the reader left).
        case resumeReading
        /// The connection is lost: every timer is stopped, every request is gone, and the
        /// callers listed (all but those answered already) fail with their error.
        case lost([(RequestID, PostgresError)])
        /// Connecting succeeded: the session can be used.
        case connected
        /// Connecting failed (or timed out): free the handle and fail the caller.
        indirect case connectFailed(PostgresError)

        static func == (lhs: Action, rhs: Action) -> Bool {
            switch (lhs, rhs) {
            case let (.keep(a, x), .keep(b, y)): a == b && x == y
            case (.discard, .discard), (.abortCopy, .abortCopy), (.resumeReading, .resumeReading), (.connected, .connected): true
            case let (.deliverRow(a), .deliverRow(b)), let (.dropRows(a), .dropRows(b)), let (.sendCancel(a), .sendCancel(b)): a == b
            case let (.complete(a, x, p), .complete(b, y, q)): a == b && x == y && p == q
            case let (.answer(a, x), .answer(b, y)): a == b && x == y
            case let (.startTimer(a, x), .startTimer(b, y)): a == b && x == y
            case let (.stopTimer(a), .stopTimer(b)): a == b
            case let (.lost(a), .lost(b)): a.map(\.0) == b.map(\.0) && a.map(\.1) == b.map(\.1)
            case let (.connectFailed(a), .connectFailed(b)): a == b
            default: false
            }
        }
    }

    /// The next request to put on the wire.
    enum SendStep: Equatable {
        /// Send request `id`'s messages, after entering or leaving libpq's pipeline mode.
        case send(RequestID, enterPipeline: Bool, exitPipeline: Bool)
    }

    /// Whether to read a result now.
    enum ReadDecision: Equatable {
        /// Ask libpq for the next result (if it is not busy).
        case read
        /// Nothing in flight, or a stream's buffer is full: leave the socket until told.
        case wait
    }

    /// Which readiness the socket is watched for.
    struct Interest: Equatable {
        var read: Bool
        var write: Bool
        static let none = Interest(read: false, write: false)
    }

    /// Timings of the cancel protocol.
    struct CancelTimings: Equatable {
        /// How long a cancelled statement may take to answer before the connection is given up.
        var grace: Duration = .seconds(5)
        /// How long the caller of a cancelled statement waits for the server to confirm.
        var answerWait: Duration = .seconds(1)
        /// How often a cancel is sent again while its statement keeps running.
        var retry: Duration = .milliseconds(500)
    }

    /// How many rows a stream may buffer before reading pauses (the server then waits).
    static let streamBufferLimit = 256

    private enum Phase: Equatable {
        case notConnected
        case connecting(Interest)
        case ready
        /// A blocking COPY owns the connection on a helper thread.
        case offloaded
        case broken
        case closed
    }

    private struct Entry {
        let info: RequestInfo
        var statusAtSend: TransactionStatus = .idle
        var sentAfterServerEnded = false
        /// Sending failed before its last byte (its Sync) could reach the server.
        var undelivered = false
        var stepsDone = 0
        /// NULL results since the last real one (two in a row: libpq is idle without a Sync).
        var nullsInARow = 0
        /// Its first error. Boxed: errors are rare, and an entry that carried a whole
        /// `PostgresError` inline was copied (value witness and all) through both queues on
        /// every statement's path.
        var error: PostgresError? {
            get { boxedError?.error }
            set { boxedError = newValue.map(ErrorBox.init) }
        }
        private var boxedError: ErrorBox?
        var interruption: Interruption?
        /// The caller was answered already; results are only drained.
        var answered = false
        /// The stream's reader is gone: rows are dropped.
        var abandoned = false
        var buffered = 0
        /// Its timers that run.
        var timers = RequestTimers()

        init(_ info: RequestInfo) { self.info = info }
    }

    private final class ErrorBox {
        let error: PostgresError
        init(_ error: PostgresError) { self.error = error }
    }

    private struct CancelInFlight: Equatable {
        let request: RequestID
        /// The last cancel call returned.
        var callReturned = false
        /// The request completed while a cancel call was out.
        var requestDone = false
        /// How much of the grace period further retries may still use.
        var retryBudget: Duration
    }

    private var phase = Phase.notConnected
    private var waiting: [Entry] = []
    private var inflight: [Entry] = []
    private var pipelineMode = false
    private var cancel: CancelInFlight?
    private var canCancel = false
    private var readingPaused = false
    private var writePending = false
    private var connectTarget = ""
    private var connectTimerRuns = false
    let timings: CancelTimings

    init(timings: CancelTimings = CancelTimings()) {
        self.timings = timings
    }

    // MARK: What others may ask

    /// Requests sent or waiting (a blocking COPY counts as one).
    var pendingCount: Int { waiting.count + inflight.count + (phase == .offloaded ? 1 : 0) }
    var isBroken: Bool { phase == .broken || phase == .closed }
    var isClosed: Bool { phase == .closed }
    /// A blocking COPY has the connection.
    var isOffloaded: Bool { phase == .offloaded }
    /// A stream is in flight.
    var isStreaming: Bool { inflight.contains { $0.info.mode == .stream } }
    /// The request whose results come next.
    var head: RequestID? { inflight.isEmpty ? nil : inflight[0].info.id }
    /// The last request sent or queued (waiting for it waits for all before it).
    var lastPending: RequestID? { (waiting.last ?? inflight.last)?.info.id }
    /// Timers running now (tests check that none is left behind).
    var activeTimers: Set<Timer> {
        var timers: Set<Timer> = connectTimerRuns ? [.connect] : []
        for entry in inflight + waiting { timers.formUnion(entry.timers.timers(of: entry.info.id)) }
        return timers
    }

    /// Whether request `id` is sent or queued and not complete.
    func isPending(_ id: RequestID) -> Bool {
        inflight.contains { $0.info.id == id } || waiting.contains { $0.info.id == id }
    }

    /// The readiness to watch the socket for.
    var interest: Interest {
        switch phase {
        case .connecting(let interest): interest
        case .ready: Interest(read: !readingPaused, write: writePending)
        case .notConnected, .offloaded, .broken, .closed: .none
        }
    }

    // MARK: Connecting

    /// Connecting to `target` (for messages) began; it must succeed within `timeout`.
    mutating func startConnecting(timeout: Duration, target: String) -> Actions {
        guard phase == .notConnected else { return [] }
        phase = .connecting(Interest(read: false, write: true))
        connectTarget = target
        return [start(.connect, timeout)]
    }

    /// One `PQconnectPoll` step (or `nil`: libpq could not even start).
    mutating func connectPolled(_ poll: ConnectPoll?, failure: @autoclosure () -> PostgresError) -> Actions {
        guard case .connecting = phase else { return [] }
        switch poll {
        case .reading?:
            phase = .connecting(Interest(read: true, write: false))
            return []
        case .writing?:
            phase = .connecting(Interest(read: false, write: true))
            return []
        case .ok?:
            return []
        case .failed?, nil:
            phase = .broken
            var actions: Actions = []
            actions.append(stop(.connect))
            actions.append(.connectFailed(failure()))
            return actions
        }
    }

    /// The session is set up (non-blocking, notice receiver); `canCancel`: libpq gave a
    /// cancel object.
    mutating func connected(canCancel: Bool) -> Actions {
        if case .connecting = phase {} else if phase != .notConnected { return [] }
        phase = .ready
        self.canCancel = canCancel
        var actions: Actions = []
        actions.append(stop(.connect))
        actions.append(.connected)
        return actions
    }

    // MARK: Requests

    /// A caller submitted a request. It is sent by `nextSend` as soon as the mode and any
    /// cancel in flight allow.
    mutating func submit(_ info: RequestInfo) -> Actions {
        guard phase == .ready || phase == .offloaded else {
            var error = Self.closedError(closed: phase == .closed)
            error.lostConnectionOutcome = .safe
            return [.complete(info.id, .failure(error), answerCaller: true)]
        }
        var entry = Entry(info)
        guard let deadline = info.deadline else {
            waiting.append(entry)
            return []
        }
        entry.timers.insert(.deadline)
        waiting.append(entry)
        return [.startTimer(.deadline(info.id), deadline)]
    }

    /// The next request to send, marked as sent; nil when none may go now. A pipelined request
    /// joins others in flight; anything else waits until nothing is. Nothing goes while a
    /// cancel is out: it could reach the next statement.
    mutating func nextSend(transactionStatus: TransactionStatus, serverEndedSession: Bool = false) -> SendStep? {
        guard phase == .ready, cancel == nil, !waiting.isEmpty else { return nil }
        var enter = false, exit = false
        if case .pipelined = waiting[0].info.mode {
            // Not behind a stream (which goes alone, so it would be the head).
            guard inflight.isEmpty || (pipelineMode && inflight[0].info.mode != .stream) else { return nil }
            enter = !pipelineMode
            pipelineMode = true
        } else if waiting[0].info.mode == .stream {
            // Alone, but in pipeline mode with a Sync of its own: libpq turns single-row mode
            // off as it moves on to the Sync. Outside pipeline mode it stayed on, and the next
            // pipelined statement's rows came back one result each (only the last was kept).
            guard inflight.isEmpty else { return nil }
            enter = !pipelineMode
            pipelineMode = true
        } else {
            guard inflight.isEmpty else { return nil }
            exit = pipelineMode
            pipelineMode = false
        }
        var next = waiting.removeFirst()
        next.statusAtSend = transactionStatus
        next.sentAfterServerEnded = serverEndedSession
        inflight.append(next)
        return .send(next.info.id, enterPipeline: enter, exitPipeline: exit)
    }

    /// libpq could not queue request `id` (or leave or enter pipeline mode for it): nothing
    /// of it reached the server, and the connection is given up.
    mutating func sendFailed(_ id: RequestID, reason: String) -> Actions {
        if let index = inflight.firstIndex(where: { $0.info.id == id }) { inflight[index].undelivered = true }
        return connectionLost(reason: reason)
    }

    /// A flush ended; `undelivered`: the request whose Sync was last in the buffer, when the
    /// flush failed right away (the server cannot have committed it).
    mutating func flushed(_ outcome: FlushOutcome, undelivered: RequestID? = nil, reason: @autoclosure () -> String) -> Actions {
        switch outcome {
        case .done:
            writePending = false
            return []
        case .pending:
            writePending = true
            return []
        case .failed:
            if let undelivered, let index = inflight.firstIndex(where: { $0.info.id == undelivered }) { inflight[index].undelivered = true }
            return connectionLost(reason: reason())
        }
    }

    /// Whether to read the next result now.
    mutating func readDecision() -> ReadDecision {
        guard phase == .ready, !inflight.isEmpty else { return .wait }
        if inflight[0].info.mode == .stream, inflight[0].buffered >= Self.streamBufferLimit, !inflight[0].abandoned {
            readingPaused = true
            return .wait
        }
        return .read
    }

    /// libpq returned `event` for the request at the head of the line.
    ///
    /// The head entry is changed in place (`inflight[0]`), not copied out and back for every
    /// result: this runs several times per statement.
    mutating func received(_ event: ResultEvent) -> Actions {
        guard phase == .ready, !inflight.isEmpty else { return event == .endOfStep || event == .sync ? [] : [.discard] }
        let id = inflight[0].info.id
        let action: Action?
        switch inflight[0].info.mode {
        case .pipelined(let steps):
            switch event {
            case .endOfStep:
                // A request ends at its Sync's result, whatever came before: a NULL only
                // separates one step's results from the next. Two in a row while libpq is not
                // busy mean it has nothing left for us, and the Sync will never come.
                inflight[0].stepsDone += 1
                inflight[0].nullsInARow += 1
                if inflight[0].nullsInARow > 1 {
                    return connectionLost(reason: "libpq lost its place in the pipeline (no Sync result for a request); the connection was closed so no answer can go to the wrong caller")
                }
                return []
            case .sync:
                return complete()
            case .result, .row:
                action = .keep(id, replacing: false)
            case .aborted:
                action = .discard
            case .copyStarted:
                action = .abortCopy
                if inflight[0].error == nil { inflight[0].error = Self.copyMisuse }
            case .error(var error):
                action = nil
                if inflight[0].error == nil {
                    if inflight[0].stepsDone < steps { error.stepIndex = inflight[0].stepsDone }
                    inflight[0].error = error
                }
            }
        case .simple:
            switch event {
            case .endOfStep:
                return complete()
            case .result, .row:
                action = .keep(id, replacing: true)
            case .sync, .aborted:
                action = .discard
            case .copyStarted:
                action = .abortCopy
                if inflight[0].error == nil { inflight[0].error = Self.copyMisuse }
            case .error(let error):
                action = nil
                if inflight[0].error == nil { inflight[0].error = error }
            }
        case .stream:
            switch event {
            case .endOfStep:
                // The statement's results end; its Sync's answer ends the request.
                inflight[0].nullsInARow += 1
                if inflight[0].nullsInARow > 1 {
                    return connectionLost(reason: "libpq lost its place in the pipeline (no Sync result for a stream); the connection was closed so no answer can go to the wrong caller")
                }
                return []
            case .sync:
                return complete()
            case .row:
                // The driver says how many rows the stream then holds (`streamBuffer`): a row
                // handed straight to a waiting reader is not buffered.
                action = inflight[0].abandoned ? .discard : .deliverRow(id)
            case .result, .aborted:
                action = .discard
            case .copyStarted:
                action = .abortCopy
                if inflight[0].error == nil { inflight[0].error = Self.copyMisuse }
            case .error(let error):
                action = nil
                if inflight[0].error == nil { inflight[0].error = error }
            }
        }
        inflight[0].nullsInARow = 0
        return action.map { [$0] } ?? []
    }

    /// The head request is done.
    private mutating func complete() -> Actions {
        let entry = inflight.removeFirst()
        let id = entry.info.id
        var actions = stopTimers(of: entry)
        var outcome = Outcome.success
        if var error = entry.error {
            if error.kind == .queryCanceled, case .deadline(let limit) = entry.interruption {
                error.kind = .timeout
                error.message = "the statement ran longer than its deadline (\(limit)) and was cancelled on the server"
            }
            outcome = .failure(error)
        }
        actions.append(.complete(id, outcome, answerCaller: !entry.answered))
        if var cancel, cancel.request == id {
            if cancel.callReturned {
                self.cancel = nil
            } else {
                cancel.requestDone = true
                self.cancel = cancel
            }
        }
        if inflight.isEmpty { readingPaused = false }
        return actions
    }

    // MARK: Streams

    /// The stream of request `id` now holds `buffered` rows (its reader took one).
    mutating func streamBuffer(_ id: RequestID, holds buffered: Int) -> Actions {
        guard let index = inflight.firstIndex(where: { $0.info.id == id }) else { return [] }
        inflight[index].buffered = buffered
        guard readingPaused, buffered < Self.streamBufferLimit / 2 else { return [] }
        readingPaused = false
        return [.resumeReading]
    }

    /// The reader of stream `id` is gone: its rows are dropped, the query cancelled, and its
    /// results drained.
    mutating func abandonStream(_ id: RequestID) -> Actions {
        guard let index = inflight.firstIndex(where: { $0.info.id == id }), !inflight[index].abandoned else { return [] }
        inflight[index].abandoned = true
        inflight[index].buffered = 0
        var actions: Actions = [.dropRows(id)]
        if readingPaused {
            readingPaused = false
            actions.append(.resumeReading)
        }
        return actions + interrupt(id, .cancelled)
    }

    // MARK: Interrupting

    /// The caller of request `id` stopped waiting (its task was cancelled, or its deadline
    /// passed).
    ///
    /// Not yet sent: it never will be. Sent, and nothing else in flight: the server is asked
    /// to cancel it, nothing more is sent until that is settled, and the caller hears the
    /// server's answer (or, after `answerWait`, that it is unconfirmed). Other callers'
    /// statements in flight too: a cancel could hit one of them, so none is sent; the caller
    /// is answered now and the statement's results are drained when they come. Either way, if
    /// the server does not answer within `grace`, the connection is given up.
    mutating func interrupt(_ id: RequestID, _ reason: Interruption) -> Actions {
        if let index = waiting.firstIndex(where: { $0.info.id == id }) {
            var actions = stopTimers(of: waiting.remove(at: index))
            actions.append(.complete(id, .failure(Self.interruptionError(reason, sent: false)), answerCaller: true))
            return actions
        }
        guard let index = inflight.firstIndex(where: { $0.info.id == id }),
              inflight[index].interruption == nil, !inflight[index].answered else { return [] }
        inflight[index].interruption = reason
        var actions: Actions = []
        actions.append(stop(.deadline(id)))
        if inflight[index].info.mode == .stream, !inflight[index].abandoned {
            // The reader gets an error and reads no further; the socket is read again even if
            // the buffer had paused it: the server can only answer the cancel once the rows it
            // is blocked sending have been taken off the wire.
            inflight[index].abandoned = true
            inflight[index].buffered = 0
            actions.append(.dropRows(id))
            if readingPaused {
                readingPaused = false
                actions.append(.resumeReading)
            }
        }
        if inflight.count == 1, cancel == nil, canCancel, phase == .ready {
            cancel = CancelInFlight(request: id, retryBudget: timings.grace - timings.retry)
            actions.append(.sendCancel(id))
            if timings.grace > timings.retry { actions.append(start(.cancelRetry(id), timings.retry)) }
            actions.append(start(.cancelAnswer(id), timings.answerWait))
        } else {
            inflight[index].answered = true
            actions.append(.answer(id, Self.interruptionError(reason, sent: true)))
        }
        actions.append(start(.cancelGrace(id), timings.grace))
        return actions
    }

    /// A cancel call for request `id` returned.
    mutating func cancelReturned(_ id: RequestID) -> Actions {
        guard var cancel, cancel.request == id else { return [] }
        if cancel.requestDone || !inflight.contains(where: { $0.info.id == id }) {
            self.cancel = nil
        } else {
            cancel.callReturned = true
            self.cancel = cancel
        }
        return []
    }

    /// A timer the machine started has fired.
    mutating func timerFired(_ timer: Timer) -> Actions {
        guard clear(timer) else { return [] }
        switch timer {
        case .connect:
            guard case .connecting = phase else { return [] }
            phase = .broken
            return [.connectFailed(PostgresError(kind: .connectionFailure, message: "could not connect to PostgreSQL (\(connectTarget)): no answer within the connect timeout"))]
        case .deadline(let id):
            guard let deadline = (waiting.first { $0.info.id == id } ?? inflight.first { $0.info.id == id })?.info.deadline else { return [] }
            return interrupt(id, .deadline(deadline))
        case .cancelAnswer(let id):
            guard let index = inflight.firstIndex(where: { $0.info.id == id }), !inflight[index].answered,
                  let reason = inflight[index].interruption else { return [] }
            inflight[index].answered = true
            return [.answer(id, Self.interruptionError(reason, sent: true, unconfirmed: true, timings: timings))]
        case .cancelGrace(let id):
            guard inflight.contains(where: { $0.info.id == id }) else { return [] }
            return connectionLost(reason: "the server did not answer within \(timings.grace) of a cancelled statement (a frozen server or a silent network)")
        case .cancelRetry(let id):
            // A cancel that reaches the server before the statement does (a loaded server that
            // has not read it yet) finds nothing running and is dropped, and the statement then
            // runs to its end. So while it is still the only one on the wire and the last cancel
            // call has returned, ask again.
            guard inflight.count == 1, inflight[0].info.id == id, var cancel, cancel.request == id else { return [] }
            guard cancel.callReturned, !cancel.requestDone else {
                // The last call has not returned yet: look again later.
                return cancel.retryBudget > .zero ? [start(.cancelRetry(id), timings.retry)] : []
            }
            cancel.callReturned = false
            cancel.retryBudget -= timings.retry
            self.cancel = cancel
            var actions: Actions = [.sendCancel(id)]
            if cancel.retryBudget > .zero { actions.append(start(.cancelRetry(id), timings.retry)) }
            return actions
        }
    }

    // MARK: A blocking COPY

    /// A COPY takes the connection to a helper thread, which needs nothing in flight.
    /// Returns whether libpq must leave pipeline mode first; nil when it cannot begin now.
    mutating func beginOffload() -> Bool? {
        guard phase == .ready, waiting.isEmpty, inflight.isEmpty else { return nil }
        let exit = pipelineMode
        pipelineMode = false
        phase = .offloaded
        return exit
    }

    /// The helper thread gave the connection back; `bad`: libpq says it is lost.
    mutating func endOffload(bad: Bool, reason: @autoclosure () -> String) -> Actions {
        guard phase == .offloaded else { return [] }
        phase = .ready
        return bad ? connectionLost(reason: reason()) : []
    }

    // MARK: Losing and closing

    /// The connection is gone: every request fails, each told whether it may have been applied.
    mutating func connectionLost(reason: String) -> Actions {
        guard phase != .broken, phase != .closed else { return [] }
        if case .connecting = phase {
            phase = .broken
            var actions: Actions = []
            actions.append(stop(.connect))
            actions.append(.connectFailed(PostgresError(kind: .connectionFailure, message: reason)))
            return actions
        }
        phase = .broken
        var failures: [(RequestID, PostgresError)] = []
        // A caller answered already (interrupted, its statement left to drain) hears nothing more.
        for entry in inflight where !entry.answered {
            var error = PostgresError(kind: .connectionFailure, message: reason)
            let insideTransaction = entry.statusAtSend.isInTransaction
            error.lostConnectionOutcome = (insideTransaction && !entry.info.isCommit) || entry.undelivered || entry.info.changesNothing
                ? .safe : .outcomeUnknown
            // The server said why it ended the session before answering: an administrator's
            // termination or a shutdown aborts the transaction, so nothing of it was applied.
            if let said = entry.error, let state = said.sqlState, ["57P01", "57P02", "57P03"].contains(state) {
                error = said
                error.lostConnectionOutcome = .safe
            } else if entry.error == nil, entry.sentAfterServerEnded {
                // The FATAL came before this statement was sent: the backend was already gone.
                error.lostConnectionOutcome = .safe
            }
            error.hint = error.lostConnectionOutcome == .safe
                ? "the server rolled the transaction back; run it again on a new connection (a pool does this for you)"
                : "the statement was sent and may or may not have been applied; check before running it again"
            failures.append((entry.info.id, error))
        }
        for entry in waiting {
            var error = PostgresError(kind: .connectionFailure, message: reason + " (the statement was never sent)")
            error.lostConnectionOutcome = .safe
            failures.append((entry.info.id, error))
        }
        inflight.removeAll()
        waiting.removeAll()
        cancel = nil
        readingPaused = false
        writePending = false
        connectTimerRuns = false
        return [.lost(failures)]
    }

    /// Closes the connection for good; what is pending fails.
    mutating func close() -> Actions {
        let actions = connectionLost(reason: "the connection was closed")
        phase = .closed
        return actions
    }

    // MARK: Helpers

    private mutating func start(_ timer: Timer, _ after: Duration) -> Action {
        mark(timer, running: true)
        return .startTimer(timer, after)
    }

    private mutating func stop(_ timer: Timer) -> Action? {
        clear(timer) ? .stopTimer(timer) : nil
    }

    /// Marks `timer` stopped; returns whether it ran.
    private mutating func clear(_ timer: Timer) -> Bool {
        mark(timer, running: false)
    }

    /// Records whether `timer` runs; returns whether it ran before. A request's timers live in
    /// its entry (a timer of a request no longer pending does not run).
    @discardableResult
    private mutating func mark(_ timer: Timer, running: Bool) -> Bool {
        guard let bit = timer.bit, let id = timer.request else {
            defer { connectTimerRuns = running }
            return connectTimerRuns
        }
        if let index = inflight.firstIndex(where: { $0.info.id == id }) {
            return running ? !inflight[index].timers.insert(bit).inserted : inflight[index].timers.remove(bit) != nil
        }
        if let index = waiting.firstIndex(where: { $0.info.id == id }) {
            return running ? !waiting[index].timers.insert(bit).inserted : waiting[index].timers.remove(bit) != nil
        }
        return false
    }

    /// Stops the timers of a request leaving the machine.
    private func stopTimers(of entry: Entry) -> Actions {
        // Bit by bit rather than through `timers(of:)`: this runs for every statement.
        var actions: Actions = []
        let id = entry.info.id
        if entry.timers.contains(.deadline) { actions.append(.stopTimer(.deadline(id))) }
        if entry.timers.contains(.cancelRetry) { actions.append(.stopTimer(.cancelRetry(id))) }
        if entry.timers.contains(.cancelAnswer) { actions.append(.stopTimer(.cancelAnswer(id))) }
        if entry.timers.contains(.cancelGrace) { actions.append(.stopTimer(.cancelGrace(id))) }
        return actions
    }

    static let copyMisuse = PostgresError(kind: .misuse, message: "COPY cannot run through query() or stream(); use copyIn or copyOut. The COPY was aborted")

    static func closedError(closed: Bool) -> PostgresError {
        var error = PostgresError(kind: .connectionFailure, message: closed
            ? "the connection is closed; open a new one (a pool does this for you)"
            : "the connection is broken; open a new one (a pool does this for you)")
        error.lostConnectionOutcome = .safe
        return error
    }

    static func interruptionError(_ reason: Interruption, sent: Bool, unconfirmed: Bool = false, timings: CancelTimings = CancelTimings()) -> PostgresError {
        var error: PostgresError
        let fate = unconfirmed
            ? "a cancel was sent but the server has not answered within \(timings.answerWait) (a busy server or a silent network); the connection is closed if it stays silent"
            : "it was left to finish on a connection shared with other callers, and its result is discarded"
        switch reason {
        case .cancelled:
            error = PostgresError(kind: .queryCanceled, message: sent
                ? "the task was cancelled while the statement ran; " + fate
                : "the task was cancelled before the statement was sent", sqlState: "57014")
        case .deadline(let limit):
            error = PostgresError(kind: .timeout, message: sent
                ? "the statement ran longer than its deadline (\(limit)); " + fate
                : "the statement waited longer than its deadline (\(limit)) and was never sent")
        }
        error.lostConnectionOutcome = sent ? .outcomeUnknown : .safe
        return error
    }
}
