import CEventLoop
import Foundation
import Synchronization

/// What another thread may read about a connection without hopping onto its loop: the pool
/// takes back an idle, clean connection without waking the loop.
final class ConnectionMirror: Sendable {
    /// `TransactionStatus` after the last completed request.
    let transactionStatus = Atomic<UInt8>(TransactionStatus.idle.rawValue)
    let broken = Atomic<Bool>(false)
    /// Requests sent or waiting.
    let pending = Atomic<Int>(0)
    /// Something may have changed session state (SET, LISTEN, temp tables, advisory locks…):
    /// the pool resets the session before lending the connection again.
    let sessionDirty = Atomic<Bool>(false)
    /// A row stream is open.
    let streaming = Atomic<Bool>(false)
    /// Requests handed to the socket, and the writes that carried them: with libpq 17 or newer
    /// the requests of one loop batch share a write.
    let requestsWritten = Atomic<Int>(0)
    let writes = Atomic<Int>(0)
    /// The server sent FATAL while no statement ran (an administrator's termination, a
    /// shutdown, an idle-session timeout): it ends the session and runs nothing more.
    let serverEndedSession = Atomic<Bool>(false)
    /// Requests a caller's thread queued without the isolated path (`queryFromCaller`; for
    /// tests and the benchmarks).
    let queuedFromCaller = Atomic<Int>(0)

    var isIdle: Bool {
        transactionStatus.load(ordering: .acquiring) == TransactionStatus.idle.rawValue && pending.load(ordering: .acquiring) == 0
    }
}

/// A notification from `LISTEN`.
///
/// ```swift
/// for try await notification in try await connection.listen("child_changed") { print(notification.payload) }
/// ```
public struct PostgresNotification: Sendable, Hashable {
    public var channel: String
    public var payload: String
    /// The server process that sent it.
    public var senderPID: Int32
}

/// Performs what `ConnectionStateMachine` decides for one libpq connection, on its event
/// loop's thread: it connects (`PQconnectPoll` as the socket becomes ready), sends what the
/// machine says to send, reads results and tells the machine what came, runs the machine's
/// timers, sends cancel requests from helper threads, and answers callers through their
/// continuations.
///
/// The driver holds no rules. What it owns are the effects: the libpq handle, the socket's
/// registration, the timers, the callers' continuations and the results' payloads.
///
/// Every method runs on the loop's thread (the owning actor's executor is the same loop).
final class ConnectionDriver: EventLoop.Handler, @unchecked Sendable {
    let loop: EventLoop
    let mirror = ConnectionMirror()
    private var machine = ConnectionStateMachine()
    private var libpq: LibPQConnection?
    var secrets: [String]

    private var socket: Int32 = -1
    private var token: UInt64?
    private var watched = ConnectionStateMachine.Interest.none

    private var connectContinuation: CheckedContinuation<Void, any Error>?
    private var requests: [UInt64: Request] = [:]
    /// The loop's id of the connect timer; a request's timers are kept in its `Request`.
    private var connectTimer: TimerHeap.ID?
    private var completionWaiters: [UInt64: [CheckedContinuation<Void, Never>]] = [:]
    private var cancelObject: CancelObject?
    /// The last request whose Sync waits in libpq's buffer, and how many do (libpq 17+): they
    /// leave in one write when the loop's batch of work ends.
    private var lastUnflushed: UInt64?
    private var unflushedCount = 0
    /// The machine asked to read again (a paused stream drained, or its reader left).
    private var readAgain = false
    private var inEvent = false
    /// When a caller's thread waits for its own answer (`awaitAnswerInPlace`).
    private var answerWaits = AnswerWaitPolicy()

    var notificationHandler: ((PostgresNotification) -> Void)?
    var noticeBox: NoticeBox?
    /// Called when the connection breaks (the LISTEN sequence reports it).
    var breakHandler: (() -> Void)?

    /// Whether requests sent in one batch of the loop share a write (libpq 17 or newer).
    static var coalescesWrites: Bool { LibPQConnection.canQueueSync }

    init(loop: EventLoop, secrets: [String]) {
        self.loop = loop
        self.secrets = secrets
    }

    deinit { libpq?.finish() }

    // MARK: Events in, actions out

