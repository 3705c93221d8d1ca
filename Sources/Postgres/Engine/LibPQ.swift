internal import CLibPQ
import Foundation

// The one door to libpq: every `PQ*` call of the Postgres module is in this file, and nothing
// else imports CLibPQ. What the rest of the module sees are Swift types: a connection handle
// (`LibPQConnection`), a result (`ResultStorage`), the kinds of result the engine tells apart
// (`LibPQResult`), a cancel object, the transaction status, and conninfo parsing.
//
// The handle does what it is told and decides nothing: the rules (what to send when, what a
// result means for which caller) are in `ConnectionStateMachine`, performed by
// `ConnectionDriver`.

/// libpq's view of the session's transaction (`PQtransactionStatus`).
enum TransactionStatus: UInt8, Sendable, Equatable {
    /// No transaction is open.
    case idle
    /// A statement is running (or requests are in flight in pipeline mode).
    case active
    /// Inside a transaction block.
    case inTransaction
    /// Inside a failed transaction block: only ROLLBACK is accepted.
    case inFailedTransaction
    /// The connection is bad.
    case unknown

    /// Inside a transaction block, failed or not.
    var isInTransaction: Bool { self == .inTransaction || self == .inFailedTransaction }
}

/// What one `PQgetResult` call returned, as the engine tells results apart.
enum LibPQResult {
    /// No more results for the current step (a NULL).
    case endOfStep
    /// A pipeline's sync point was reached (`PGRES_PIPELINE_SYNC`).
    case sync
    /// A step skipped because an earlier one failed (`PGRES_PIPELINE_ABORTED`).
    case aborted
    /// A complete result: rows, a command's tag, or an empty query.
    case result(ResultStorage)
    /// One row of a single-row-mode query.
    case row(ResultStorage)
    /// The server started a COPY (the result is already freed).
    case copyStarted
    /// The server's error, with every field libpq gives.
    case error(PostgresError)
}

/// How a flush of libpq's output buffer went.
enum FlushOutcome {
    case done
    /// Some bytes are still buffered: wait until the socket is writable.
    case pending
    case failed
}

/// One step of `PQconnectPoll`.
enum ConnectPoll {
    case reading, writing, ok, failed
}

/// OpenSSL told, once and before libpq first uses it, to leave its global state alone at exit
/// (see `bb_openssl_skip_cleanup_at_exit` in the C shim): a process that exits while a pool
/// is still opening a connection on another thread must not crash in OpenSSL's cleanup.
/// A load test's run ended in SIGSEGV that way after all 447 of its tests had passed.
let openSSLAtExit: OpenSSLAtExit = switch bb_openssl_skip_cleanup_at_exit() {
    case 1: .cleanupSkipped
    case -1: .noOpenSSL
    default: .refused
}

/// What OpenSSL was told about its cleanup at exit (`openSSLAtExit`).
enum OpenSSLAtExit: Equatable {
    /// OpenSSL took the flag: it leaves its state to the operating system at exit.
    case cleanupSkipped
    /// No OpenSSL in the process (libpq built without it): nothing to clean up.
    case noOpenSSL
    /// OpenSSL refused the flag (it had been stopped already).
    case refused
}

/// A libpq connection handle. Used on its event loop's thread, or on the one helper thread a
/// blocking COPY hands it to; never from two threads at once.
final class LibPQConnection: @unchecked Sendable {
    private let conn: OpaquePointer
    private var finished = false

    private init(_ conn: OpaquePointer) { self.conn = conn }

    deinit { if !finished { PQfinish(conn) } }

    /// Starts connecting without blocking on the network (`PQconnectStartParams`; a host name
    /// may still be resolved, so call it off the event loop). Nil when libpq is out of memory.
    static func start(keywords: [String], values: [String]) -> LibPQConnection? {
        _ = openSSLAtExit
        let started = withCStringArray(keywords) { k in withCStringArray(values) { v in PQconnectStartParams(k, v, 1) } }
        return started.map(LibPQConnection.init)
    }

