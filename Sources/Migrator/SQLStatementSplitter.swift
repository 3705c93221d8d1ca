/// Splits SQL text into statements at top-level semicolons, respecting quotes, dollar quotes
/// and comments. Used for no-transaction files, which run (and record progress) one
/// statement at a time.
///
/// ```swift
/// let statements = SQLStatementSplitter.split("CREATE INDEX CONCURRENTLY a ON t (x); SELECT ';'")
/// // ["CREATE INDEX CONCURRENTLY a ON t (x)", "SELECT ';'"]
/// ```
public enum SQLStatementSplitter {
    /// A statement and the 1-based line its text starts on (a leading comment included).
    ///
    /// ```swift
    /// for statement in SQLStatementSplitter.statements(sql) { print(statement.line) }
    /// ```
    public struct Statement: Sendable, Equatable {
        public let text: String
        public let line: Int
    }

    public static func split(_ sql: String) -> [String] { statements(sql).map(\.text) }

    public static func statements(_ sql: String) -> [Statement] {
        let characters = Array(sql.unicodeScalars)
        var result: [Statement] = []
        var current = String.UnicodeScalarView()
        var index = 0
        var line = 1
        var startLine = 1
        var hasCode = false

        func flush() {
            let text = String(current).trimmingCharacters(in: .whitespacesAndNewlines)
            if hasCode && !text.isEmpty { result.append(Statement(text: text, line: startLine)) }
            current = String.UnicodeScalarView()
            hasCode = false
            started = false
        }

        var started = false
        func append(_ scalar: Unicode.Scalar) {
            if !started && !scalar.properties.isWhitespace {
                started = true
                startLine = line
            }
            if scalar == "\n" { line += 1 }
            current.append(scalar)
        }

        while index < characters.count {
            let scalar = characters[index]
            let next: Unicode.Scalar? = index + 1 < characters.count ? characters[index + 1] : nil
            if scalar == "-" && next == "-" {
                while index < characters.count && characters[index] != "\n" { append(characters[index]); index += 1 }
                continue
            }
            if scalar == "/" && next == "*" {
                var depth = 0
                repeat {
                    if characters[index] == "/" && index + 1 < characters.count && characters[index + 1] == "*" {
                        depth += 1; append("/"); append("*"); index += 2
                    } else if characters[index] == "*" && index + 1 < characters.count && characters[index + 1] == "/" {
                        depth -= 1; append("*"); append("/"); index += 2
                    } else {
                        append(characters[index]); index += 1
                    }
                } while depth > 0 && index < characters.count
                continue
            }
            if !hasCode && !scalar.properties.isWhitespace && scalar != ";" {
                hasCode = true
            }
            if scalar == "'" || scalar == "\"" {
                let quote = scalar
                let escapes = quote == "'" && index > 0 && (characters[index - 1] == "E" || characters[index - 1] == "e")
                append(scalar)
                index += 1
                while index < characters.count {
                    let c = characters[index]
                    if escapes && c == "\\" && index + 1 < characters.count {
                        append(c); append(characters[index + 1]); index += 2; continue
                    }
                    append(c)
                    index += 1
                    if c == quote {
                        if index < characters.count && characters[index] == quote { append(quote); index += 1; continue }
                        break
                    }
                }
                continue
            }
            if scalar == "$", let tag = dollarTag(characters, at: index) {
                for c in tag { append(c) }
                index += tag.count
                while index < characters.count {
                    if characters[index] == "$", index + tag.count <= characters.count, Array(characters[index..<(index + tag.count)]) == tag {
                        for c in tag { append(c) }
                        index += tag.count
                        break
                    }
                    append(characters[index])
                    index += 1
                }
                continue
            }
            if scalar == ";" {
                flush()
                index += 1
                continue
            }
            append(scalar)
            index += 1
        }
        flush()
        return result
    }

    /// `$$` or `$tag$` starting at `index`, if any (`$1` is a parameter, not a tag).
    private static func dollarTag(_ characters: [Unicode.Scalar], at index: Int) -> [Unicode.Scalar]? {
        var end = index + 1
        while end < characters.count {
            let c = characters[end]
            if c == "$" { return Array(characters[index...end]) }
            let isTagCharacter = c.properties.isAlphabetic || c == "_" || (end > index + 1 && ("0"..."9").contains(c))
            guard isTagCharacter else { return nil }
            end += 1
        }
        return nil
    }

    /// Whether PostgreSQL refuses `statement` inside a transaction block (or it is a harmless
    /// session setting that may accompany such statements).
    public static func needsNoTransaction(_ statement: String) -> Bool {
        let code = statement.split(separator: "\n").filter { !$0.trimmingCharacters(in: .whitespaces).hasPrefix("--") }
            .joined(separator: " ").uppercased()
            .replacingOccurrences(of: "\t", with: " ")
        let words = code.split(separator: " ").map(String.init)
        let text = words.joined(separator: " ")
        let patterns = [
            "^CREATE (UNIQUE )?INDEX CONCURRENTLY ",
            "^DROP INDEX CONCURRENTLY ",
            "^REINDEX .*CONCURRENTLY",
            "^REINDEX \\(.*\\) .*CONCURRENTLY",
            "^ALTER TYPE .* ADD VALUE ",
            "^VACUUM( |$)",
            "^CREATE DATABASE ",
            "^DROP DATABASE ",
            "^ALTER SYSTEM ",
            "^SET ",
            "^RESET ",
        ]
        return patterns.contains { text.range(of: $0, options: .regularExpression) != nil }
    }
}