    /// Runs `event` against the machine, performs its actions, then does what follows any
    /// event: send what may go now, watch the socket for what the machine waits for, and
    /// publish the counts other threads read.
    private func handle(_ event: (inout ConnectionStateMachine) -> ConnectionStateMachine.Actions) {
        perform(event(&machine))
        settle()
    }

    private func settle() {
        guard !inEvent else { return }
        inEvent = true
        defer { inEvent = false }
        repeat {
            pump()
            if readAgain {
                readAgain = false
                readInput()
            }
        } while readAgain
        updateInterest()
        mirror.pending.store(machine.pendingCount, ordering: .releasing)
        mirror.streaming.store(machine.isStreaming, ordering: .releasing)
    }

    private func perform(_ actions: ConnectionStateMachine.Actions, payload: ResultStorage? = nil) {
        for action in actions {
            switch action {
            case .keep(let id, let replacing):
                guard let payload, let request = requests[id] else { continue }
                if replacing { request.results = [] }
                request.results.append(payload)
            case .discard:
                break // the payload is freed with its last reference
            case .deliverRow(let id):
                guard let payload, case .stream(_, let state)? = requests[id]?.kind else { continue }
                state.push(payload)
            case .dropRows(let id):
                if case .stream(_, let state)? = requests[id]?.kind { state.drop() }
            case .abortCopy:
                libpq?.abortUnexpectedCopy()
            case .complete(let id, let outcome, let answerCaller):
                complete(id, outcome, answerCaller: answerCaller)
            case .answer(let id, let error):
                guard let request = requests[id] else { continue }
                let error = described(error, for: request)
                request.finish(.failure(error))
                if case .stream(_, let state) = request.kind, !state.finished { state.end(error) }
            case .sendCancel(let id):
                cancelObject?.send { [loop] in
                    loop.execute { [self] in handle { $0.cancelReturned(id) } }
                }
            case .startTimer(let timer, let delay):
                // A request's timer outlives neither it nor its request (the machine stops it
                // first): with the request gone there is nothing to time.
                guard timer == .connect || timer.request.flatMap({ requests[$0] }) != nil else { continue }
                loop.cancelTimer(swapTimerID(timer, nil))
                swapTimerID(timer, loop.schedule(at: .now + delay) { [self] in
                    swapTimerID(timer, nil)
                    handle { $0.timerFired(timer) }
                })
            case .stopTimer(let timer):
                loop.cancelTimer(swapTimerID(timer, nil))
            case .resumeReading:
                readAgain = true
            case .lost(let failures):
                lose(failures)
            case .connected:
                guard let continuation = connectContinuation else { continue }
                connectContinuation = nil
                continuation.resume()
            case .connectFailed(let error):
                unwatch()
                libpq?.finish()
                libpq = nil
                markBroken()
                cancelAllTimers()
                guard let continuation = connectContinuation else { continue }
                connectContinuation = nil
                continuation.resume(throwing: error)
            }
        }
    }

    /// Sets where the loop's id of `timer` is kept (the connect timer here, a request's timers
    /// in its request: no `Timer` is hashed per statement); returns the id it held.
    @discardableResult
    private func swapTimerID(_ timer: ConnectionStateMachine.Timer, _ new: TimerHeap.ID?) -> TimerHeap.ID? {
        guard let id = timer.request else {
            defer { connectTimer = new }
            return connectTimer
        }
        guard let request = requests[id] else { return nil }
        defer { request.timerIDs[timer] = new }
        return request.timerIDs[timer]
    }

    private func cancelAllTimers() {
        loop.cancelTimer(connectTimer)
        connectTimer = nil
        for request in requests.values {
            for id in request.timerIDs.all { loop.cancelTimer(id) }
            request.timerIDs = RequestTimerIDs()
        }
    }

    private func complete(_ id: UInt64, _ outcome: ConnectionStateMachine.Outcome, answerCaller: Bool) {
        guard let request = requests.removeValue(forKey: id) else { return }
        loop.requestsInFlight -= 1
        if let libpq { mirror.transactionStatus.store(libpq.transactionStatus.rawValue, ordering: .releasing) }
        switch outcome {
        case .success:
            if case .stream(_, let state) = request.kind, !state.finished { state.end(nil) }
            // Answered once the loop's batch is done (see EventLoop.answerAfterBatch).
            if answerCaller { loop.answerAfterBatch { request.finish(.success(request.results)) } }
        case .failure(let error):
            let error = described(error, for: request)
            if case .stream(_, let state) = request.kind, !state.finished { state.end(error) }
            if answerCaller { loop.answerAfterBatch { request.finish(.failure(error)) } }
        }
        if !completionWaiters.isEmpty { completionWaiters.removeValue(forKey: id)?.forEach { $0.resume() } }
    }