    /// Closes the connection and frees the handle (`PQfinish`); later calls are not allowed.
    func finish() {
        guard !finished else { return }
        finished = true
        PQfinish(conn)
    }

    // MARK: State libpq keeps locally

    var isBad: Bool { PQstatus(conn) == CONNECTION_BAD }
    var socket: Int32 { PQsocket(conn) }
    var backendPID: Int32 { PQbackendPID(conn) }
    var serverVersion: Int { Int(PQserverVersion(conn)) }
    var password: String? { PQpass(conn).map { String(cString: $0) } }
    var host: String { PQhost(conn).map { String(cString: $0) } ?? "" }
    var port: String { PQport(conn).map { String(cString: $0) } ?? "" }
    var database: String { PQdb(conn).map { String(cString: $0) } ?? "" }

    /// libpq's last error message, untrimmed and unredacted.
    var errorMessage: String { String(cString: PQerrorMessage(conn)) }

    func parameterStatus(_ name: String) -> String? {
        PQparameterStatus(conn, name).map { String(cString: $0) }
    }

    var transactionStatus: TransactionStatus {
        switch PQtransactionStatus(conn) {
        case PQTRANS_IDLE: .idle
        case PQTRANS_ACTIVE: .active
        case PQTRANS_INTRANS: .inTransaction
        case PQTRANS_INERROR: .inFailedTransaction
        default: .unknown
        }
    }

    // MARK: Connecting

    func pollConnect() -> ConnectPoll {
        switch PQconnectPoll(conn) {
        case PGRES_POLLING_READING: .reading
        case PGRES_POLLING_WRITING: .writing
        case PGRES_POLLING_OK: .ok
        default: .failed
        }
    }

    /// Non-blocking mode for the event loop; blocking mode for a COPY's helper thread.
    @discardableResult
    func setNonBlocking(_ on: Bool) -> Bool { PQsetnonblocking(conn, on ? 1 : 0) == 0 }

    // MARK: Sending

    func enterPipelineMode() -> Bool { PQenterPipelineMode(conn) == 1 }
    func exitPipelineMode() -> Bool { PQexitPipelineMode(conn) == 1 }

    func sendPrepare(name: String, text: String, types: [UInt32]) -> Bool {
        types.withUnsafeBufferPointer { PQsendPrepare(conn, name, text, Int32($0.count), $0.baseAddress) } == 1
    }

    func sendDescribePrepared(name: String) -> Bool { PQsendDescribePrepared(conn, name) == 1 }

    func sendQueryPrepared(name: String, statement: RenderedSQL, format: PostgresFormat) -> Bool {
        statement.withParameters { count, values, lengths, formats in
            PQsendQueryPrepared(conn, name, count, values, lengths, formats, format.rawValue)
        } == 1
    }

    func sendQueryParams(_ statement: RenderedSQL, format: PostgresFormat) -> Bool {
        statement.withParameters { count, values, lengths, formats in
            statement.types.withUnsafeBufferPointer { types in
                PQsendQueryParams(conn, statement.text, count, types.baseAddress, values, lengths, formats, format.rawValue)
            }
        } == 1
    }

    /// A statement without parameters in the extended protocol (`DEALLOCATE bb_3`).
    func sendQueryParams(text: String) -> Bool { PQsendQueryParams(conn, text, 0, nil, nil, nil, nil, 0) == 1 }

    /// A script through the simple protocol.
    func sendQuery(_ script: String) -> Bool { PQsendQuery(conn, script) == 1 }

    func setSingleRowMode() -> Bool { PQsetSingleRowMode(conn) == 1 }

