/// A migration file cut into statements exactly where `psql -f` cuts it.
///
/// The rules are those of PostgreSQL's own scanners (`src/backend/parser/scan.l` for what is a
/// comment, a string, a quoted identifier or a dollar quote, and `src/fe_utils/psqlscan.l` for
/// where a statement ends):
///
/// - `--` comments run to the end of the line; `/* … */` comments nest, and one left open is an
///   error (the server reports it too).
/// - `'…'` strings double their quotes; `E'…'` strings also take backslash escapes (`\'`);
///   `U&'…'`, `B'…'`, `X'…'` and `N'…'` are strings; `"…"` and `U&"…"` are identifiers; a string
///   continued on the next line (`'a'` newline `'b'`) stays one string.
/// - `$tag$ … $tag$` is opaque; `$1` is a parameter; `a$b` is one identifier.
/// - A semicolon ends a statement only outside parentheses and outside the `BEGIN … END` of a
///   `CREATE [OR REPLACE] FUNCTION|PROCEDURE … BEGIN ATOMIC` body (psql's own heuristic).
/// - A backslash outside a string starts a psql meta-command (`\set`, `\i`, `\connect`): not SQL,
///   refused, with what to write instead. `\restrict KEY` and `\unrestrict KEY`, which every
///   current `pg_dump` writes around a dump, are taken as psql takes them: they change no SQL, so
///   they are skipped, and the keys must match.
/// - `COPY … FROM stdin` is refused at the COPY: its rows are lines only psql sends.
///
/// Statements are sent to the server one at a time, as psql sends them, so the server's own
/// parser has the last word; `SQLScript` only has to agree with psql on the boundaries. A
/// differential test applies a corpus of files with both and compares the schemas.
///
/// ```swift
/// let statements = try SQLScript.statements(in: "CREATE TABLE t (x text DEFAULT ';'); /* a /* nested */ comment */ SELECT 1")
/// // statements.map(\.line) == [1, 1]; statements[1].words == ["SELECT"]
/// ```
public enum SQLScript {
    /// One statement: its text (without the terminating semicolon), where it starts, and its
    /// first words.
    ///
    /// ```swift
    /// for statement in try SQLScript.statements(in: sql) { print("\(statement.line): \(statement.words.prefix(3))") }
    /// ```
    public struct Statement: Sendable, Equatable {
        /// The text sent to the server, as psql sends it: from the first character that is
        /// neither whitespace nor part of a `--` comment (a `/* */` comment is kept) up to, not
        /// including, the terminating semicolon.
        public let text: String
        /// The 1-based line and column of the first character of `text`.
        public let textLine: Int
        public let textColumn: Int
        /// The 1-based line of the statement's first word (after any leading comment): the line
        /// messages name.
        public let line: Int
        /// The statement as written, from its first word, with each run of whitespace made one
        /// space and cut after about 72 characters: how messages name it
        /// (`CREATE INDEX CONCURRENTLY IF NOT EXISTS events_by_day ON events …`).
        public let excerpt: String
        /// Its first words, at most `wordLimit`: unquoted ones upper-cased (`["CREATE", "UNIQUE",
        /// "INDEX", "CONCURRENTLY"]`), quoted identifiers as written (`"\"My Index\""`).
        public let words: [String]
        /// The first words of each part after a semicolon that did not end the statement (inside
        /// parentheses or a `BEGIN … END` body, or merged by psql's heuristic, as after a function
        /// named `begin`): the guards check these too.
        public let innerParts: [[String]]

        static let wordLimit = 12

        /// The words joined by single spaces: `"CREATE INDEX CONCURRENTLY"`.
        public var leadingWords: String { words.joined(separator: " ") }
    }

    /// Text that cannot be cut into statements.
    ///
    /// ```swift
    /// do { _ = try SQLScript.statements(in: sql) } catch let error as SQLScript.SyntaxError { print(error.line, error.message) }
    /// ```
    public struct SyntaxError: Error, Sendable, Equatable, CustomStringConvertible {
        public let line: Int
        public let column: Int
        public let message: String
        public var description: String { "\(line):\(column): \(message)" }

