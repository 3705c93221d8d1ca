import EmbeddedPostgres
import Foundation

/// Two independent readers for the CSV files a test gets back (an export, say): a strict
/// RFC 4180 reader, and Python's `csv` module. A file both read the same way splits where its
/// writer meant it to.
///
/// ```swift
/// let rows = try StrictCSV.parse(text)          // [["date", "time", …], …]
/// #expect(try await PythonCSV.parse(text) == rows)
/// ```
public enum StrictCSV {
    /// What the reader refused, and where (a position in Unicode scalars).
    public struct Malformed: Error, CustomStringConvertible {
        public let description: String
    }

    /// The records of `text`, read by RFC 4180 and nothing looser: records end in CR LF; a
    /// field is quoted, or holds no CR, LF or quote; a quote inside quotes is doubled.
    /// Anything else throws `Malformed` rather than being guessed at. Scalar by scalar, so CR
    /// LF is two scalars here (in Swift `"\r\n"` is one `Character`).
    public static func parse(_ text: String) throws -> [[String]] {
        let scalars = Array(text.unicodeScalars)
        var records: [[String]] = []
        var record: [String] = []
        var field = String.UnicodeScalarView()
        var inQuotes = false
        var wasQuoted = false
        var index = 0
        func endField() {
            record.append(String(field))
            field = String.UnicodeScalarView()
            wasQuoted = false
        }
        while index < scalars.count {
            let scalar = scalars[index]
            index += 1
            if inQuotes {
                if scalar == "\"" {
                    if index < scalars.count, scalars[index] == "\"" {
                        field.append("\"")
                        index += 1
                    } else {
                        inQuotes = false
                    }
                } else {
                    field.append(scalar)
                }
                continue
            }
            switch scalar {
            case "\"":
                guard field.isEmpty, !wasQuoted else { throw Malformed(description: "a quote inside an unquoted field, at scalar \(index)") }
                inQuotes = true
                wasQuoted = true
            case ",":
                endField()
            case "\r":
                guard index < scalars.count, scalars[index] == "\n" else { throw Malformed(description: "a CR outside quotes without its LF, at scalar \(index)") }
                index += 1
                endField()
                records.append(record)
                record = []
            case "\n":
                throw Malformed(description: "an LF outside quotes without a CR, at scalar \(index)")
            default:
                guard !wasQuoted else { throw Malformed(description: "text after a closing quote, at scalar \(index)") }
                field.append(scalar)
            }
        }
        guard !inQuotes else { throw Malformed(description: "a quoted field that never closes") }
        if !field.isEmpty || wasQuoted || !record.isEmpty {
            endField()
            records.append(record)
        }
        return records
    }
}

/// Python's `csv` module as a second, independent CSV reader (`python3` from `PATH`).
public enum PythonCSV {
    /// What went wrong running Python.
    public struct Failed: Error, CustomStringConvertible {
        public let description: String
    }

    /// The records of `text` as `csv.reader` reads them.
    public static func parse(_ text: String) async throws -> [[String]] {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("bb-csv-\(UUID().uuidString).csv")
        try Data(text.utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let python = ProcessInfo.processInfo.environment["PATH", default: "/usr/bin"].split(separator: ":")
            .map { "\($0)/python3" }.first { FileManager.default.isExecutableFile(atPath: $0) } ?? "/usr/bin/python3"
        let script = "import csv, json, sys; print(json.dumps(list(csv.reader(open(sys.argv[1], newline='', encoding='utf-8')))))"
        let result = try await ChildProcess.spawn([python, "-c", script, file.path]).result()
        guard result.status == 0 else { throw Failed(description: "python3's csv module could not read the file: \(result.stderr)") }
        return try JSONDecoder().decode([[String]].self, from: Data(result.stdout.utf8))
    }
}
