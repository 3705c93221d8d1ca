import Foundation
import Synchronization

// Which statements may leave session state behind (a SET, a LISTEN, a temporary table, an
// advisory lock…): the pool gives such a statement a connection of its own and resets it
// before anyone else uses it. See `SessionReset`.

extension SessionSettings {
    /// Command tags of statements that leave session state behind.
    static func changesSession(commandTag: String) -> Bool {
        switch commandTag {
        case "SET", "RESET", "LISTEN", "DECLARE CURSOR", "PREPARE", "DISCARD ALL", "DISCARD TEMP", "CREATE TABLE", "SELECT INTO",
             "CREATE TABLE AS", "LOAD":
            true
        default:
            false
        }
    }

    /// Statement text that may change session state without a telling command tag (a SELECT of
    /// pg_advisory_lock, set_config, dblink_connect…). Runs on every pool call, so it only
    /// scans bytes.
    ///
    /// `set_config(name, value, true)` with a literal or bound name and value and a literal
    /// `true` is transaction-local (it ends with the transaction, implicit or not), so it does
    /// not count: a session reset on release would cost the next borrower its session caches
    /// (a first write after `RESET ALL` measured 25 ms here, against 1 ms).
    static func mayChangeSession(_ text: String) -> Bool {
        switch scanForSessionChanges(text) {
        case .changesSession: true
        case .callsSetConfig: hasSessionLevelSetConfig(Array(text.utf8).map(folded))
        case .nothing: false
        }
    }

    /// What one pass over `text` found (see `mayChangeSession`).
    enum SessionScan: Int, Comparable {
        static func < (a: SessionScan, b: SessionScan) -> Bool { a.rawValue < b.rawValue }

        case nothing = 0
        /// A `set_config(`, whose arguments decide (it needs the whole statement).
        case callsSetConfig = 1
        case changesSession = 2
    }

    static func scanForSessionChanges(_ text: String) -> SessionScan {
        var text = text
        return text.withUTF8(scanForSessionChanges)
    }

    /// One pass over the bytes, ASCII case folded on the fly, no copy: the pool asks this of
    /// every statement, and the store's are several kilobytes (lowercased() and
    /// String.contains took 0.46 ms on the dashboard's 6 kB in a debug build).
    static func scanForSessionChanges(_ bytes: UnsafeBufferPointer<UInt8>) -> SessionScan {
        var sawSetConfig = false
        for index in bytes.indices {
            switch folded(bytes[index]) {
            case UInt8(ascii: "a"): if matches(bytes, at: index, "advisory") { return .changesSession }
            case UInt8(ascii: "d"): if matches(bytes, at: index, "dblink") { return .changesSession }
            case UInt8(ascii: "l"): if matches(bytes, at: index, "listen") { return .changesSession }
            case UInt8(ascii: "t"): if matches(bytes, at: index, "temp") { return .changesSession }
            case UInt8(ascii: "s"):
                if matches(bytes, at: index, "set role") || matches(bytes, at: index, "set session") { return .changesSession }
                if matches(bytes, at: index, "set_config") { sawSetConfig = true }
            default: continue
            }
        }
        return sawSetConfig ? .callsSetConfig : .nothing
    }

    /// ASCII letters to lower case; every other byte as it is.
    @inline(__always)
    static func folded(_ byte: UInt8) -> UInt8 {
        (0x41...0x5A).contains(byte) ? byte | 0x20 : byte
    }

    /// Whether `bytes` at `index` spell `word` (lower-case ASCII), ignoring case.
    @inline(__always)
    static func matches(_ bytes: UnsafeBufferPointer<UInt8>, at index: Int, _ word: StaticString) -> Bool {
        let count = word.utf8CodeUnitCount
        guard index + count <= bytes.count else { return false }
        let pattern = word.utf8Start
        for offset in 0..<count where folded(bytes[index + offset]) != pattern[offset] { return false }
        return true
    }