    /// Names the statement an error came from: the failing step's own text in a batch.
    private func described(_ error: PostgresError, for request: Request) -> PostgresError {
        var error = error
        if let step = error.stepIndex, let text = request.statementText(ofStep: step) {
            error.query = text
        } else if error.query == nil {
            error.query = request.text
        }
        return error
    }

    private func lose(_ failures: [(UInt64, PostgresError)]) {
        markBroken()
        unwatch()
        cancelAllTimers()
        lastUnflushed = nil
        unflushedCount = 0
        for (id, error) in failures {
            guard let request = requests.removeValue(forKey: id) else { continue }
            loop.requestsInFlight -= 1
            let error = described(error, for: request)
            if case .stream(_, let state) = request.kind, !state.finished { state.end(error) }
            request.finish(.failure(error))
        }
        for request in requests.values { request.finish(.failure(ConnectionStateMachine.closedError(closed: machine.isClosed))) }
        loop.requestsInFlight -= requests.count
        requests.removeAll()
        for waiters in completionWaiters.values { waiters.forEach { $0.resume() } }
        completionWaiters.removeAll()
        breakHandler?()
    }

    private func markBroken() {
        mirror.broken.store(true, ordering: .releasing)
    }

    // MARK: Connecting

    /// Opens the connection: `PQconnectStartParams` on a helper thread (it may resolve a host
    /// name, which blocks), then `PQconnectPoll` on the loop until ready, failed, or `timeout`;
    /// `continuation` hears which.
    func connect(keywords: [String], values: [String], timeout: Duration, description: String, continuation: CheckedContinuation<Void, any Error>) {
        connectContinuation = continuation
        handle { $0.startConnecting(timeout: timeout, target: description) }
        let loop = self.loop
        runOnHelperThread { [self] in
            let started = LibPQConnection.start(keywords: keywords, values: values)
            loop.execute { [self] in adopt(started) }
        }
    }

    private func adopt(_ connection: LibPQConnection?) {
        guard connectContinuation != nil else {
            connection?.finish() // the deadline passed while the helper thread started it
            return
        }
        guard let connection else {
            handle { $0.connectPolled(nil, failure: PostgresError(kind: .connectionFailure, message: "libpq could not allocate a connection (out of memory)")) }
            return
        }
        libpq = connection
        if let password = connection.password, !password.isEmpty { secrets.append(password) }
        if connection.isBad {
            handle { $0.connectPolled(.failed, failure: connectError()) }
            return
        }
        // libpq asks to wait until the socket is writable before the first poll.
        watch(connection.socket, interest: machine.interest)
    }

    private func pollConnect() {
        guard let libpq, connectContinuation != nil else { return }
        let poll = libpq.pollConnect()
        handle { $0.connectPolled(poll, failure: connectError()) }
        guard poll == .ok, connectContinuation != nil else {
            if connectContinuation != nil { watch(libpq.socket, interest: machine.interest) }
            return
        }
        guard libpq.setNonBlocking(true) else {
            handle { $0.connectionLost(reason: "libpq refused non-blocking mode") }
            return
        }
        cancelObject = libpq.makeCancel()
        let box = NoticeBox(handler: noticeBox?.handler, mirror: mirror)
        noticeBox = box
        libpq.installNoticeReceiver(box)
        handle { $0.connected(canCancel: cancelObject != nil) }
    }

    private func connectError() -> PostgresError {
        let message = lastErrorMessage()
        var error = PostgresError(kind: .connectionFailure, message: "could not connect to PostgreSQL: \(message)")
        error.hint = "check the host, port, user and password (URL, conninfo or PG* variables), and that the server is running"
        if message.contains("unsupported startup parameter") {
            // PgBouncer refuses libpq's `options`, which carries PostgresConfiguration.serverSettings.
            error.hint = "a connection pooler (PgBouncer) refused the startup options that serverSettings sends: set PostgresConfiguration.pooler = .transaction and leave serverSettings empty (set them on the role with ALTER ROLE … SET), or connect to PostgreSQL directly"
        }
        return error
    }

