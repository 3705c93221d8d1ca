import CEventLoop
import CLibPQ
import Foundation
import Synchronization

/// What another thread may read about a connection without hopping onto its loop: the pool
/// releases an idle, clean connection without waking the loop.
final class ConnectionMirror: Sendable {
    /// `PQTRANS_*` after the last completed request.
    let transactionStatus = Atomic<UInt32>(PQTRANS_IDLE.rawValue)
    let broken = Atomic<Bool>(false)
    /// Requests sent or waiting.
    let pending = Atomic<Int>(0)
    /// Something may have changed session state (SET, LISTEN, temp tables, advisory locks…):
    /// the pool resets the session before lending the connection again.
    let sessionDirty = Atomic<Bool>(false)
    /// A row stream is open.
    let streaming = Atomic<Bool>(false)
    /// Requests handed to the socket, and the writes that carried them: with libpq 17 or newer
    /// the requests of one loop batch share a write (see `ConnectionCore.coalescesWrites`).
    let requestsWritten = Atomic<Int>(0)
    let writes = Atomic<Int>(0)
    /// The server sent FATAL while no statement ran (an administrator's termination, a
    /// shutdown, an idle-session timeout): it ends the session and runs nothing more.
    let serverEndedSession = Atomic<Bool>(false)

    var isIdle: Bool {
        transactionStatus.load(ordering: .acquiring) == PQTRANS_IDLE.rawValue && pending.load(ordering: .acquiring) == 0
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

/// The libpq connection behind one `PostgresConnection`, driven without blocking by its event
/// loop: connecting (`PQconnectPoll`), sending requests back to back in pipeline mode, each with
/// its own sync point, reading results as the socket becomes readable, delivering
/// notifications, enforcing deadlines with the loop's timers, and cancelling without ever
/// letting a cancel reach a later statement.
///
/// Every method runs on the loop's thread (the owning actor's executor is the same loop). The
/// core has no async methods: the actor awaits, with continuations it creates in its own
/// isolation and hands to the core, so nothing here can run on the global pool.
final class ConnectionCore: EventLoop.Handler, @unchecked Sendable {
    let loop: EventLoop
    let mirror = ConnectionMirror()
    private(set) var conn: OpaquePointer?
    private var socket: Int32 = -1
    private var token: UInt64?
    private var interest: Int32 = 0
    var secrets: [String]

    // Connecting
    private var connectContinuation: CheckedContinuation<Void, any Error>?
    private var connectTimer: TimerHeap.ID?

    // Requests: sent, in order, waiting for results; and not yet sent.
    private var inflight: [Request] = []
    private var waiting: [Request] = []
    private var pipelineOn = false
    private var flushPending = false
    /// The last request queued in libpq's buffer since the last flush, and how many were
    /// (only with `queueSync`). A flush is scheduled exactly while `lastUnflushed` is set.
    private var lastUnflushed: Request?
    private var unflushedCount = 0
    /// libpq 17's `PQsendPipelineSync` (a Sync queued without flushing), when the loaded libpq
    /// has it: requests then wait in libpq's buffer until the loop's batch of work ends, and the
    /// requests of one batch leave in one write (one system call, one wake-up of the server
    /// process instead of one per request). With an older libpq, `PQpipelineSync` flushes each
    /// request at once. `BB_POSTGRES_FLUSH_EACH=1` turns coalescing off, for comparisons.
    private static let queueSync: bb_send_pipeline_sync_fn? =
        ProcessInfo.processInfo.environment["BB_POSTGRES_FLUSH_EACH"] == "1" ? nil : bb_send_pipeline_sync_function()

    /// Whether requests sent in one batch of the loop share a write (libpq 17 or newer).
    static var coalescesWrites: Bool { queueSync != nil }
    /// A cancel request is on its way for `request`; nothing more is sent until both its call
    /// returned and that request completed, so the cancel cannot hit a later statement.
    private var cancelInFlight: (request: UInt64, callReturned: Bool, requestDone: Bool)?
    /// Reading paused: a stream's buffer is full, or a blocking COPY owns the connection.
    private var readingPaused = false
    private var offloaded = false
    private(set) var isBroken = false
    private var isClosed = false
    private var cancelObject: CancelObject?

    var notificationHandler: ((PostgresNotification) -> Void)?
    var noticeBox: NoticeBox?
    /// Called when the connection breaks (the LISTEN sequence reports it).
    var breakHandler: (() -> Void)?

    static let tracing = ProcessInfo.processInfo.environment["BB_ENGINE_TRACE"] != nil
    static let tracePath: String = {
        let path = "/tmp/bbtrace.\(getpid()).log"
        if tracing { _ = FileManager.default.createFile(atPath: path, contents: nil) }
        return path
    }()
    func trace(_ message: @autoclosure () -> String) {
        if Self.tracing, let handle = FileHandle(forWritingAtPath: Self.tracePath) {
            handle.seekToEndOfFile()
            handle.write(Data("[core \(ObjectIdentifier(self).hashValue)] \(message())\n".utf8))
            try? handle.close()
        }
    }

    /// How long a cancelled statement may take to answer before the connection is given up.
    static let cancelGrace: Duration = .seconds(5)
    /// How long the caller of a cancelled statement waits for the server to confirm it.
    static let cancelAnswerWait: Duration = .seconds(1)
    /// How often a cancel is sent again while its statement keeps running.
    static let cancelRetry: Duration = .milliseconds(500)

    init(loop: EventLoop, secrets: [String]) {
        self.loop = loop
        self.secrets = secrets
    }

    deinit {
        if let conn { PQfinish(conn) }
    }

    // MARK: Connecting

    /// Opens the connection: `PQconnectStartParams` on a helper thread (it may resolve a host
    /// name, which blocks), then `PQconnectPoll` on the loop until ready, failed, or `deadline`;
    /// `continuation` hears which.
    func connect(keywords: [String], values: [String], deadline: ContinuousClock.Instant, description: String, continuation: CheckedContinuation<Void, any Error>) {
        connectContinuation = continuation
        connectTimer = loop.schedule(at: deadline) { [self] in
            failConnect(PostgresError(kind: .connectionFailure, message: "could not connect to PostgreSQL (\(description)): no answer within the connect timeout"))
        }
        let loop = self.loop
        Thread.detachNewThread { [self] in
            let started = UncheckedBox(withCStringArray(keywords) { k in withCStringArray(values) { v in PQconnectStartParams(k, v, 1) } })
            loop.execute { [self] in adopt(started.value) }
        }
    }

    private func adopt(_ connection: OpaquePointer?) {
        guard let connection else {
            failConnect(PostgresError(kind: .connectionFailure, message: "libpq could not allocate a connection (out of memory)"))
            return
        }
        guard connectContinuation != nil else {
            PQfinish(connection) // the deadline passed while the helper thread started it
            return
        }
        conn = connection
        if let password = PQpass(connection).map({ String(cString: $0) }), !password.isEmpty { secrets.append(password) }
        guard PQstatus(connection) != CONNECTION_BAD else {
            failConnect(connectError())
            return
        }
        pollConnect(PGRES_POLLING_WRITING)
    }

    /// One step of `PQconnectPoll`; `state` is what the last step asked for.
    private func pollConnect(_ state: PostgresPollingStatusType) {
        guard let conn, connectContinuation != nil else { return }
        var status = state
        if status != PGRES_POLLING_WRITING || token != nil {
            status = PQconnectPoll(conn)
        }
        switch status {
        case PGRES_POLLING_READING: watch(PQsocket(conn), interest: Int32(BB_INTEREST_READ))
        case PGRES_POLLING_WRITING: watch(PQsocket(conn), interest: Int32(BB_INTEREST_WRITE))
        case PGRES_POLLING_OK: finishConnect()
        default: failConnect(connectError())
        }
    }

    private func finishConnect() {
        guard let conn, let continuation = connectContinuation else { return }
        connectContinuation = nil
        loop.cancelTimer(connectTimer)
        guard PQsetnonblocking(conn, 1) == 0 else {
            continuation.resume(throwing: PostgresError(kind: .connectionFailure, message: "libpq refused non-blocking mode"))
            return
        }
        cancelObject = CancelObject(conn)
        installNoticeReceiver()
        watch(PQsocket(conn), interest: Int32(BB_INTEREST_READ))
        continuation.resume()
    }

    private func failConnect(_ error: PostgresError) {
        guard let continuation = connectContinuation else { return }
        connectContinuation = nil
        loop.cancelTimer(connectTimer)
        unwatch()
        if let conn { PQfinish(conn) }
        conn = nil
        markBroken()
        continuation.resume(throwing: error)
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

    /// libpq hands an error that arrives while no statement runs (the server's FATAL before it
    /// ends the session) to the notice receiver. The core always installs its own: it remembers
    /// that the server ended the session, so a statement sent in the moment before the socket
    /// closes is known never to have run, then passes the notice on to the caller's handler.
    private func installNoticeReceiver() {
        guard let conn else { return }
        let box = NoticeBox(handler: noticeBox?.handler, mirror: mirror)
        noticeBox = box
        PQsetNoticeReceiver(conn, { context, result in
            guard let context, let result else { return }
            let box = Unmanaged<NoticeBox>.fromOpaque(context).takeUnretainedValue()
            func field(_ code: Character) -> String {
                guard let ascii = code.asciiValue, let value = PQresultErrorField(result, Int32(ascii)) else { return "" }
                return String(cString: value)
            }
            let notice = PostgresNotice(severity: field("V"), sqlState: field("C"), message: field("M"))
            if notice.severity == "FATAL" || notice.severity == "PANIC" {
                box.mirror?.serverEndedSession.store(true, ordering: .releasing)
            }
            box.handler?(notice)
        }, Unmanaged.passUnretained(box).toOpaque())
    }

    // MARK: The socket

    private func watch(_ fd: Int32, interest wanted: Int32) {
        if fd != socket {
            unwatch()
            socket = fd
            token = loop.register(fd, interest: wanted, handler: self)
            interest = wanted
            if token == nil { markBroken() }
        } else if wanted != interest, let token {
            // libpq may have closed the descriptor and opened another with the same number
            // (trying the next address): then it is registered anew.
            if !loop.modify(fd, token: token, interest: wanted) {
                loop.forget(token)
                self.token = loop.register(fd, interest: wanted, handler: self)
                if self.token == nil { markBroken() }
            }
            interest = wanted
        }
    }

    private func unwatch() {
        if let token, socket >= 0 { loop.unregister(socket, token: token) }
        token = nil
        socket = -1
        interest = 0
    }

    private func updateInterest() {
        guard conn != nil, !isBroken, connectContinuation == nil else { return }
        var wanted: Int32 = 0
        if !readingPaused && !offloaded { wanted |= Int32(BB_INTEREST_READ) }
        if flushPending && !offloaded { wanted |= Int32(BB_INTEREST_WRITE) }
        watch(socket, interest: wanted)
    }

    func ioReady(readable: Bool, writable: Bool, failed: Bool) {
        if connectContinuation != nil {
            pollConnect(PGRES_POLLING_ACTIVE)
            return
        }
        guard !offloaded, !isBroken, conn != nil else { return }
        if writable && flushPending { flush() }
        if readable || failed { readInput() }
    }

    // MARK: Sending

    /// Queues `request`; it is sent as soon as the connection's mode and any cancel in flight
    /// allow, pipelined behind what is already in flight.
    func submit(_ request: Request, deadline: Duration?) {
        guard !isBroken, !isClosed, conn != nil else {
            request.finish(.failure(closedError()))
            return
        }
        if let deadline {
            request.deadlineTimer = loop.schedule(at: .now + deadline) { [self] in interrupt(request.id, .deadline(deadline)) }
        }
        waiting.append(request)
        mirror.pending.add(1, ordering: .releasing)
        trace("submit \(request.id) \(request.text.prefix(60))")
        pump()
    }

    private func pump() {
        guard let conn, !isBroken, !offloaded, cancelInFlight == nil else { return }
        while let next = waiting.first {
            if next.usesPipeline {
                guard pipelineOn || inflight.isEmpty else { return }
                if !pipelineOn {
                    guard PQenterPipelineMode(conn) == 1 else { return connectionLost() }
                    pipelineOn = true
                }
            } else {
                guard inflight.isEmpty else { return }
                if pipelineOn {
                    // Nothing is in flight, so libpq must agree to leave; if it does not, the
                    // request would wait forever: give the connection up instead.
                    guard PQexitPipelineMode(conn) == 1 else {
                        return connectionLost(reason: "libpq could not leave pipeline mode (\(lastErrorMessage())); the connection was closed")
                    }
                    pipelineOn = false
                }
            }
            waiting.removeFirst()
            send(next, on: conn)
            if isBroken { return }
            if case .stream = next.kind { break }
        }
        if flushPending { updateInterest() }
    }

    private func send(_ request: Request, on conn: OpaquePointer) {
        trace("send \(request.id) pipeline=\(pipelineOn)")
        request.transactionStatusAtSend = PQtransactionStatus(conn)
        request.sentAfterServerEnded = mirror.serverEndedSession.load(ordering: .acquiring)
        request.sent = true
        inflight.append(request)
        var ok = true
        var queued = false
        switch request.kind {
        case .extended(let steps):
            for step in steps where ok { ok = send(step, on: conn) }
            if ok {
                if let queueSync = Self.queueSync {
                    ok = queueSync(conn) == 1
                    queued = true
                } else {
                    ok = PQpipelineSync(conn) == 1
                }
            }
        case .simple(let script):
            ok = PQsendQuery(conn, script) == 1
        case .stream(let step, _):
            ok = send(step, on: conn) && PQsetSingleRowMode(conn) == 1
            if ok { mirror.streaming.store(true, ordering: .releasing) }
        }
        guard ok else {
            request.undelivered = true // libpq could not queue it: nothing of it reached the server
            return connectionLost()
        }
        if queued {
            if lastUnflushed == nil { loop.afterThisBatch { [self] in flushQueued() } }
            lastUnflushed = request
            unflushedCount += 1
            return
        }
        // A flush that fails right away failed before the request's closing Sync was
        // delivered: the server cannot have committed it.
        if PQflush(conn) == -1 { request.undelivered = true }
        mirror.requestsWritten.add(1, ordering: .relaxed)
        mirror.writes.add(1, ordering: .relaxed)
        flush()
    }

    /// Sends what `send` queued during the loop's batch, in one write.
    private func flushQueued() {
        let last = lastUnflushed, count = unflushedCount
        lastUnflushed = nil
        unflushedCount = 0
        // Offloaded (a blocking COPY took the connection): its helper's own calls flush.
        guard let conn, !isBroken, !offloaded, let last else { return }
        // As above, for the batch's last request only: its Sync ends the buffer. Requests
        // before it may have reached the server before the write failed: unknown.
        if PQflush(conn) == -1 { last.undelivered = true }
        mirror.requestsWritten.add(count, ordering: .relaxed)
        mirror.writes.add(1, ordering: .relaxed)
        flush()
    }

    private func send(_ step: Request.Step, on conn: OpaquePointer) -> Bool {
        switch step {
        case .prepare(let name, let text, let types):
            return types.withUnsafeBufferPointer { PQsendPrepare(conn, name, text, Int32($0.count), $0.baseAddress) } == 1
        case .describe(let name):
            return PQsendDescribePrepared(conn, name) == 1
        case .execute(let name, let statement, let format):
            return statement.withParameters { count, values, lengths, formats in
                PQsendQueryPrepared(conn, name, count, values, lengths, formats, format.rawValue)
            } == 1
        case .executeUnnamed(let statement, let format):
            return statement.withParameters { count, values, lengths, formats in
                statement.types.withUnsafeBufferPointer { types in
                    PQsendQueryParams(conn, statement.text, count, types.baseAddress, values, lengths, formats, format.rawValue)
                }
            } == 1
        case .deallocate(let name):
            return PQsendQueryParams(conn, "DEALLOCATE \(name)", 0, nil, nil, nil, nil, 0) == 1
        }
    }

    private func flush() {
        guard let conn else { return }
        switch PQflush(conn) {
        case 0:
            flushPending = false
            updateInterest()
        case 1:
            flushPending = true
            updateInterest()
        default:
            connectionLost()
        }
    }

    // MARK: Receiving

    private func readInput() {
        guard let conn else { return }
        if !readingPaused {
            guard PQconsumeInput(conn) == 1 else { return connectionLost() }
        }
        processResults()
        deliverNotifications()
        if PQstatus(conn) == CONNECTION_BAD { connectionLost() }
    }

    private func processResults() {
        guard let conn else { return }
        while let head = inflight.first, !isBroken {
            if case .stream(_, let state) = head.kind, state.buffered >= RowStreamState.bufferLimit, !state.abandoned {
                if !readingPaused {
                    readingPaused = true
                    updateInterest()
                }
                return
            }
            guard PQisBusy(conn) == 0 else { return }
            switch head.kind {
            case .extended:
                // A request ends at its Sync's result, whatever came before: a NULL only
                // separates one step's results from the next. (Counting NULLs to find the end
                // would wait forever for input already read if libpq ever returned one more.)
                guard let result = PQgetResult(conn) else {
                    head.stepsDone += 1
                    head.nullsInARow += 1
                    if head.nullsInARow > 1, PQisBusy(conn) == 0 {
                        // libpq has nothing left to read for us, yet the Sync never came.
                        return connectionLost(reason: "libpq lost its place in the pipeline (no Sync result for a request); the connection was closed so no answer can go to the wrong caller")
                    }
                    continue
                }
                head.nullsInARow = 0
                if PQresultStatus(result) == PGRES_PIPELINE_SYNC {
                    PQclear(result)
                    complete(head)
                } else {
                    collect(result, into: head)
                }
            case .simple:
                guard let result = PQgetResult(conn) else {
                    complete(head)
                    continue
                }
                collect(result, into: head)
            case .stream(_, let state):
                guard let result = PQgetResult(conn) else {
                    state.end(head.error)
                    mirror.streaming.store(false, ordering: .releasing)
                    complete(head)
                    continue
                }
                switch PQresultStatus(result) {
                case PGRES_SINGLE_TUPLE:
                    let row = ResultStorage(result: result)
                    if !state.abandoned { state.push(row) }
                case PGRES_TUPLES_OK, PGRES_COMMAND_OK:
                    PQclear(result)
                default:
                    collect(result, into: head)
                }
            }
        }
    }

    /// Keeps a result of `request`, or its first error.
    private func collect(_ result: OpaquePointer, into request: Request) {
        switch PQresultStatus(result) {
        case PGRES_TUPLES_OK, PGRES_COMMAND_OK, PGRES_EMPTY_QUERY, PGRES_SINGLE_TUPLE:
            if case .simple = request.kind { request.results = [] } // a script answers with its last result
            request.results.append(ResultStorage(result: result))
        case PGRES_PIPELINE_ABORTED:
            PQclear(result)
        case PGRES_COPY_IN, PGRES_COPY_OUT, PGRES_COPY_BOTH:
            PQclear(result)
            if let conn {
                _ = PQputCopyEnd(conn, "COPY is not supported here")
                var buffer: UnsafeMutablePointer<CChar>?
                while PQgetCopyData(conn, &buffer, 1) > 0 {
                    if let buffer { PQfreemem(buffer) }
                    buffer = nil
                }
            }
            if request.error == nil {
                var error = PostgresError(kind: .misuse, message: "COPY cannot run through query() or stream(); use copyIn or copyOut. The COPY was aborted")
                error.query = request.text
                request.error = error
            }
        default:
            var error = makeError(result, query: request.text)
            PQclear(result)
            if request.error == nil {
                if case .extended(let steps) = request.kind, request.stepsDone < steps.count {
                    error.stepIndex = request.stepsDone
                    if case .execute(_, let statement, _) = steps[request.stepsDone] { error.query = statement.text }
                    if case .executeUnnamed(let statement, _) = steps[request.stepsDone] { error.query = statement.text }
                }
                request.error = error
            }
        }
    }

    private func complete(_ request: Request) {
        trace("complete \(request.id) error=\(request.error?.message ?? "-")")
        inflight.removeFirst()
        mirror.pending.subtract(1, ordering: .releasing)
        loop.cancelTimer(request.deadlineTimer)
        if let conn { mirror.transactionStatus.store(PQtransactionStatus(conn).rawValue, ordering: .releasing) }
        if case .stream(_, let state) = request.kind, !state.finished { state.end(request.error) }
        if var error = request.error {
            if error.kind == .queryCanceled, case .deadline(let limit) = request.interruption {
                error.kind = .timeout
                error.message = "the statement ran longer than its deadline (\(limit)) and was cancelled on the server"
            }
            request.finish(.failure(error))
        } else {
            request.finish(.success(request.results))
        }
        if let cancel = cancelInFlight, cancel.request == request.id {
            cancelInFlight = cancel.callReturned ? nil : (cancel.request, false, true)
        }
        completionWaiters.removeValue(forKey: request.id)?.forEach { $0.resume() }
        pump()
    }

    private var completionWaiters: [UInt64: [CheckedContinuation<Void, Never>]] = [:]

    /// The last request sent or queued, if any (waiting for it waits for all before it).
    var lastPendingID: UInt64? { (waiting.last ?? inflight.last)?.id }

    /// Whether request `id` is sent or queued and not complete.
    func isPending(_ id: UInt64) -> Bool {
        inflight.contains(where: { $0.id == id }) || waiting.contains(where: { $0.id == id })
    }

    /// Resumes `continuation` when request `id` completes, or now if it has. (Checking and
    /// registering in one call: an await between them could miss the completion.)
    func whenComplete(_ id: UInt64, _ continuation: CheckedContinuation<Void, Never>) {
        guard isPending(id) else { return continuation.resume() }
        completionWaiters[id, default: []].append(continuation)
    }

    private func deliverNotifications() {
        guard let conn else { return }
        while let notify = PQnotifies(conn) {
            let notification = PostgresNotification(
                channel: String(cString: notify.pointee.relname), payload: String(cString: notify.pointee.extra),
                senderPID: notify.pointee.be_pid)
            PQfreemem(notify)
            notificationHandler?(notification)
        }
    }

    // MARK: Streams

    /// A buffered row of `state`, if any (reading resumes when the buffer drains).
    func takeRow(_ state: RowStreamState) -> ResultStorage? {
        guard let row = state.popBuffered() else { return nil }
        resumeReadingIfPaused(state)
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
        resumeReadingIfPaused(state)
    }

    func resumeReadingIfPaused(_ state: RowStreamState) {
        guard readingPaused, state.buffered < RowStreamState.bufferLimit / 2 else { return }
        readingPaused = false
        updateInterest()
        readInput()
    }

    /// The reader is gone: rows are dropped, the query is cancelled, and its results drained.
    func abandonStream(_ state: RowStreamState, requestID: UInt64) {
        state.abandoned = true
        state.rows = []
        state.index = 0
        if let waiting = state.waiting {
            state.waiting = nil
            waiting.resume(returning: nil)
        }
        if readingPaused {
            readingPaused = false
            updateInterest()
        }
        interrupt(requestID, .cancelled)
        readInput()
    }

    // MARK: Cancelling

    /// The caller of request `id` stopped waiting (task cancelled, or its deadline passed).
    ///
    /// Not yet sent: it never will be. Sent, and nothing sent after it: the server is asked to
    /// cancel it (from a helper thread; the loop never blocks), nothing more is sent until that
    /// is settled, and the caller gets the outcome. Other callers' statements sent after it: a
    /// cancel could hit one of them, so none is sent; the caller is answered now and the
    /// statement's results are drained when they come. Either way, if the server does not
    /// answer within `cancelGrace`, the connection is given up.
    func interrupt(_ id: UInt64, _ reason: Request.Interruption) {
        trace("interrupt \(id) \(reason)")
        if let index = waiting.firstIndex(where: { $0.id == id }) {
            let request = waiting.remove(at: index)
            mirror.pending.subtract(1, ordering: .releasing)
            loop.cancelTimer(request.deadlineTimer)
            request.finish(.failure(interruptionError(reason, sent: false, query: request.text)))
            completionWaiters.removeValue(forKey: id)?.forEach { $0.resume() }
            return
        }
        guard let position = inflight.firstIndex(where: { $0.id == id }) else { return }
        let request = inflight[position]
        guard request.interruption == nil, !request.answered else { return }
        request.interruption = reason
        loop.cancelTimer(request.deadlineTimer)
        // A stream's reader gets an error and reads no further: its rows are dropped, and the
        // socket is read again even if the buffer had paused it. The server can only answer
        // the cancel once the rows it is blocked sending have been taken off the wire.
        var resumeReading = false
        if case .stream(_, let state) = request.kind, !state.abandoned {
            state.abandoned = true
            state.rows = []
            state.index = 0
            if readingPaused {
                readingPaused = false
                updateInterest()
                resumeReading = true
            }
        }
        defer { if resumeReading { readInput() } }
        // Only a statement alone on the wire may be cancelled on the server: with another
        // caller's statement before it, the cancel could hit that one; after it, a late cancel
        // could hit the next.
        if inflight.count == 1, cancelInFlight == nil, let cancelObject {
            cancelInFlight = (id, false, false)
            cancelObject.send { [loop] in
                loop.execute { [self] in cancelReturned(id) }
            }
            cancelAgain(id, within: Self.cancelGrace)
            // The server's answer says what became of the statement; a caller whose server
            // does not answer (a silent network) is not kept waiting for it.
            loop.schedule(at: .now + Self.cancelAnswerWait) { [self] in
                guard inflight.contains(where: { $0.id == id }) else { return }
                answerInterrupted(request, interruptionError(reason, sent: true, query: request.text, unconfirmed: true))
            }
        } else {
            answerInterrupted(request, interruptionError(reason, sent: true, query: request.text))
        }
        loop.schedule(at: .now + Self.cancelGrace) { [self] in
            guard inflight.contains(where: { $0.id == id }) else { return }
            connectionLost(reason: "the server did not answer within \(Self.cancelGrace) of a cancelled statement (a frozen server or a silent network)")
        }
    }

    /// The caller of an interrupted request gets `error` now; a stream's reader too (its
    /// request has no continuation: the reader waits on the stream's state).
    private func answerInterrupted(_ request: Request, _ error: PostgresError) {
        request.finish(.failure(error))
        if case .stream(_, let state) = request.kind, !state.finished { state.end(error) }
    }

    /// A cancel that reaches the server before the statement does (a loaded server that has
    /// not read it yet) finds nothing running and is dropped, and the statement then runs to
    /// its end. So while the statement is still the only one on the wire and the last cancel
    /// call has returned, ask again every `cancelRetry` until `remaining` is used up. Nothing
    /// else is sent meanwhile (`pump` waits for `cancelInFlight`), so no cancel can reach a
    /// later statement.
    private func cancelAgain(_ id: UInt64, within remaining: Duration) {
        guard remaining > Self.cancelRetry else { return }
        loop.schedule(at: .now + Self.cancelRetry) { [self] in
            guard inflight.count == 1, inflight.first?.id == id, let cancel = cancelInFlight, cancel.request == id,
                  cancel.callReturned, !cancel.requestDone, let cancelObject else { return }
            trace("cancel again \(id)")
            cancelInFlight = (id, false, false)
            cancelObject.send { [loop] in
                loop.execute { [self] in cancelReturned(id) }
            }
            cancelAgain(id, within: remaining - Self.cancelRetry)
        }
    }

    private func cancelReturned(_ id: UInt64) {
        guard let cancel = cancelInFlight, cancel.request == id else { return }
        if cancel.requestDone || !inflight.contains(where: { $0.id == id }) {
            cancelInFlight = nil
            pump()
        } else {
            cancelInFlight = (id, true, false)
        }
    }

    private func interruptionError(_ reason: Request.Interruption, sent: Bool, query: String, unconfirmed: Bool = false) -> PostgresError {
        var error: PostgresError
        let fate = unconfirmed
            ? "a cancel was sent but the server has not answered within \(Self.cancelAnswerWait) (a busy server or a silent network); the connection is closed if it stays silent"
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
        error.query = query
        error.lostConnectionOutcome = sent ? .outcomeUnknown : .safe
        return error
    }

    // MARK: Breaking and closing

    /// The connection is gone: every request fails, saying whether it may have been applied.
    func connectionLost(reason: String? = nil) {
        guard !isBroken else { return }
        let message = reason ?? "the connection to the server was lost: \(lastErrorMessage())"
        markBroken()
        unwatch()
        let sent = inflight
        let unsent = waiting
        inflight.removeAll()
        waiting.removeAll()
        mirror.pending.store(0, ordering: .releasing)
        for request in sent {
            var error = PostgresError(kind: .connectionFailure, message: message)
            error.query = request.text
            let insideTransaction = request.transactionStatusAtSend == PQTRANS_INTRANS || request.transactionStatusAtSend == PQTRANS_INERROR
            error.lostConnectionOutcome = (insideTransaction && !request.isCommit) || request.undelivered || request.changesNothing
                ? .safe : .outcomeUnknown
            // The server said why it ended the session before answering: an administrator's
            // termination or a shutdown aborts the transaction, so nothing of it was applied.
            if let reason = request.error, let state = reason.sqlState, ["57P01", "57P02", "57P03"].contains(state) {
                error = reason
                error.lostConnectionOutcome = .safe
            } else if request.error == nil, request.sentAfterServerEnded {
                // The FATAL came before this statement was sent: the backend was already gone.
                error.lostConnectionOutcome = .safe
            }
            error.hint = error.lostConnectionOutcome == .safe
                ? "the server rolled the transaction back; run it again on a new connection (a pool does this for you)"
                : "the statement was sent and may or may not have been applied; check before running it again"
            loop.cancelTimer(request.deadlineTimer)
            if case .stream(_, let state) = request.kind { state.end(error) }
            request.finish(.failure(error))
        }
        for request in unsent {
            var error = PostgresError(kind: .connectionFailure, message: message + " (the statement was never sent)")
            error.query = request.text
            error.lostConnectionOutcome = .safe
            loop.cancelTimer(request.deadlineTimer)
            request.finish(.failure(error))
        }
        for (_, waiters) in completionWaiters { waiters.forEach { $0.resume() } }
        completionWaiters.removeAll()
        breakHandler?()
    }

    private func markBroken() {
        isBroken = true
        mirror.broken.store(true, ordering: .releasing)
    }

    /// Whether `close()` ran (a connection that broke on its own is not closed yet).
    var isClosedForGood: Bool { isClosed }

    /// Closes the connection; pending requests fail.
    func close() {
        guard !isClosed else { return }
        connectionLost(reason: "the connection was closed")
        isClosed = true
        cancelObject = nil
        if let conn { PQfinish(conn) }
        conn = nil
        // libpq no longer calls the notice receiver: what the handler captured is let go
        // now, not when the last reference to this connection goes.
        noticeBox = nil
    }

    private func closedError() -> PostgresError {
        var error = PostgresError(kind: .connectionFailure, message: isClosed
            ? "the connection is closed; open a new one (a pool does this for you)"
            : "the connection is broken; open a new one (a pool does this for you)")
        error.lostConnectionOutcome = .safe
        return error
    }

    // MARK: Blocking work (COPY)

    /// Hands the connection, in blocking mode, to a helper thread (call when nothing is
    /// pending): the loop leaves the socket alone until `endBlocking`. For COPY, whose writer
    /// API is synchronous.
    func beginBlocking() throws -> OpaquePointer {
        guard let conn, !isBroken else { throw closedError() }
        if pipelineOn {
            guard PQexitPipelineMode(conn) == 1 else { throw PostgresError(kind: .protocolViolation, message: "could not leave pipeline mode") }
            pipelineOn = false
        }
        offloaded = true
        updateInterest()
        _ = PQsetnonblocking(conn, 0)
        mirror.pending.add(1, ordering: .releasing)
        return conn
    }

    func endBlocking() {
        guard let conn else { return }
        _ = PQsetnonblocking(conn, 1)
        offloaded = false
        mirror.pending.subtract(1, ordering: .releasing)
        mirror.transactionStatus.store(PQtransactionStatus(conn).rawValue, ordering: .releasing)
        if PQstatus(conn) == CONNECTION_BAD { connectionLost() } else { updateInterest() }
        pump()
    }

    /// Sends a cancel request for what runs now (a blocking COPY), from a helper thread.
    func cancelBlocking() {
        cancelObject?.send {}
    }

    // MARK: Errors

    func lastErrorMessage() -> String {
        guard let conn else { return "no connection" }
        return Redaction.redact(String(cString: PQerrorMessage(conn)), secrets: secrets).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func makeError(_ result: OpaquePointer, query: String) -> PostgresError {
        func field(_ code: Character) -> String? {
            guard let ascii = code.asciiValue, let value = PQresultErrorField(result, Int32(ascii)) else { return nil }
            return String(cString: value)
        }
        let sqlState = field("C")
        let lost = conn.map { PQstatus($0) == CONNECTION_BAD } ?? true
        var kind = sqlState.map(PostgresError.kind(forSQLState:)) ?? (lost ? .connectionFailure : .protocolViolation)
        if lost && kind == .otherServerError { kind = .connectionFailure }
        var message = field("M") ?? String(cString: PQresultErrorMessage(result))
        message = Redaction.redact(message.trimmingCharacters(in: .whitespacesAndNewlines), secrets: secrets)
        var error = PostgresError(kind: kind, message: message, sqlState: sqlState)
        error.severity = field("V") ?? field("S")
        error.detail = field("D")
        error.hint = field("H")
        error.position = field("P").flatMap { Int($0) }
        error.internalPosition = field("p").flatMap { Int($0) }
        error.internalQuery = field("q")
        error.context = field("W")
        error.schema = field("s")
        error.table = field("t")
        error.column = field("c")
        error.dataType = field("d")
        error.constraint = field("n")
        error.sourceFile = field("F")
        error.sourceLine = field("L").flatMap { Int($0) }
        error.sourceFunction = field("R")
        error.query = query
        return error
    }

    /// Quotes a name with `PQescapeIdentifier`.
    func escapeIdentifier(_ name: String) throws -> String {
        guard let conn, !isBroken else { throw closedError() }
        let utf8 = Array(name.utf8)
        guard !utf8.contains(0) else {
            throw PostgresError(kind: .invalidParameter, message: "an identifier contains a NUL character")
        }
        guard let escaped = PQescapeIdentifier(conn, name, utf8.count) else {
            throw PostgresError(kind: .invalidParameter, message: "cannot quote identifier: " + lastErrorMessage())
        }
        defer { PQfreemem(escaped) }
        return String(cString: escaped)
    }

    // Facts libpq keeps locally.
    var backendPID: Int32 { conn.map { PQbackendPID($0) } ?? 0 }
    var serverVersion: Int { conn.map { Int(PQserverVersion($0)) } ?? 0 }
    var transactionStatus: PGTransactionStatusType { conn.map { PQtransactionStatus($0) } ?? PQTRANS_UNKNOWN }
    /// The host (or socket folder), port and database this connection reached.
    var serverIdentity: ServerIdentity {
        func text(_ value: UnsafeMutablePointer<CChar>?) -> String { value.map { String(cString: $0) } ?? "" }
        guard let conn else { return ServerIdentity(address: "", port: nil, database: "") }
        return ServerIdentity(address: text(PQhost(conn)), port: Int(text(PQport(conn))), database: text(PQdb(conn)))
    }
    func parameterStatus(_ name: String) -> String? {
        guard let conn, let value = PQparameterStatus(conn, name) else { return nil }
        return String(cString: value)
    }
}

/// libpq's cancel object for one connection, used from helper threads (`PQcancel` blocks: it
/// opens a connection to the server). Freed when the last send has returned.
final class CancelObject: @unchecked Sendable {
    private let object: OpaquePointer?
    init(_ connection: OpaquePointer) { object = PQgetCancel(connection) }
    deinit { if let object { PQfreeCancel(object) } }

    /// Sends the cancel request on a thread of its own, then calls `done` there.
    func send(_ done: @escaping @Sendable () -> Void) {
        Thread.detachNewThread { [self] in
            if let object {
                var buffer = [CChar](repeating: 0, count: 256)
                _ = PQcancel(object, &buffer, Int32(buffer.count))
            }
            done()
        }
    }
}

/// Carries a non-Sendable value across threads where the hand-over is ordered by other means
/// (a continuation, a loop post).
final class UncheckedBox<T>: @unchecked Sendable {
    var value: T
    init(_ value: T) { self.value = value }
}

final class NoticeBox: Sendable {
    let handler: (@Sendable (PostgresNotice) -> Void)?
    let mirror: ConnectionMirror?
    init(handler: (@Sendable (PostgresNotice) -> Void)?, mirror: ConnectionMirror? = nil) {
        self.handler = handler
        self.mirror = mirror
    }
}

/// Calls `body` with a NULL-terminated array of C strings.
func withCStringArray<R>(_ strings: [String], _ body: ([UnsafePointer<CChar>?]) -> R) -> R {
    let duplicates = strings.map { strdup($0) }
    defer { duplicates.forEach { free($0) } }
    return body(duplicates.map { $0.map { UnsafePointer($0) } } + [nil])
}