    /// Whether some `set_config(` in `text` (lower-cased) is not `set_config(a, b, true)` with
    /// `a` and `b` each a quoted literal or a `$n` parameter.
    static func hasSessionLevelSetConfig(_ text: [UInt8]) -> Bool {
        let name = Array("set_config".utf8)
        var index = 0
        func skipSpace() { while index < text.count, [0x20, 0x09, 0x0A, 0x0D].contains(text[index]) { index += 1 } }
        func take(_ byte: UInt8) -> Bool {
            skipSpace()
            guard index < text.count, text[index] == byte else { return false }
            index += 1
            return true
        }
        func argument() -> Bool {
            skipSpace()
            guard index < text.count else { return false }
            if text[index] == UInt8(ascii: "$") {
                index += 1
                let start = index
                while index < text.count, (0x30...0x39).contains(text[index]) { index += 1 }
                return index > start
            }
            guard text[index] == UInt8(ascii: "'") else { return false }
            index += 1
            while index < text.count {
                if text[index] == UInt8(ascii: "'") {
                    if index + 1 < text.count, text[index + 1] == UInt8(ascii: "'") { index += 2; continue }
                    index += 1
                    return true
                }
                index += 1
            }
            return false
        }
        while index + name.count <= text.count {
            guard text[index..<index + name.count].elementsEqual(name) else { index += 1; continue }
            index += name.count
            guard take(UInt8(ascii: "(")), argument(), take(UInt8(ascii: ",")), argument(), take(UInt8(ascii: ",")) else { return true }
            skipSpace()
            guard index + 4 <= text.count, text[index..<index + 4].elementsEqual("true".utf8) else { return true }
            index += 4
            guard take(UInt8(ascii: ")")) else { return true }
        }
        return false
    }

    /// Whether a statement must not share its connection with other callers' statements: it
    /// may change session state (a `SET`, `LISTEN`, a temp table, an advisory lock…), which
    /// the others would then run under until the connection is reset.
    static func needsOwnSession(_ text: String) -> Bool {
        startsWithSessionKeyword(text) || mayChangeSession(text)
    }

    /// The same for a statement not rendered yet (the pool asks before it has a connection):
    /// its text pieces and quoted names are scanned in place, without building its text. Only
    /// a `set_config(` call, whose arguments may be parameters, needs the statement's text.
    static func needsOwnSession(_ sql: SQL) -> Bool {
        needsOwnSession(sql, looked: sql.shapeLookup)
    }

    /// The same, with the statement's shape as the caller looked it up (`SQL.shapeLookup`;
    /// nil: it has none), so that the pool looks it up once for this and the render.
    static func needsOwnSession(_ sql: SQL, looked: SQL.ShapeLookup?) -> Bool {
        // The answer depends only on the text, so a statement built from literals and values
        // is scanned once per shape (the pool asks before every statement).
        guard let lookup = looked else { return scanForOwnSession(sql) }
        if let known = lookup.facts?.ownSession { return known }
        let found = scanForOwnSession(sql)
        SQL.remember(lookup.shape) { $0.ownSession = found }
        return found
    }

    private static func scanForOwnSession(_ sql: SQL) -> Bool {
        guard let first = sql.segments.first else { return false }
        switch first {
        case .literal(let text): if text.withUTF8Buffer(startsWithSessionKeyword) { return true }
        case .text(let text): if startsWithSessionKeyword(text) { return true }
        case .value, .null, .identifier: break
        }
        var sawSetConfig = false
        // A word may run across the seam of two pieces of text that follow one another
        // ("pg_advi" + "sory_lock"): each seam is scanned too (a value or a quoted name
        // between two pieces separates their words).
        var previous: SQL.Segment?
        for segment in sql.segments {
            var found: SessionScan
            switch segment {
            case .literal(let text):
                found = scan(literal: text)
                if let previous { found = max(found, seamScan(previous, segment)) }
            case .text(let text):
                found = scanForSessionChanges(text)
                if let previous { found = max(found, seamScan(previous, segment)) }
            case .identifier(let parts):
                found = parts.map(scanForSessionChanges).max() ?? .nothing
            case .value, .null:
                previous = nil
                continue
            }
            if case .identifier = segment { previous = nil } else { previous = segment }
            switch found {
            case .changesSession: return true
            case .callsSetConfig: sawSetConfig = true
            case .nothing: break
            }
        }
        return sawSetConfig && hasSessionLevelSetConfig(Array(sql.description.utf8).map(folded))
    }

    /// Bytes on each side of a seam that are scanned together: one less than the longest
    /// word looked for ("set session").
    private static let seam = 10