    // MARK: The socket

    private func watch(_ fd: Int32, interest wanted: ConnectionStateMachine.Interest) {
        let bits = Self.bits(of: wanted)
        if fd != socket || token == nil {
            unwatch()
            socket = fd
            token = loop.register(fd, interest: bits, handler: self)
            watched = wanted
            if token == nil { handle { $0.connectionLost(reason: "the connection's socket could not be watched") } }
        } else if wanted != watched, let token {
            // libpq may have closed the descriptor and opened another with the same number
            // (trying the next address): then it is registered anew.
            if !loop.modify(fd, token: token, interest: bits) {
                loop.forget(token)
                self.token = loop.register(fd, interest: bits, handler: self)
                if self.token == nil { handle { $0.connectionLost(reason: "the connection's socket could not be watched") } }
            }
            watched = wanted
        }
    }

    private static let reading = ConnectionStateMachine.Interest(read: true, write: false)

    private static func bits(of interest: ConnectionStateMachine.Interest) -> Int32 {
        Int32((interest.read ? BB_INTEREST_READ : 0) | (interest.write ? BB_INTEREST_WRITE : 0))
    }

    /// Gives the socket back to the loop's poller as `watched` says (`awaitAnswerInPlace`).
    private func rewatch() {
        guard let token, socket >= 0 else { return }
        if !loop.modify(socket, token: token, interest: Self.bits(of: watched)) {
            loop.forget(token)
            self.token = loop.register(socket, interest: Self.bits(of: watched), handler: self)
            if self.token == nil { handle { $0.connectionLost(reason: "the connection's socket could not be watched") } }
        }
    }

    private func unwatch() {
        if let token, socket >= 0 { loop.unregister(socket, token: token) }
        token = nil
        socket = -1
        watched = .none
    }

    private func updateInterest() {
        guard token != nil, let libpq, !machine.isBroken else { return }
        watch(libpq.socket, interest: machine.interest)
    }

    func ioReady(readable: Bool, writable: Bool, failed: Bool) {
        if connectContinuation != nil {
            pollConnect()
            return
        }
        // A blocking COPY's helper thread owns libpq meanwhile: the loop must not touch it.
        guard libpq != nil, !machine.isBroken, !machine.isOffloaded else { return }
        if writable && machine.interest.write { flushNow(undelivered: nil) }
        if readable || failed { readInput(hungUp: failed) }
        settle()
    }

    // MARK: The caller's own wait

    /// Waits on the calling thread, up to `limit`, for request `id`'s answer, and reads it:
    /// the caller's thread runs in place of the loop's, which sleeps (`EventLoop.runInPlace`).
    /// True when the request completed (its caller is answered at the end of the run in place);
    /// false when the time ran out or work came for the loop (`wake`, its wake-up descriptor,
    /// turned readable), and nil when it did not wait: the loop's thread then takes the answer
    /// as usual.
    ///
    /// It waits only for a request that is alone on its connection, written out, and not a
    /// stream, and not after recent waits ran out (`AnswerWaitPolicy`). Meanwhile the socket is
    /// off the loop's poller, so that the loop's thread does not wake for the same answer.
    func awaitAnswerInPlace(_ id: UInt64, upTo limit: Duration, wake: Int32) -> Bool? {
        guard requests.count == 1, requests[id] != nil, libpq != nil, !machine.isBroken, !machine.isOffloaded,
              !machine.isStreaming, watched == Self.reading, answerWaits.mayWait() else { return nil }
        guard let token else { return nil }
        guard loop.modify(socket, token: token, interest: 0) else {
            rewatch() // the descriptor is no longer registered: registered anew
            return nil
        }
        let clock = ContinuousClock()
        let deadline = clock.now + limit
        var interrupted = false
        while requests[id] != nil, !machine.isBroken, watched == Self.reading {
            let left = deadline - clock.now
            guard left > .zero else { break }
            let ready = bb_wait_readable(socket, wake, left.nanoseconds)
            guard ready == 1 || ready == 2 else {
                interrupted = ready == 3
                break
            }
            ioReady(readable: true, writable: false, failed: ready == 2)
        }
        rewatch()
        let answered = requests[id] == nil
        // Work that came for the loop says nothing of how long answers take.
        if answered || !interrupted { answerWaits.record(answered: answered) }
        return answered
    }

