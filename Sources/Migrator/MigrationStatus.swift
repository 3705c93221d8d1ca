public import Foundation

/// Where one version stands.
///
/// ```swift
/// let pending = try await migrator.status().filter { $0.state == .pending }
/// ```
public enum MigrationState: String, Sendable, Codable {
    /// Applied, and the file still matches.
    case applied
    /// Not applied yet.
    case pending
    /// Applied, but the file has changed since.
    case changed
    /// Applied, but the file is gone.
    case missing
    /// Not applied, and older than the newest applied version.
    case outOfOrder = "out_of_order"
}

/// One line of `bbmigrate status`.
///
/// ```swift
/// for entry in try await migrator.status() where entry.state != .applied { print(entry.summary) }
/// ```
public struct MigrationEntry: Sendable, Codable, Equatable {
    public var version: Int
    public var name: String
    public var state: MigrationState
    public var appliedAt: Date?
    public var appliedBy: String?
    public var durationMs: Int?
    public var fileChecksum: String?
    public var appliedChecksum: String?
    public var baselined: Bool?

    public var id: String { "\(MigrationFile.format(version))_\(name)" }

    /// A line for a terminal.
    public var summary: String {
        switch state {
        case .applied:
            let when = appliedAt.map { $0.formatted(.iso8601) } ?? "?"
            let how = baselined == true ? "baselined" : "\(durationMs ?? 0) ms"
            return "applied       \(id)  \(when) by \(appliedBy ?? "?") (\(how))"
        case .pending: return "pending       \(id)"
        case .changed: return "CHANGED       \(id)  the file differs from what was applied (checksum \(appliedChecksum?.prefix(12) ?? "?")… → \(fileChecksum?.prefix(12) ?? "?")…)"
        case .missing: return "MISSING FILE  \(id)  applied \(appliedAt.map { $0.formatted(.iso8601) } ?? "?") but the file is gone"
        case .outOfOrder: return "OUT OF ORDER  \(id)  pending, but older than the newest applied version"
        }
    }

    /// Compares the files with the history.
    static func reconcile(files: [MigrationFile], history: [MigrationHistory.Row]) -> [MigrationEntry] {
        let filesByVersion = Dictionary(uniqueKeysWithValues: files.map { ($0.version, $0) })
        let rowsByVersion = Dictionary(uniqueKeysWithValues: history.map { ($0.version, $0) })
        let newestApplied = history.map(\.version).max() ?? Int.min
        return Set(filesByVersion.keys).union(rowsByVersion.keys).sorted().map { version in
            let file = filesByVersion[version]
            let row = rowsByVersion[version]
            var entry = MigrationEntry(
                version: version, name: file?.name ?? row?.name ?? "?", state: .pending,
                appliedAt: row?.appliedAt, appliedBy: row?.appliedBy, durationMs: row?.durationMs,
                fileChecksum: file?.checksum, appliedChecksum: row?.checksum, baselined: row?.baselined)
            switch (file, row) {
            case (let file?, let row?): entry.state = file.checksum == row.checksum ? .applied : .changed
            case (nil, _?): entry.state = .missing
            case (_?, nil): entry.state = version < newestApplied ? .outOfOrder : .pending
            case (nil, nil): entry.state = .missing
            }
            return entry
        }
    }
}

/// What `up` did to one file.
///
/// ```swift
/// try await migrator.up { print("applied \($0.id) in \($0.durationMs) ms") }
/// ```
public struct AppliedMigration: Sendable, Codable, Equatable {
    public var version: Int
    public var name: String
    public var durationMs: Int
    public var id: String { "\(MigrationFile.format(version))_\(name)" }
}