        public init(line: Int, column: Int, message: String) {
            self.line = line
            self.column = column
            self.message = message
        }
    }

    /// Cuts `sql` into statements; statements without code (only comments) are left out.
    public static func statements(in sql: String) throws(SyntaxError) -> [Statement] {
        var scanner = Scanner(Array(sql.utf8))
        return try scanner.run()
    }

    // MARK: Scanner

    private struct Scanner {
        let bytes: [UInt8]
        var index = 0
        /// Byte offsets where each line starts (line N starts at lineStarts[N - 1]).
        let lineStarts: [Int]

        // psql's statement-ending state.
        var parenDepth = 0
        var beginDepth = 0
        var identifierCount = 0
        var identifiers: [UInt8] = [0, 0, 0, 0]

        // The statement being collected.
        var textStart: Int?
        var firstWord: Int?
        var words: [String] = []
        var innerParts: [[String]] = []
        /// Words of the current part after an inner semicolon.
        var partWords: [String]?
        /// The statement's previous word (for `FROM STDIN`), and whether it is a `COPY … FROM STDIN`.
        var previousWord: String?
        var readsStandardInput = false
        /// The key and line of a `\restrict` not yet ended by its `\unrestrict`.
        var restriction: (key: String, line: Int)?
        var statements: [Statement] = []

        init(_ bytes: [UInt8]) {
            self.bytes = bytes
            var starts = [0]
            for (offset, byte) in bytes.enumerated() where byte == UInt8(ascii: "\n") { starts.append(offset + 1) }
            lineStarts = starts
        }

        /// Line and column (in characters) of byte `offset`.
        func position(of offset: Int) -> (line: Int, column: Int) {
            var low = 0
            var high = lineStarts.count - 1
            while low < high {
                let middle = (low + high + 1) / 2
                if lineStarts[middle] <= offset { low = middle } else { high = middle - 1 }
            }
            var column = 1
            var cursor = lineStarts[low]
            while cursor < offset {
                if bytes[cursor] & 0xC0 != 0x80 { column += 1 }
                cursor += 1
            }
            return (low + 1, column)
        }

        func byte(_ offset: Int) -> UInt8? { offset < bytes.count ? bytes[offset] : nil }

        func error(_ message: String, at offset: Int) -> SyntaxError {
            let (line, column) = position(of: offset)
            return SyntaxError(line: line, column: column, message: message)
        }

        static func isSpace(_ byte: UInt8) -> Bool {
            byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D || byte == 0x0C
        }

        static func isNewline(_ byte: UInt8) -> Bool { byte == 0x0A || byte == 0x0D }