    // MARK: Sending

    /// Queues `request`; it is sent as soon as the connection's mode and any cancel in flight
    /// allow, pipelined behind what is already in flight.
    func submit(_ request: Request, deadline: Duration?) {
        request.info.deadline = deadline
        requests[request.id] = request
        loop.requestsInFlight += 1
        handle { $0.submit(request.info) }
    }

    private func pump() {
        while let libpq, case .send(let id, let enter, let exit)? = machine.nextSend(
            transactionStatus: libpq.transactionStatus, serverEndedSession: mirror.serverEndedSession.load(ordering: .acquiring)) {
            guard let request = requests[id] else { continue }
            if exit && !libpq.exitPipelineMode() {
                return perform(machine.sendFailed(id, reason: "libpq could not leave pipeline mode (\(lastErrorMessage())); the connection was closed"))
            }
            if enter && !libpq.enterPipelineMode() {
                return perform(machine.sendFailed(id, reason: lostMessage()))
            }
            guard send(request, on: libpq) else {
                return perform(machine.sendFailed(id, reason: lostMessage()))
            }
        }
    }

    /// Hands `request`'s messages to libpq; false when libpq could not queue them.
    private func send(_ request: Request, on libpq: LibPQConnection) -> Bool {
        switch request.kind {
        case .extended(let steps):
            for step in steps { guard send(step, on: libpq) else { return false } }
            return sendSync(request, on: libpq)
        case .simple(let script):
            guard libpq.sendQuery(script) else { return false }
            writeNow(request.id)
            return true
        case .stream(let step, _):
            guard send(step, on: libpq), libpq.setSingleRowMode() else { return false }
            return sendSync(request, on: libpq)
        }
    }

    /// Ends a pipelined request with its Sync: queued for the loop's batch write (libpq 17 or
    /// newer), or flushed now.
    private func sendSync(_ request: Request, on libpq: LibPQConnection) -> Bool {
        let (ok, queued) = libpq.pipelineSync()
        guard ok else { return false }
        if queued {
            if lastUnflushed == nil { loop.afterThisBatch { [self] in flushQueued() } }
            lastUnflushed = request.id
            unflushedCount += 1
            return true
        }
        writeNow(request.id)
        return true
    }

    /// Flushes request `id`, the only one in this write.
    private func writeNow(_ id: UInt64) {
        mirror.requestsWritten.add(1, ordering: .relaxed)
        mirror.writes.add(1, ordering: .relaxed)
        flushNow(undelivered: id)
    }

    private func send(_ step: Request.Step, on libpq: LibPQConnection) -> Bool {
        switch step {
        case .prepare(let name, let text, let types): libpq.sendPrepare(name: name, text: text, types: types)
        case .describe(let name): libpq.sendDescribePrepared(name: name)
        case .execute(let name, let statement, let format): libpq.sendQueryPrepared(name: name, statement: statement, format: format)
        case .executeUnnamed(let statement, let format): libpq.sendQueryParams(statement, format: format)
        case .deallocate(let name): libpq.sendQueryParams(text: "DEALLOCATE \(name)")
        }
    }

    /// Flushes libpq's buffer. A flush that fails right away failed before `undelivered`'s
    /// closing Sync was delivered: the server cannot have committed it.
    private func flushNow(undelivered: UInt64?) {
        guard let libpq else { return }
        perform(machine.flushed(libpq.flush(), undelivered: undelivered, reason: lostMessage()))
    }

    /// Sends what `send` queued during the loop's batch, in one write.
    private func flushQueued() {
        let last = lastUnflushed, count = unflushedCount
        lastUnflushed = nil
        unflushedCount = 0
        // Offloaded (a blocking COPY took the connection): its helper's own calls flush.
        guard libpq != nil, !machine.isBroken, !machine.isOffloaded, let last else { return }
        mirror.requestsWritten.add(count, ordering: .relaxed)
        mirror.writes.add(1, ordering: .relaxed)
        // As in flushNow, for the batch's last request only: its Sync ends the buffer. Requests
        // before it may have reached the server before the write failed: unknown.
        flushNow(undelivered: last)
        settle()
    }