    /// libpq 17's `PQsendPipelineSync` (a Sync queued without flushing), when the loaded libpq
    /// has it: requests then wait in libpq's buffer until the loop's batch of work ends, and
    /// the requests of one batch leave in one write. With an older libpq, `PQpipelineSync`
    /// flushes each request at once. `BB_POSTGRES_FLUSH_EACH=1` turns coalescing off.
    private static let queueSyncFunction: bb_send_pipeline_sync_fn? =
        ProcessInfo.processInfo.environment["BB_POSTGRES_FLUSH_EACH"] == "1" ? nil : bb_send_pipeline_sync_function()

    /// Whether a Sync can be queued without a flush (libpq 17 or newer).
    static var canQueueSync: Bool { queueSyncFunction != nil }

    /// Ends a pipelined request with its Sync: queued without a flush when libpq can
    /// (`queued` true), else sent at once.
    func pipelineSync() -> (ok: Bool, queued: Bool) {
        if let queue = Self.queueSyncFunction { return (queue(conn) == 1, true) }
        return (PQpipelineSync(conn) == 1, false)
    }

    func flush() -> FlushOutcome {
        switch PQflush(conn) {
        case 0: .done
        case 1: .pending
        default: .failed
        }
    }

    // MARK: Receiving

    func consumeInput() -> Bool { PQconsumeInput(conn) == 1 }
    var isBusy: Bool { PQisBusy(conn) == 1 }

    /// The next result (`PQgetResult`), told apart. Call only when `isBusy` is false.
    func nextResult(query: @autoclosure () -> String, secrets: [String]) -> LibPQResult {
        guard let result = PQgetResult(conn) else { return .endOfStep }
        switch PQresultStatus(result) {
        case PGRES_PIPELINE_SYNC:
            PQclear(result)
            return .sync
        case PGRES_PIPELINE_ABORTED:
            PQclear(result)
            return .aborted
        case PGRES_SINGLE_TUPLE:
            return .row(ResultStorage(result: result))
        case PGRES_TUPLES_OK, PGRES_COMMAND_OK, PGRES_EMPTY_QUERY:
            return .result(ResultStorage(result: result))
        case PGRES_COPY_IN, PGRES_COPY_OUT, PGRES_COPY_BOTH:
            PQclear(result)
            return .copyStarted
        default:
            defer { PQclear(result) }
            return .error(Self.error(from: result, query: query(), secrets: secrets, connectionLost: isBad))
        }
    }

    /// Ends a COPY that a query started by mistake (the server rolls it back) and drops what
    /// it sent.
    func abortUnexpectedCopy() {
        _ = PQputCopyEnd(conn, "COPY is not supported here")
        var buffer: UnsafeMutablePointer<CChar>?
        while PQgetCopyData(conn, &buffer, 1) > 0 {
            if let buffer { PQfreemem(buffer) }
            buffer = nil
        }
    }

    /// The notifications read so far (`PQnotifies`).
    func takeNotifications() -> [PostgresNotification] {
        var notifications: [PostgresNotification] = []
        while let notify = PQnotifies(conn) {
            notifications.append(PostgresNotification(
                channel: String(cString: notify.pointee.relname), payload: String(cString: notify.pointee.extra),
                senderPID: notify.pointee.be_pid))
            PQfreemem(notify)
        }
        return notifications
    }

    /// Sends every notice (and an error that arrives while no statement runs: the server's
    /// FATAL before it ends a session) to `box`, which must outlive the handle.
    func installNoticeReceiver(_ box: NoticeBox) {
        PQsetNoticeReceiver(conn, { context, result in
            guard let context, let result else { return }
            let box = Unmanaged<NoticeBox>.fromOpaque(context).takeUnretainedValue()
            func field(_ code: Character) -> String {
                guard let ascii = code.asciiValue, let value = PQresultErrorField(result, Int32(ascii)) else { return "" }
                return String(cString: value)
            }
            box.receive(PostgresNotice(severity: field("V"), sqlState: field("C"), message: field("M")))
        }, Unmanaged.passUnretained(box).toOpaque())
    }

