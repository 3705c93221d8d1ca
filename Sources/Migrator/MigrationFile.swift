import Crypto
public import Foundation

/// One migration file: `NNNN_name.sql`, its normalized text and checksum.
///
/// The checksum is SHA-256 over the text with a UTF-8 byte-order mark removed and CRLF turned
/// into LF, so a checkout on Windows does not look like tampering.
///
/// ```swift
/// let files = try MigrationFile.load(from: URL(fileURLWithPath: "Migrations"))
/// print(files.map(\.id))   // ["0001_extensions_and_helpers", ...]
/// ```
public struct MigrationFile: Sendable, Hashable {
    /// The 4-digit version, as a number.
    public let version: Int
    /// The snake_case name after the version.
    public let name: String
    /// Where it was read from.
    public let url: URL
    /// The text with BOM stripped and CRLF normalized to LF.
    public let sql: String
    /// Lower-case hex SHA-256 of `sql` (UTF-8).
    public let checksum: String
    /// The file says `-- bbmigrate:no-transaction` in its leading comment lines (before its
    /// first statement): its statements run one by one, outside a transaction.
    public let runsOutsideTransaction: Bool

    /// The name of the checksum algorithm stored in the history table.
    public static let checksumAlgorithm = "sha256-lf"

    /// The marker that makes a file run outside a transaction.
    public static let noTransactionMarker = "-- bbmigrate:no-transaction"

    /// `0003_children_and_caregivers`.
    public var id: String { "\(Self.format(version))_\(name)" }
    public var fileName: String { id + ".sql" }

    /// Reads `contents` strictly: it must be UTF-8 (a leading byte-order mark is dropped) and
    /// hold no NUL byte; anything else throws a configuration error naming the line and byte.
    public init(version: Int, name: String, url: URL, contents: Data) throws {
        self.version = version
        self.name = name
        self.url = url
        let text = try Self.decode(contents, fileName: "\(Self.format(version))_\(name).sql")
        sql = text
        checksum = Self.checksum(of: text)
        runsOutsideTransaction = Self.leadingCommentLines(of: text).contains {
            $0.trimmingCharacters(in: .whitespaces).lowercased() == Self.noTransactionMarker
        }
    }

    /// The statements, cut as psql cuts them (see `SQLScript`); a file that cannot be cut is a
    /// configuration error naming the file and line.
    public func statements() throws -> [SQLScript.Statement] {
        do {
            return try SQLScript.statements(in: sql)
        } catch {
            throw MigratorError.configuration(
                "\(fileName):\(error.line):\(error.column): \(error.message)",
                fix: "fix \(fileName); nothing was applied")
        }
    }

    /// The lines before the first one that holds anything but whitespace or a `--` comment.
    static func leadingCommentLines(of text: String) -> [Substring] {
        var lines: [Substring] = []
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            guard trimmed.isEmpty || trimmed.hasPrefix("--") else { break }
            lines.append(line)
        }
        return lines
    }

    /// `7` → `0007`.
    public static func format(_ version: Int) -> String {
        let text = String(version)
        return text.count >= 4 ? text : String(repeating: "0", count: 4 - text.count) + text
    }

    /// The text with a BOM dropped and CRLF turned into LF; refuses bytes that are not UTF-8
    /// (a file saved as Latin-1 would otherwise put U+FFFD into the schema) and NUL bytes
    /// (which PostgreSQL cannot take in a statement).
    static func decode(_ data: Data, fileName: String) throws -> String {
        var bytes = [UInt8](data)
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { bytes.removeFirst(3) }
        if let bad = UTF8Validation.firstProblem(in: bytes) {
            let line = bytes[..<bad.offset].reduce(1) { $1 == 0x0A ? $0 + 1 : $0 }
            let hex = "0x" + String(bytes[bad.offset], radix: 16, uppercase: true)
            let what = bytes[bad.offset] == 0 ? "a NUL byte" : "byte \(hex), which is not UTF-8"
            throw MigratorError.configuration(
                "\(fileName):\(line): byte \(bad.offset + 1) of the file is \(what)",
                fix: bytes[bad.offset] == 0
                    ? "remove the NUL byte; PostgreSQL cannot take one in SQL text"
                    : "save \(fileName) as UTF-8 (it looks like Latin-1 or Windows-1252: iconv -f latin1 -t utf-8)")
        }
        return String(decoding: bytes, as: UTF8.self).replacingOccurrences(of: "\r\n", with: "\n")
    }

    static func checksum(of text: String) -> String {
        SHA256.hash(data: Data(text.utf8)).map { byte in
            let hex = String(byte, radix: 16)
            return byte < 16 ? "0" + hex : hex
        }.joined()
    }

    /// Reads every `NNNN_name.sql` in `directory`, sorted by version.
    ///
    /// A `.sql` file with another name, or two files with one version, is a configuration error:
    /// a typo must not silently skip a migration.
    public static func load(from directory: URL) throws -> [MigrationFile] {
        let fileManager = FileManager.default
        var isDirectory: ObjCBool = false
        guard fileManager.fileExists(atPath: directory.path, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw MigratorError.configuration("the migrations folder \(directory.path) does not exist", fix: "run from the project root or pass --dir")
        }
        let names = try fileManager.contentsOfDirectory(atPath: directory.path).filter { $0.hasSuffix(".sql") }.sorted()
        var files: [MigrationFile] = []
        for fileName in names {
            guard let match = fileName.wholeMatch(of: /(\d{4})_([a-z0-9]+(?:_[a-z0-9]+)*)\.sql/), let version = Int(match.1) else {
                throw MigratorError.configuration(
                    "\(fileName) is not named NNNN_snake_case_name.sql",
                    fix: "rename it, for example 0010_add_growth_table.sql (bbmigrate new NAME writes one)")
            }
            let url = directory.appendingPathComponent(fileName)
            let file = try MigrationFile(version: version, name: String(match.2), url: url, contents: try Data(contentsOf: url))
            if let clash = files.first(where: { $0.version == version }) {
                throw MigratorError.configuration("\(clash.fileName) and \(fileName) have the same version \(match.1)", fix: "give one of them the next free number")
            }
            files.append(file)
        }
        return files.sorted { $0.version < $1.version }
    }
}