    /// What lies across the seam of two pieces of text: the last `seam` bytes of `left` and
    /// the first `seam` of `right`, scanned together (remembered for two literals).
    static func seamScan(_ left: SQL.Segment, _ right: SQL.Segment) -> SessionScan {
        if case .literal(let a) = left, case .literal(let b) = right, a.hasPointerRepresentation, b.hasPointerRepresentation {
            let key = SeamKey(left: UInt(bitPattern: a.utf8Start), right: UInt(bitPattern: b.utf8Start))
            if let known = literalSeams.withLock({ $0[key] }) { return known }
            let found = a.withUTF8Buffer { l in b.withUTF8Buffer { r in seamScan(l, r) } }
            literalSeams.withLock { $0[key] = found }
            return found
        }
        return withBytes(left) { l in withBytes(right) { r in seamScan(l, r) } }
    }

    private static func withBytes<R>(_ segment: SQL.Segment, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        switch segment {
        case .literal(let text): return text.withUTF8Buffer(body)
        case .text(let text):
            var text = text
            return text.withUTF8(body)
        case .value, .null, .identifier: return body(UnsafeBufferPointer(start: nil, count: 0)) // not text: no seam
        }
    }

    private static func seamScan(_ left: UnsafeBufferPointer<UInt8>, _ right: UnsafeBufferPointer<UInt8>) -> SessionScan {
        let tail = left.suffix(seam), head = right.prefix(seam)
        guard !tail.isEmpty, !head.isEmpty else { return .nothing }
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: tail.count + head.count) { window in
            _ = window.initialize(fromContentsOf: tail)
            _ = UnsafeMutableBufferPointer(rebasing: window[tail.count...]).initialize(fromContentsOf: head)
            return scanForSessionChanges(UnsafeBufferPointer(window))
        }
    }

    struct SeamKey: Hashable, Sendable {
        let left: UInt
        let right: UInt
    }
    private static let literalSeams = Mutex<[SeamKey: SessionScan]>([:])

    /// What a literal of the program's source holds, scanned once: literals live as long as
    /// the process and are finitely many, so they are remembered by address (the store's
    /// dashboard is 6 kB of literal text; scanning it on every call was the pool's largest
    /// cost per call).
    private static let literalScans = Mutex<[UInt: SessionScan]>([:])

    static func scan(literal: StaticString) -> SessionScan {
        guard literal.hasPointerRepresentation else { return literal.withUTF8Buffer(scanForSessionChanges) }
        let address = UInt(bitPattern: literal.utf8Start)
        if let known = literalScans.withLock({ $0[address] }) { return known }
        let found = literal.withUTF8Buffer(scanForSessionChanges)
        literalScans.withLock { $0[address] = found }
        return found
    }

    /// Keywords that open a statement which changes the session.
    private static let sessionKeywords: [StaticString] = ["set", "reset", "listen", "unlisten", "declare", "prepare", "discard", "load", "create"]

    /// Whether the statement's first keyword (after white space, `(` and comments, ASCII case
    /// ignored) is one of `sessionKeywords`. Bytes, not Characters: the pool asks it of every
    /// call, and Unicode letter tests were 3% of a call's client time.
    static func startsWithSessionKeyword(_ text: String) -> Bool {
        var text = text
        return text.withUTF8(startsWithSessionKeyword)
    }

    static func startsWithSessionKeyword(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            let next: UInt8 = index + 1 < bytes.count ? bytes[index + 1] : 0
            if byte == 0x20 || (0x09...0x0D).contains(byte) || byte == UInt8(ascii: "(") {
                index += 1
            } else if byte == UInt8(ascii: "-"), next == UInt8(ascii: "-") {
                while index < bytes.count, bytes[index] != 0x0A { index += 1 } // to the end of the line
            } else if byte == UInt8(ascii: "/"), next == UInt8(ascii: "*") {
                index = endOfBlockComment(bytes, from: index)
            } else {
                break
            }
        }
        var end = index
        while end < bytes.count, (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(folded(bytes[end])) { end += 1 }
        return sessionKeywords.contains { $0.utf8CodeUnitCount == end - index && matches(bytes, at: index, $0) }
    }

    /// The index after the block comment that opens at `start`; comments nest, as in PostgreSQL.
    private static func endOfBlockComment(_ bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Int {
        var index = start
        var depth = 0
        while index < bytes.count {
            let next: UInt8 = index + 1 < bytes.count ? bytes[index + 1] : 0
            if bytes[index] == UInt8(ascii: "/"), next == UInt8(ascii: "*") {
                depth += 1
                index += 2
            } else if bytes[index] == UInt8(ascii: "*"), next == UInt8(ascii: "/") {
                depth -= 1
                index += 2
                if depth == 0 { return index }
            } else {
                index += 1
            }
        }
        return index
    }
}