        /// `[A-Za-z\200-\377_]`
        static func isIdentifierStart(_ byte: UInt8) -> Bool {
            (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || byte >= 0x80 || byte == 0x5F
        }

        static func isDigit(_ byte: UInt8) -> Bool { byte >= 0x30 && byte <= 0x39 }

        /// `[A-Za-z\200-\377_0-9]` (a dollar-quote tag character)
        static func isTagContinue(_ byte: UInt8) -> Bool { isIdentifierStart(byte) || isDigit(byte) }

        /// `[A-Za-z\200-\377_0-9\$]` (an identifier character)
        static func isIdentifierContinue(_ byte: UInt8) -> Bool { isTagContinue(byte) || byte == 0x24 }

        mutating func markText(_ offset: Int) {
            if textStart == nil { textStart = offset }
        }

        mutating func markCode(_ offset: Int) {
            markText(offset)
            if firstWord == nil { firstWord = offset }
        }

        mutating func run() throws(SyntaxError) -> [Statement] {
            while let current = byte(index) {
                let next = byte(index + 1)
                switch current {
                case _ where Self.isSpace(current):
                    index += 1
                case UInt8(ascii: "-") where next == UInt8(ascii: "-"):
                    // psql drops `--` comments before a statement; inside one they stay.
                    while let c = byte(index), !Self.isNewline(c) { index += 1 }
                case UInt8(ascii: "/") where next == UInt8(ascii: "*"):
                    markText(index)
                    try skipBlockComment()
                case UInt8(ascii: "'"):
                    markCode(index)
                    try skipString(from: index, contentStart: index + 1, escapes: false)
                case UInt8(ascii: "\""):
                    markCode(index)
                    let start = index
                    try skipQuotedIdentifier(from: index, contentStart: index + 1)
                    addWord(String(decoding: bytes[start..<index], as: UTF8.self))
                case UInt8(ascii: "$"):
                    markCode(index)
                    try skipDollar()
                case UInt8(ascii: "\\"):
                    try metaCommand()
                case UInt8(ascii: "("):
                    markCode(index)
                    parenDepth += 1
                    index += 1
                case UInt8(ascii: ")"):
                    markCode(index)
                    if parenDepth > 0 { parenDepth -= 1 }
                    index += 1
                case UInt8(ascii: ";"):
                    if parenDepth == 0 && beginDepth == 0 {
                        try finishStatement(end: index)
                        identifierCount = 0
                    } else {
                        markCode(index)
                        if let part = partWords, !part.isEmpty { innerParts.append(part) }
                        partWords = []
                    }
                    index += 1
                case _ where Self.isDigit(current):
                    markCode(index)
                    skipNumber()
                case _ where Self.isIdentifierStart(current):
                    markCode(index)
                    try identifierOrPrefixedString()
                default:
                    markCode(index)
                    index += 1
                }
            }
            try finishStatement(end: bytes.count)
            return statements
        }

        /// A backslash outside a string: `\restrict` and `\unrestrict` are skipped (their keys
        /// must match, as psql checks); every other meta-command is refused with what to do instead.
        mutating func metaCommand() throws(SyntaxError) {
            let start = index
            var end = index + 1
            while let c = byte(end), !Self.isSpace(c), c != UInt8(ascii: "\\") || end == index + 1 { end += 1 }
            let command = String(decoding: bytes[start..<end], as: UTF8.self)
            guard command == "\\restrict" || command == "\\unrestrict" else {
                throw error("\(command) is a psql meta-command, not SQL, and bbmigrate runs SQL only: \(Self.advice(for: command))", at: start)
            }
            var lineEnd = end
            while let c = byte(lineEnd), !Self.isNewline(c) { lineEnd += 1 }
            var keyStart = end
            var keyEnd = lineEnd
            while keyStart < keyEnd, Self.isSpace(bytes[keyStart]) { keyStart += 1 }
            while keyEnd > keyStart, Self.isSpace(bytes[keyEnd - 1]) { keyEnd -= 1 }
            let key = String(decoding: bytes[keyStart..<keyEnd], as: UTF8.self)
            let line = position(of: start).line
            if command == "\\restrict" {
                guard !key.isEmpty else { throw error("\\restrict needs a key (pg_dump writes \\restrict followed by one)", at: start) }
                if let open = restriction {
                    throw error("a second \\restrict before the \\unrestrict of line \(open.line)'s; a dump has one pair, around everything", at: start)
                }
                restriction = (key, line)
            } else {
                guard let open = restriction else {
                    throw error("\\unrestrict without a \\restrict before it; a dump has one pair, \\restrict at its top", at: start)
                }
                guard open.key == key else {
                    throw error("\\unrestrict's key is not the one \\restrict gave on line \(open.line); they come from one pg_dump run and must match", at: start)
                }
                restriction = nil
            }
            index = lineEnd
        }

        /// What to write instead of a psql meta-command.
        static func advice(for command: String) -> String {
            switch command {
            case "\\i", "\\ir", "\\include", "\\include_relative":
                "it reads another file, and a migration is one file; put those statements here, or make that file a migration of its own"
            case "\\set", "\\unset", "\\gset", "\\getenv":
                "psql variables do not exist here; write the value out (a server setting is SET name = value)"
            case "\\c", "\\connect":
                "a migration runs in the one database bbmigrate connected to; run it with --url for that database instead"
            case "\\copy":
                "it reads a file on the client; write the rows as INSERT … VALUES (pg_dump --inserts writes them so)"
            case "\\if", "\\elif", "\\else", "\\endif":
                "psql conditionals do not exist here; use a DO block with IF … THEN … END IF"
            case "\\gexec":
                "it runs a query's results as statements; write those statements out, or EXECUTE them in a DO block"
            case "\\echo", "\\qecho", "\\warn":
                "it prints a line; delete it, or RAISE NOTICE in a DO block"
            case "\\.":
                "it ends the rows of a COPY … FROM stdin, which bbmigrate does not read; write the rows as INSERT … VALUES"
            default:
                "delete it, or do what it does in SQL"
            }
        }

        mutating func addWord(_ word: String) {
            if previousWord == "FROM" && word == "STDIN" && words.first == "COPY" { readsStandardInput = true }
            previousWord = word
            if words.count < Statement.wordLimit { words.append(word) }
            if partWords != nil, partWords?.count ?? 0 < 4 { partWords?.append(word) }
        }

        mutating func finishStatement(end: Int) throws(SyntaxError) {
            if let part = partWords, !part.isEmpty { innerParts.append(part) }
            defer {
                textStart = nil
                firstWord = nil
                words = []
                innerParts = []
                partWords = nil
                previousWord = nil
                readsStandardInput = false
            }
            guard let start = textStart, let first = firstWord else { return }
            if readsStandardInput {
                throw error("COPY … FROM stdin takes its rows from the lines after it, which psql sends and bbmigrate does not "
                    + "(it runs SQL only); write the rows as INSERT … VALUES (pg_dump --inserts writes them so)", at: first)
            }
            var stop = end
            while stop > start, Self.isSpace(bytes[stop - 1]) { stop -= 1 }
            let (textLine, textColumn) = position(of: start)
            statements.append(Statement(
                text: String(decoding: bytes[start..<stop], as: UTF8.self),
                textLine: textLine, textColumn: textColumn, line: position(of: first).line,
                excerpt: Self.excerpt(bytes[first..<max(first, stop)]), words: words, innerParts: innerParts))
        }

        /// `text` with each run of whitespace made one space, cut at a word after about 72
        /// characters.
        static func excerpt(_ text: ArraySlice<UInt8>) -> String {
            var collapsed: [UInt8] = []
            var space = false
            for byte in text {
                if isSpace(byte) {
                    space = true
                    continue
                }
                if space && !collapsed.isEmpty { collapsed.append(0x20) }
                space = false
                collapsed.append(byte)
            }
            let whole = String(decoding: collapsed, as: UTF8.self)
            guard whole.count > 72 else { return whole }
            let cut = whole.prefix(72)
            let atWord = cut.lastIndex(of: " ").map { cut[..<$0] } ?? cut
            return atWord + " …"
        }

        /// `/* … */`, nesting, at `index`.
        mutating func skipBlockComment() throws(SyntaxError) {
            let opening = index
            var depth = 0
            index += 2
            while true {
                guard let c = byte(index) else {
                    throw error("this /* comment is never closed (comments nest: each /* inside it needs its own */)", at: opening)
                }
                let next = byte(index + 1)
                if c == UInt8(ascii: "/") && next == UInt8(ascii: "*") {
                    depth += 1
                    index += 2
                } else if c == UInt8(ascii: "*") && next == UInt8(ascii: "/") {
                    index += 2
                    if depth == 0 { return }
                    depth -= 1
                } else {
                    index += 1
                }
            }
        }

        /// A string whose opening quote is at `from` and content starts at `contentStart`.
        /// `escapes`: an `E''` string, where a backslash escapes the next character.
        mutating func skipString(from opening: Int, contentStart: Int, escapes: Bool, doubling: Bool = true) throws(SyntaxError) {
            index = contentStart
            while true {
                guard let c = byte(index) else {
                    throw error("this quoted string is never closed", at: opening)
                }
                if escapes && c == UInt8(ascii: "\\") {
                    index += byte(index + 1) == nil ? 1 : 2
                } else if c == UInt8(ascii: "'") {
                    if doubling && byte(index + 1) == UInt8(ascii: "'") {
                        index += 2
                    } else {
                        index += 1
                        // 'a' <newline> 'b' is one string: continue in the same mode.
                        guard let continued = continuation(after: index) else { return }
                        index = continued
                    }
                } else {
                    index += 1
                }
            }
        }

        /// scan.l's {quotecontinue}: horizontal whitespace or `--` comments, a newline, then any
        /// whitespace or whole-line `--` comments, then a quote. Returns the offset after that
        /// quote, or nil.
        func continuation(after offset: Int) -> Int? {
            var cursor = offset
            // {horiz_whitespace}*
            while let c = byte(cursor) {
                if c == 0x20 || c == 0x09 || c == 0x0C {
                    cursor += 1
                } else if c == UInt8(ascii: "-") && byte(cursor + 1) == UInt8(ascii: "-") {
                    while let d = byte(cursor), !Self.isNewline(d) { cursor += 1 }
                } else {
                    break
                }
            }
            // {newline}
            guard let c = byte(cursor), Self.isNewline(c) else { return nil }
            cursor += 1
            // {special_whitespace}*: {space}+ | {comment}{newline}
            while let d = byte(cursor) {
                if Self.isSpace(d) {
                    cursor += 1
                } else if d == UInt8(ascii: "-") && byte(cursor + 1) == UInt8(ascii: "-") {
                    var end = cursor
                    while let e = byte(end), !Self.isNewline(e) { end += 1 }
                    guard byte(end) != nil else { return nil }
                    cursor = end + 1
                } else {
                    break
                }
            }
            return byte(cursor) == UInt8(ascii: "'") ? cursor + 1 : nil
        }

        mutating func skipQuotedIdentifier(from opening: Int, contentStart: Int) throws(SyntaxError) {
            index = contentStart
            while true {
                guard let c = byte(index) else {
                    throw error("this quoted identifier (\") is never closed", at: opening)
                }
                index += 1
                if c == UInt8(ascii: "\"") {
                    if byte(index) == UInt8(ascii: "\"") { index += 1 } else { return }
                }
            }
        }

        /// `$tag$ … $tag$`, `$1`, or a lone `$`.
        mutating func skipDollar() throws(SyntaxError) {
            let opening = index
            var end = index + 1
            if let first = byte(end), Self.isIdentifierStart(first) {
                while let c = byte(end), Self.isTagContinue(c) { end += 1 }
            }
            guard byte(end) == UInt8(ascii: "$") else {
                // $1 (a parameter) or a lone $ ({dolqfailed} puts back all but the "$").
                index += 1
                while let c = byte(index), Self.isDigit(c), end == opening + 1 { index += 1 }
                return
            }
            let delimiter = Array(bytes[opening...end])
            index = end + 1
            while true {
                guard let c = byte(index) else {
                    let tag = String(decoding: delimiter, as: UTF8.self)
                    throw error("this \(tag) dollar-quoted string is never closed (it ends at the next \(tag))", at: opening)
                }
                if c == UInt8(ascii: "$"), index + delimiter.count <= bytes.count,
                   bytes[index..<(index + delimiter.count)].elementsEqual(delimiter) {
                    index += delimiter.count
                    return
                }
                index += 1
            }
        }

        /// `{integer}`, `{decimal}`, `{real}`; `1..10` is 1, `..`, 10; `1e` leaves the `e`.
        mutating func skipNumber() {
            while let c = byte(index), Self.isDigit(c) { index += 1 }
            if byte(index) == UInt8(ascii: "."), byte(index + 1) != UInt8(ascii: ".") {
                index += 1
                while let c = byte(index), Self.isDigit(c) { index += 1 }
            }
            if let e = byte(index), e == UInt8(ascii: "e") || e == UInt8(ascii: "E") {
                var cursor = index + 1
                if let sign = byte(cursor), sign == UInt8(ascii: "+") || sign == UInt8(ascii: "-") { cursor += 1 }
                if let digit = byte(cursor), Self.isDigit(digit) {
                    index = cursor
                    while let c = byte(index), Self.isDigit(c) { index += 1 }
                }
            }
        }

        /// An identifier, or a string introduced by a one-letter prefix (`E'`, `B'`, `X'`, `N'`,
        /// `U&'`, `U&"`), which scan.l matches as a longer token than the bare letter.
        mutating func identifierOrPrefixedString() throws(SyntaxError) {
            let start = index
            let letter = bytes[start] | 0x20 // lower-case ASCII
            let next = byte(start + 1)
            if next == UInt8(ascii: "'") {
                switch letter {
                case UInt8(ascii: "e"): return try skipString(from: start + 1, contentStart: start + 2, escapes: true)
                case UInt8(ascii: "b"), UInt8(ascii: "x"): return try skipString(from: start + 1, contentStart: start + 2, escapes: false, doubling: false)
                case UInt8(ascii: "n"):
                    index += 1 // {xnstart}: only the N is eaten; the quote starts a plain string
                    return
                default: break
                }
            }
            if letter == UInt8(ascii: "u") && next == UInt8(ascii: "&") {
                switch byte(start + 2) {
                case UInt8(ascii: "'"): return try skipString(from: start + 2, contentStart: start + 3, escapes: false)
                case UInt8(ascii: "\""): return try skipQuotedIdentifier(from: start + 2, contentStart: start + 3)
                default:
                    index += 1 // {xufailed}: the U alone
                    return
                }
            }
            index += 1
            while let c = byte(index), Self.isIdentifierContinue(c) { index += 1 }
            // ASCII case folding only, as PostgreSQL folds keywords (`begın` is not BEGIN).
            let word = String(decoding: bytes[start..<index].map { $0 >= 0x61 && $0 <= 0x7A ? $0 - 0x20 : $0 }, as: UTF8.self)
            addWord(word)
            trackBeginAtomic(word)
        }

        /// psqlscan.l's heuristic: in a statement that starts CREATE [OR REPLACE]
        /// FUNCTION|PROCEDURE, BEGIN … END (and CASE … END inside it) hide semicolons.
        mutating func trackBeginAtomic(_ word: String) {
            if identifierCount == 0 { identifiers = [0, 0, 0, 0] }
            if ["CREATE", "FUNCTION", "PROCEDURE", "OR", "REPLACE"].contains(word), identifierCount < identifiers.count {
                identifiers[identifierCount] = word.utf8.first.map { $0 | 0x20 } ?? 0
            }
            identifierCount += 1
            let c = UInt8(ascii: "c"), f = UInt8(ascii: "f"), p = UInt8(ascii: "p"), o = UInt8(ascii: "o"), r = UInt8(ascii: "r")
            let createsRoutine = identifiers[0] == c
                && (identifiers[1] == f || identifiers[1] == p
                    || (identifiers[1] == o && identifiers[2] == r && (identifiers[3] == f || identifiers[3] == p)))
            guard createsRoutine && parenDepth == 0 else { return }
            switch word {
            case "BEGIN": beginDepth += 1
            case "CASE": if beginDepth >= 1 { beginDepth += 1 }
            case "END":
                if beginDepth > 0 {
                    beginDepth -= 1
                    // The END that closes a BEGIN ATOMIC body (or a CASE in it) is not a COMMIT.
                    if partWords == ["END"] { partWords = [] }
                }
            default: break
            }
        }
    }
}

extension SQLScript.Statement {
    /// What kind of statement this is, as far as bbmigrate's rules care.
    enum Kind: Equatable {
        /// BEGIN, COMMIT, ROLLBACK, SAVEPOINT, PREPARE TRANSACTION, …: bbmigrate owns the transaction.
        case transactionControl
        /// Refused by PostgreSQL inside a transaction block (CREATE INDEX CONCURRENTLY, VACUUM, …).
        case needsNoTransaction
        /// SET, RESET and COMMENT ON: idempotent statements that may accompany the ones above
        /// in a no-transaction file (a resumed run may repeat them harmlessly).
        case companion
        case other
    }