    /// Quotes a name with `PQescapeIdentifier`; nil when libpq refuses it (invalid encoding).
    func escapeIdentifier(_ name: String) -> String? {
        let length = name.utf8.count
        guard let escaped = PQescapeIdentifier(conn, name, length) else { return nil }
        defer { PQfreemem(escaped) }
        return String(cString: escaped)
    }

    /// A cancel object for this session (`PQgetCancel`), usable from any thread.
    func makeCancel() -> CancelObject? { PQgetCancel(conn).map(CancelObject.init) }

    // MARK: Blocking work (a COPY's helper thread, in blocking mode)

    /// Runs `text` (`PQexec`) and returns its result's status, or the error it carries.
    func execute(_ text: String, secrets: [String]) -> Result<CopyStatus, PostgresError> {
        guard let result = PQexec(conn, text) else { return .failure(connectionError(query: text, secrets: secrets)) }
        defer { PQclear(result) }
        switch PQresultStatus(result) {
        case PGRES_COPY_IN: return .success(.copyIn)
        case PGRES_COPY_OUT: return .success(.copyOut)
        case PGRES_FATAL_ERROR, PGRES_NONFATAL_ERROR, PGRES_BAD_RESPONSE:
            return .failure(Self.error(from: result, query: text, secrets: secrets, connectionLost: isBad))
        default: return .success(.other)
        }
    }

    /// What a statement run by `execute` left the connection in.
    enum CopyStatus { case copyIn, copyOut, other }

    /// `PQputCopyData`; false when the bytes could not be sent.
    func putCopyData(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let count = Int32(exactly: bytes.count) else { return false }
        return bytes.withMemoryRebound(to: CChar.self) { PQputCopyData(conn, $0.baseAddress, count) } == 1
    }

    /// `PQputCopyEnd`: nil ends the COPY, a reason aborts it (the server rolls it back).
    func putCopyEnd(abortReason: String?) -> Bool { PQputCopyEnd(conn, abortReason) == 1 }

    /// One chunk of `COPY … TO STDOUT` handed to `body`; false at the end of the data. Throws
    /// when the connection failed.
    func readCopyChunk(_ body: (UnsafeRawBufferPointer) -> Void) -> Bool? {
        var chunk: UnsafeMutablePointer<CChar>?
        let length = PQgetCopyData(conn, &chunk, 0)
        if length > 0, let chunk {
            body(UnsafeRawBufferPointer(start: chunk, count: Int(length)))
            PQfreemem(chunk)
            return true
        }
        return length == -1 ? false : nil
    }

    /// The rest of a blocking command's results: the first one's affected rows, or its error.
    /// Drains libpq to idle before returning, so the connection is never left busy.
    func finishBlockingCommand(query: String, secrets: [String]) -> Result<Int, PostgresError> {
        guard let first = PQgetResult(conn) else { return .failure(connectionError(query: query, secrets: secrets)) }
        while let extra = PQgetResult(conn) { PQclear(extra) }
        switch PQresultStatus(first) {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK:
            return .success(ResultStorage(result: first).affectedRows)
        default:
            defer { PQclear(first) }
            return .failure(Self.error(from: first, query: query, secrets: secrets, connectionLost: isBad))
        }
    }

    /// Drops whatever results are left (after an aborted COPY).
    func drainResults() {
        while let result = PQgetResult(conn) { PQclear(result) }
    }

    /// The error for a connection that could not carry a blocking command.
    func connectionError(query: String, secrets: [String]) -> PostgresError {
        let message = Redaction.redact(errorMessage, secrets: secrets).trimmingCharacters(in: .whitespacesAndNewlines)
        var error = PostgresError(kind: isBad ? .connectionFailure : .protocolViolation, message: isBad ? "the connection to the server was lost: \(message)" : message)
        error.query = query
        error.lostConnectionOutcome = .outcomeUnknown
        return error
    }