    // MARK: Receiving

    /// Reads what the socket holds (unless a full stream paused reading: then the server waits;
    /// but a socket that hung up is read anyway, so its end is seen), then hands results over.
    private func readInput(hungUp: Bool = false) {
        guard let libpq, !machine.isBroken, !machine.isOffloaded else { return }
        if machine.interest.read || hungUp {
            guard libpq.consumeInput() else {
                return perform(machine.connectionLost(reason: lostMessage()))
            }
        }
        drainResults(libpq)
        deliverNotifications(libpq)
        if libpq.isBad, !machine.isBroken { perform(machine.connectionLost(reason: lostMessage())) }
    }

    private func drainResults(_ libpq: LibPQConnection) {
        while machine.readDecision() == .read {
            guard !libpq.isBusy, let head = machine.head else { return }
            // The request's text names the statement in an error; looked up only for one.
            switch libpq.nextResult(query: self.requests[head]?.text ?? "", secrets: secrets) {
            case .endOfStep: perform(machine.received(.endOfStep))
            case .sync: perform(machine.received(.sync))
            case .aborted: perform(machine.received(.aborted))
            case .result(let storage): perform(machine.received(.result), payload: storage)
            case .row(let storage):
                perform(machine.received(.row), payload: storage)
                if case .stream(_, let state)? = requests[head]?.kind { perform(machine.streamBuffer(head, holds: state.buffered)) }
            case .copyStarted: perform(machine.received(.copyStarted))
            case .error(let error): perform(machine.received(.error(error)))
            }
        }
    }

    private func deliverNotifications(_ libpq: LibPQConnection) {
        for notification in libpq.takeNotifications() { notificationHandler?(notification) }
    }

    // MARK: Completion

    /// The last request sent or queued, if any (waiting for it waits for all before it).
    var lastPendingID: UInt64? { machine.lastPending }

    /// Whether request `id` is sent or queued and not complete.
    func isPending(_ id: UInt64) -> Bool { machine.isPending(id) }

    /// Resumes `continuation` when request `id` completes, or now if it has. (Checking and
    /// registering in one call: an await between them could miss the completion.)
    func whenComplete(_ id: UInt64, _ continuation: CheckedContinuation<Void, Never>) {
        guard machine.isPending(id) else { return continuation.resume() }
        completionWaiters[id, default: []].append(continuation)
    }

    // MARK: Streams

    /// A buffered row of `state`, if any (reading resumes when the buffer drains).
    func takeRow(_ state: RowStreamState) -> ResultStorage? {
        guard let row = state.popBuffered() else { return nil }
        handle { $0.streamBuffer(state.requestID, holds: state.buffered) }
        return row
    }

    /// `continuation` gets the next row of `state` (or nil at its end, or its error): now if
    /// one is buffered or the stream ended, else when it arrives.
    func whenRowArrives(_ state: RowStreamState, _ continuation: CheckedContinuation<ResultStorage?, any Error>) {
        if let row = takeRow(state) { return continuation.resume(returning: row) }
        if state.finished {
            if let failure = state.failure { return continuation.resume(throwing: failure) }
            return continuation.resume(returning: nil)
        }
        state.waiting = continuation
        handle { $0.streamBuffer(state.requestID, holds: state.buffered) }
    }

    /// The reader is gone: rows are dropped, the query is cancelled, and its results drained.
    func abandonStream(_ state: RowStreamState) {
        if let waiting = state.waiting {
            state.waiting = nil
            waiting.resume(returning: nil)
        }
        state.drop()
        handle { $0.abandonStream(state.requestID) }
        readAgain = true
        settle()
    }

    // MARK: Interrupting

    /// The caller of request `id` stopped waiting: see `ConnectionStateMachine.interrupt`.
    func interrupt(_ id: UInt64, _ reason: ConnectionStateMachine.Interruption) {
        handle { $0.interrupt(id, reason) }
    }

    // MARK: Closing

    /// Whether `close()` ran (a connection that broke on its own is not closed yet).
    var isClosedForGood: Bool { machine.isClosed }

    var isBroken: Bool { machine.isBroken }

