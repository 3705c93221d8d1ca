import Crypto
import Foundation

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
    /// `-- bbmigrate:no-transaction` on the first line.
    public let runsOutsideTransaction: Bool

    /// The name of the checksum algorithm stored in the history table.
    public static let checksumAlgorithm = "sha256-lf"

    /// `0003_children_and_caregivers`.
    public var id: String { "\(Self.format(version))_\(name)" }
    public var fileName: String { id + ".sql" }

    public init(version: Int, name: String, url: URL, contents: Data) {
        self.version = version
        self.name = name
        self.url = url
        let text = Self.normalize(contents)
        sql = text
        checksum = Self.checksum(of: text)
        let firstLine = text.prefix { $0 != "\n" }.trimmingCharacters(in: .whitespaces)
        runsOutsideTransaction = firstLine.lowercased() == "-- bbmigrate:no-transaction"
    }

    /// `7` → `0007`.
    public static func format(_ version: Int) -> String {
        let text = String(version)
        return text.count >= 4 ? text : String(repeating: "0", count: 4 - text.count) + text
    }

    static func normalize(_ data: Data) -> String {
        var bytes = [UInt8](data)
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { bytes.removeFirst(3) }
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
            let file = MigrationFile(version: version, name: String(match.2), url: url, contents: try Data(contentsOf: url))
            if let clash = files.first(where: { $0.version == version }) {
                throw MigratorError.configuration("\(clash.fileName) and \(fileName) have the same version \(match.1)", fix: "give one of them the next free number")
            }
            files.append(file)
        }
        return files.sorted { $0.version < $1.version }
    }

    /// 1-based line and column of a 1-based character `position` (PostgreSQL counts Unicode
    /// code points) in `sql`.
    public func lineAndColumn(ofPosition position: Int, inText text: String? = nil) -> (line: Int, column: Int) {
        var line = 1
        var column = 1
        var index = 1
        for scalar in (text ?? sql).unicodeScalars {
            if index == position { break }
            if scalar == "\n" {
                line += 1
                column = 1
            } else {
                column += 1
            }
            index += 1
        }
        return (line, column)
    }
}