    // MARK: Errors

    /// The one builder of a `PostgresError` from a server error: every field the server sent,
    /// the message redacted of `secrets`.
    static func error(from result: OpaquePointer, query: String, secrets: [String], connectionLost lost: Bool) -> PostgresError {
        func field(_ code: Character) -> String? {
            guard let ascii = code.asciiValue, let value = PQresultErrorField(result, Int32(ascii)) else { return nil }
            return String(cString: value)
        }
        let sqlState = field("C")
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
}

/// libpq's cancel object for one session. `PQcancel` blocks (it opens a connection to the
/// server), so it runs on a thread of its own; the object is freed when the last send returned.
final class CancelObject: @unchecked Sendable {
    private let object: OpaquePointer
    fileprivate init(_ object: OpaquePointer) { self.object = object }
    deinit { PQfreeCancel(object) }

    /// Sends the cancel request on a thread of its own, then calls `done` there.
    func send(_ done: @escaping @Sendable () -> Void) {
        runOnHelperThread { [self] in
            sendBlocking()
            done()
        }
    }

    /// Sends the cancel request on the calling thread (a COPY's helper thread).
    func sendBlocking() {
        var buffer = [CChar](repeating: 0, count: 256)
        _ = PQcancel(object, &buffer, Int32(buffer.count))
    }
}

/// Owns one libpq `PGresult`. Immutable after creation, so it is safe to share; freed on deinit.
@usableFromInline
final class ResultStorage: @unchecked Sendable {
    private let result: OpaquePointer?
    let columns: [PostgresColumn]
    let rowCount: Int
    let commandTag: String
    let affectedRows: Int

    fileprivate init(result: OpaquePointer) {
        self.result = result
        let columnCount = Int(PQnfields(result))
        var columns: [PostgresColumn] = []
        columns.reserveCapacity(columnCount)
        for column in 0..<columnCount {
            let name = PQfname(result, Int32(column)).map { String(cString: $0) } ?? "?column?"
            let format: PostgresFormat = PQfformat(result, Int32(column)) == 1 ? .binary : .text
            columns.append(PostgresColumn(name: name, type: PostgresType(PQftype(result, Int32(column))), format: format))
        }
        self.columns = columns
        rowCount = Int(PQntuples(result))
        commandTag = PQcmdStatus(result).map { String(cString: $0) } ?? ""
        affectedRows = PQcmdTuples(result).flatMap { Int(String(cString: $0)) } ?? 0
    }

    /// An empty result (a statement that returned nothing).
    init(commandTag: String) {
        result = nil
        columns = []
        rowCount = 0
        self.commandTag = commandTag
        affectedRows = 0
    }

    deinit { if let result { PQclear(result) } }

    private let keyLock = NSLock()
    private var nameIndex: [String: Int]?
    /// Names looked up by scanning, while the result has no index.
    private var scannedLookups = 0
    /// How many names of a wide result are found by scanning before it gets an index: one
    /// scan of a few dozen names costs about what hashing them all costs once, and most
    /// results read by name read a few columns only (a timeline's two bounds of the day).
    static let scansBeforeIndex = 16

    /// The first column named `name`. A short result is scanned; a wide one is scanned for its
    /// first few names, then gets an index (most results are read by position and need none).
    func columnIndex(named name: String) -> Int? {
        guard columns.count > 16 else { return columns.firstIndex { $0.name == name } }
        return keyLock.withLock { indexLocked(name) }
    }

    /// Whether names are looked up in an index (for tests).
    var hasNameIndex: Bool { keyLock.withLock { nameIndex != nil } }