    /// Closes the connection; pending requests fail.
    func close() {
        guard !machine.isClosed else { return }
        if connectContinuation != nil {
            handle { $0.connectionLost(reason: "the connection was closed while connecting") }
        }
        handle { $0.close() }
        markBroken()
        unwatch()
        cancelObject = nil
        libpq?.finish()
        libpq = nil
        // libpq no longer calls the notice receiver: what the handler captured is let go now,
        // not when the last reference to this connection goes.
        noticeBox = nil
    }

    func closedError() -> PostgresError { ConnectionStateMachine.closedError(closed: machine.isClosed) }

    // MARK: Blocking work (COPY)

    /// Hands the connection, in blocking mode, to a helper thread (call when nothing is
    /// pending): the loop leaves the socket alone until `endBlocking`. For COPY, whose writer
    /// API is synchronous.
    func beginBlocking() throws -> LibPQConnection {
        guard let libpq, !machine.isBroken else { throw closedError() }
        guard let exitPipeline = machine.beginOffload() else {
            throw PostgresError(kind: .misuse, message: "a COPY needs the connection to itself, and statements are still in flight")
        }
        if exitPipeline && !libpq.exitPipelineMode() {
            handle { $0.endOffload(bad: true, reason: "libpq could not leave pipeline mode for a COPY (\(lastErrorMessage())); the connection was closed") }
            throw PostgresError(kind: .protocolViolation, message: "could not leave pipeline mode for a COPY")
        }
        settle()
        libpq.setNonBlocking(false)
        return libpq
    }

    func endBlocking() {
        guard let libpq else { return }
        libpq.setNonBlocking(true)
        mirror.transactionStatus.store(libpq.transactionStatus.rawValue, ordering: .releasing)
        handle { $0.endOffload(bad: libpq.isBad, reason: lostMessage()) }
    }

    /// Sends a cancel request for what runs now (a blocking COPY), from a helper thread.
    func cancelBlocking() {
        cancelObject?.send {}
    }

    // MARK: Facts libpq keeps locally

    func lastErrorMessage() -> String {
        guard let libpq else { return "no connection" }
        return Redaction.redact(libpq.errorMessage, secrets: secrets).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    private func lostMessage() -> String { "the connection to the server was lost: \(lastErrorMessage())" }

    /// Quotes a name with `PQescapeIdentifier`.
    func escapeIdentifier(_ name: String) throws -> String {
        guard let libpq, !machine.isBroken else { throw closedError() }
        guard !name.utf8.contains(0) else {
            throw PostgresError(kind: .invalidParameter, message: "an identifier contains a NUL character")
        }
        guard let escaped = libpq.escapeIdentifier(name) else {
            throw PostgresError(kind: .invalidParameter, message: "cannot quote identifier: " + lastErrorMessage())
        }
        return escaped
    }

    var backendPID: Int32 { libpq?.backendPID ?? 0 }
    var serverVersion: Int { libpq?.serverVersion ?? 0 }
    var transactionStatus: TransactionStatus { libpq?.transactionStatus ?? .unknown }
    /// The host (or socket folder), port and database this connection reached.
    var serverIdentity: ServerIdentity {
        guard let libpq else { return ServerIdentity(address: "", port: nil, database: "") }
        return ServerIdentity(address: libpq.host, port: Int(libpq.port), database: libpq.database)
    }
    func parameterStatus(_ name: String) -> String? { libpq?.parameterStatus(name) }
}

/// Where a connection's notices go: the caller's handler, and the mirror, which remembers a
/// FATAL that arrived while no statement ran (the server ends the session; a statement sent in
/// that moment is known never to have run).
final class NoticeBox: Sendable {
    let handler: (@Sendable (PostgresNotice) -> Void)?
    let mirror: ConnectionMirror?
    init(handler: (@Sendable (PostgresNotice) -> Void)?, mirror: ConnectionMirror? = nil) {
        self.handler = handler
        self.mirror = mirror
    }

    func receive(_ notice: PostgresNotice) {
        if notice.severity == "FATAL" || notice.severity == "PANIC" {
            mirror?.serverEndedSession.store(true, ordering: .releasing)
        }
        handler?(notice)
    }
}

/// Carries a non-Sendable value across threads where the hand-over is ordered by other means
/// (a continuation, a loop post).
final class UncheckedBox<T>: @unchecked Sendable {
    var value: T
    init(_ value: T) { self.value = value }
}