    /// Transaction control anywhere in the statement: at its start, or after an inner semicolon
    /// (where psql merged what a semicolon would otherwise have ended).
    var controlsTransaction: Bool {
        ([words] + innerParts).contains { Self.isTransactionControl($0) }
    }

    static func isTransactionControl(_ words: [String]) -> Bool {
        switch words.first {
        case "BEGIN", "COMMIT", "END", "ROLLBACK", "ABORT", "SAVEPOINT", "RELEASE": true
        case "START", "PREPARE": words.count > 1 && words[1] == "TRANSACTION"
        default: false
        }
    }

    var kind: Kind {
        let text = leadingWords
        func starts(_ prefix: String) -> Bool { text == prefix || text.hasPrefix(prefix + " ") }
        if Self.isTransactionControl(words) { return .transactionControl }
        switch words.first {
        case "SET", "RESET": return .companion
        case "COMMENT" where words.count > 1 && words[1] == "ON": return .companion
        default: break
        }
        let noTransaction = [
            "CREATE INDEX CONCURRENTLY", "CREATE UNIQUE INDEX CONCURRENTLY", "DROP INDEX CONCURRENTLY",
            "VACUUM", "CREATE DATABASE", "DROP DATABASE", "ALTER SYSTEM", "CREATE TABLESPACE", "DROP TABLESPACE",
            "REINDEX SYSTEM", "REINDEX DATABASE",
        ]
        if noTransaction.contains(where: starts) { return .needsNoTransaction }
        if words.first == "REINDEX" && words.contains("CONCURRENTLY") { return .needsNoTransaction }
        if words.first == "ALTER" && words.count > 1 && words[1] == "TABLE" && words.contains("DETACH") && words.contains("CONCURRENTLY") {
            return .needsNoTransaction
        }
        return .other
    }
}

extension SQLScript.Statement {
    /// The index a `CREATE [UNIQUE] INDEX CONCURRENTLY [IF NOT EXISTS] [schema.]name ON …`
    /// builds, as PostgreSQL names it (unquoted names folded to lower case); nil for other
    /// statements and unnamed indexes.
    public var concurrentIndexName: (schema: String?, name: String)? {
        guard kind == .needsNoTransaction, words.first == "CREATE", let at = words.firstIndex(of: "CONCURRENTLY"),
              words[..<at].contains("INDEX") else { return nil }
        var rest = Array(words[(at + 1)...])
        if rest.starts(with: ["IF", "NOT", "EXISTS"]) { rest.removeFirst(3) }
        guard let on = rest.firstIndex(of: "ON"), on == 1 || on == 2 else { return nil }
        func name(_ word: String) -> String? {
            if word.hasPrefix("\"") { return String(word.dropFirst().dropLast()).replacingOccurrences(of: "\"\"", with: "\"") }
            if word.hasPrefix("U&") { return nil }
            return String(decoding: word.utf8.map { $0 >= 0x41 && $0 <= 0x5A ? $0 + 0x20 : $0 }, as: UTF8.self)
        }
        if on == 1 { return name(rest[0]).map { (nil, $0) } }
        guard let schema = name(rest[0]), let index = name(rest[1]) else { return nil }
        return (schema, index)
    }
}