    /// `columnIndex(named:)` with `keyLock` held.
    private func indexLocked(_ name: String) -> Int? {
        guard columns.count > 16 else { return columns.firstIndex { $0.name == name } }
        if nameIndex == nil && scannedLookups < Self.scansBeforeIndex {
            scannedLookups += 1
            return columns.firstIndex { $0.name == name }
        }
        if nameIndex == nil {
            var index: [String: Int] = [:]
            for (position, column) in columns.enumerated() where index[column.name] == nil { index[column.name] = position }
            nameIndex = index
        }
        return nameIndex?[name]
    }

    /// The property map of the row type whose coding keys are `keys`, for this result's
    /// columns: the one this result used last, else the type's latest if it fits these
    /// columns, else a new one.
    func propertyColumns(for keys: ObjectIdentifier) -> PropertyColumns {
        keyLock.withLock {
            if let (type, map) = lastPropertyColumns, type == keys { return map }
            let map = PropertyColumns.known(for: keys).flatMap { $0.fits(columns) ? $0 : nil }
                ?? PropertyColumns(columnNames: columns.map(\.name))
            lastPropertyColumns = (keys, map)
            return map
        }
    }

    /// The column of `key`, worked out the slow way (`index(forCodingKey:)`), and published in
    /// the type's property map for later rows and results.
    func resolve(codingKey key: String, for keys: ObjectIdentifier) -> Int? {
        let index = index(forCodingKey: key)
        let map = propertyColumns(for: keys).adding(key, at: index ?? -1)
        keyLock.withLock { lastPropertyColumns = (keys, map) }
        PropertyColumns.remember(map, for: keys)
        return index
    }

    private var lastPropertyColumns: (ObjectIdentifier, PropertyColumns)?

    /// The column a `Decodable` property maps to: the exact name, else its snake_case. Asked
    /// once per row type, key and layout (the answer is then kept in `PropertyColumns`).
    private func index(forCodingKey key: String) -> Int? {
        keyLock.withLock { indexLocked(key) ?? indexLocked(RowDecoder.snakeCase(key)) }
    }

    @usableFromInline
    func cell(row: Int, column: Int) -> PostgresCell {
        let info = columns[column]
        var bytes: UnsafeRawBufferPointer?
        if let result, PQgetisnull(result, Int32(row), Int32(column)) == 0, let value = PQgetvalue(result, Int32(row), Int32(column)) {
            bytes = UnsafeRawBufferPointer(start: value, count: Int(PQgetlength(result, Int32(row), Int32(column))))
        }
        return PostgresCell(bytes: bytes, type: info.type, format: info.format, columnName: info.name, columnIndex: column)
    }

    /// Whether a cell is NULL (false outside the result).
    func isNull(row: Int, column: Int) -> Bool {
        guard let result else { return true }
        return PQgetisnull(result, Int32(row), Int32(column)) != 0
    }
}

/// Connection strings as libpq reads them (`PQconninfoParse`), without the network.
enum Conninfo {
    /// The keywords and values `string` sets, or libpq's complaint.
    static func parse(_ string: String) -> Result<[(keyword: String, value: String?)], ParseFailure> {
        var error: UnsafeMutablePointer<CChar>?
        guard let options = PQconninfoParse(string, &error) else {
            let detail = error.map { String(cString: $0) } ?? "unknown error"
            if let error { PQfreemem(error) }
            return .failure(ParseFailure(message: detail))
        }
        defer { PQconninfoFree(options) }
        var pairs: [(keyword: String, value: String?)] = []
        var option = options
        while let keyword = option.pointee.keyword {
            pairs.append((String(cString: keyword), option.pointee.val.map { String(cString: $0) }))
            option += 1
        }
        return .success(pairs)
    }

    struct ParseFailure: Error {
        let message: String
    }
}

/// Calls `body` with a NULL-terminated array of C strings.
private func withCStringArray<R>(_ strings: [String], _ body: ([UnsafePointer<CChar>?]) -> R) -> R {
    let duplicates = strings.map { strdup($0) }
    defer { duplicates.forEach { free($0) } }
    return body(duplicates.map { $0.map { UnsafePointer($0) } } + [nil])
}
