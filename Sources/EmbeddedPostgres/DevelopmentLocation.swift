public import Foundation
#if canImport(Glibc)
import Glibc
#endif

extension EmbeddedPostgres {
    /// Where a development cluster lives, as decided by ``placement(for:)``.
    ///
    /// ```swift
    /// if case .relocated(let folder, let reason) = EmbeddedPostgres.placement(for: ".bbdata") {
    ///     print("the data lives in \(folder.path): \(reason)")
    /// }
    /// ```
    public enum Placement: Sendable, Equatable {
        /// The cluster lives at the path asked for.
        case inPlace
        /// The cluster lives in `folder` and the path asked for becomes a link to it; `reason`
        /// says why, in words ("the 'postgres' account cannot enter /root").
        case relocated(URL, reason: String)
    }

    /// Where relocated development clusters live: `/var/tmp/babybasics` for root (a folder
    /// every account may enter, so the `postgres` account reaches its own cluster folder in
    /// it), `/var/tmp/babybasics-<uid>` for anyone else (0700).
    ///
    /// ```swift
    /// print(EmbeddedPostgres.relocationRoot.path)   // /var/tmp/babybasics
    /// ```
    public static var relocationRoot: URL {
        let uid = geteuid()
        return URL(fileURLWithPath: uid == 0 ? "/var/tmp/babybasics" : "/var/tmp/babybasics-\(uid)")
    }

    /// Whether the development cluster asked for at `path` can live there, or must live in
    /// ``relocationRoot`` with `path` a link to it. Changes nothing.
    ///
    /// It moves when, run as root, the `postgres` account (which runs the server: PostgreSQL
    /// refuses to run as root) cannot enter the folder holding `path` (a clone under `/root`,
    /// mode 0700), or when `path` is too long to hold the server's Unix socket (107 bytes).
    ///
    /// ```swift
    /// EmbeddedPostgres.placement(for: "/root/app/.bbdata")
    /// // .relocated(/var/tmp/babybasics/bbdata-1a2b3c4d, reason: "the 'postgres' account cannot enter /root/app")
    /// ```
    public static func placement(for path: String) -> Placement {
        let link = URL(fileURLWithPath: path).standardizedFileURL.absoluteURL
        let target = relocationRoot.appendingPathComponent(relocatedName(for: link))
        if ProcessRunner.isRoot {
            let parent = nearestExistingFolder(link.deletingLastPathComponent())
            if !serverAccountCanEnter(parent) {
                return .relocated(target, reason: "the '\(ProcessRunner.serverAccount)' account, which runs PostgreSQL for root, cannot enter \(parent.path)")
            }
        }
        if !socketFolderFits(link.path) {
            return .relocated(target, reason: "its path is longer than a Unix socket's path may be (\(maximumSocketFolderLength) bytes)")
        }
        return .inPlace
    }

    /// The development cluster kept at `path` (`.bbdata`), in a place its server can use.
    ///
    /// Usually the cluster is simply at `path`. When ``placement(for:)`` says it cannot be (run
    /// as root in a clone under `/root`, or a path too long for a socket), the data lives in
    /// ``relocationRoot``/`<name>-<hash of the path>` and `path` becomes a symbolic link to it,
    /// so the data stays findable from the clone (`ls -l .bbdata`); ``linkedFrom`` says so, and
    /// `bbmigrate embedded status` prints both. A link made earlier is followed.
    ///
    /// ```swift
    /// let cluster = try EmbeddedPostgres.development(at: ".bbdata")
    /// try cluster.start()
    /// print(cluster.linkedFrom.map { "\($0.path) → \(cluster.directory.path)" } ?? cluster.directory.path)
    /// ```
    public static func development(at path: String, options: Options = Options()) throws -> EmbeddedPostgres {
        let link = URL(fileURLWithPath: path).standardizedFileURL.absoluteURL
        let fileManager = FileManager.default
        if let destination = try? fileManager.destinationOfSymbolicLink(atPath: link.path) {
            let target = destination.hasPrefix("/")
                ? URL(fileURLWithPath: destination)
                : URL(fileURLWithPath: link.deletingLastPathComponent().path + "/" + destination)
            if target.standardizedFileURL.deletingLastPathComponent().path == relocationRoot.path {
                try prepareRelocationRoot()
            }
            return EmbeddedPostgres(directory: target, options: options, linkedFrom: link)
        }
        guard case .relocated(let target, let reason) = placement(for: link.path) else {
            return EmbeddedPostgres(directory: link, options: options)
        }
        var isDirectory: ObjCBool = false
        if fileManager.fileExists(atPath: link.path, isDirectory: &isDirectory) {
            let contents = isDirectory.boolValue ? (try? fileManager.contentsOfDirectory(atPath: link.path)) ?? [] : ["a file"]
            guard contents.isEmpty else {
                throw EmbeddedPostgresError(
                    "\(link.path) cannot hold the development database (\(reason)), and it is not empty, so it cannot become a link to \(target.path)",
                    fix: "move it away (mv \(link.path) \(link.path).old) and run the command again, or clone the project under /tmp or /home")
            }
            try fileManager.removeItem(at: link)
        }
        try prepareRelocationRoot()
        do {
            try fileManager.createDirectory(at: link.deletingLastPathComponent(), withIntermediateDirectories: true)
            try fileManager.createSymbolicLink(at: link, withDestinationURL: target)
        } catch {
            throw EmbeddedPostgresError(
                "could not link \(link.path) to \(target.path), where the development database must live (\(reason)): \(error)",
                fix: "check that you may write to \(link.deletingLastPathComponent().path), or pass --data-dir (or set BB_DATA_DIR) to a folder under /tmp")
        }
        return EmbeddedPostgres(directory: target, options: options, linkedFrom: link)
    }

    /// Stops the cluster and deletes its data, and the link to it when there is one.
    ///
    /// ```swift
    /// try EmbeddedPostgres.development(at: ".bbdata").remove()
    /// ```
    public func remove() throws {
        try stop(immediate: true)
        let fileManager = FileManager.default
        if fileManager.fileExists(atPath: directory.path) { try fileManager.removeItem(at: directory) }
        if let linkedFrom, (try? fileManager.destinationOfSymbolicLink(atPath: linkedFrom.path)) != nil {
            try fileManager.removeItem(at: linkedFrom)
        }
    }

    /// `bbdata-1a2b3c4d`: the folder's name without its dot, and a hash of its full path (two
    /// clones never share a cluster).
    static func relocatedName(for link: URL) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325 // FNV-1a
        for byte in link.path.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01b3
        }
        let name = link.lastPathComponent.trimmingCharacters(in: CharacterSet(charactersIn: ".")).prefix(24)
        return "\(name.isEmpty ? "cluster" : String(name))-\(String(hash, radix: 16).prefix(8))"
    }

    /// The longest cluster folder whose socket path (`<folder>/.s.PGSQL.NNNNN`) fits in a
    /// `sockaddr_un`: 107 bytes and a terminating zero.
    static let maximumSocketFolderLength = 107 - ".s.PGSQL.65535".utf8.count - 1

    static func socketFolderFits(_ folder: String) -> Bool {
        folder.utf8.count <= maximumSocketFolderLength
    }

    /// Whether the server account may enter `folder` (every folder above it included).
    static func serverAccountCanEnter(_ folder: URL) -> Bool {
        guard ProcessRunner.isRoot else { return true }
        let probe = try? ProcessRunner.run("/usr/bin/test", ["-x", folder.path])
        return probe?.status == 0
    }

    /// `folder`, or the nearest folder above it that exists (folders made later inherit what
    /// it lets others do).
    static func nearestExistingFolder(_ folder: URL) -> URL {
        var current = folder.standardizedFileURL
        while current.path != "/" && !FileManager.default.fileExists(atPath: current.path) {
            current = current.deletingLastPathComponent().standardizedFileURL
        }
        return current
    }

    /// Creates ``relocationRoot`` when missing, and refuses one this account does not own
    /// (in a world-writable `/var/tmp`, someone else could have made it, or made it a link, to
    /// have root hand them files).
    static func prepareRelocationRoot() throws {
        let root = relocationRoot
        let uid = geteuid()
        let mode: mode_t = uid == 0 ? 0o755 : 0o700 // root: postgres enters; each cluster folder is 0700
        if mkdir(root.path, mode) != 0 && errno != EEXIST {
            throw EmbeddedPostgresError(
                "could not create \(root.path) for the development database: \(String(cString: strerror(errno)))",
                fix: "check that /var/tmp exists and is writable (mode 1777), or pass --data-dir (or set BB_DATA_DIR) to a folder under /tmp")
        }
        var info = stat()
        guard lstat(root.path, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR, info.st_uid == uid, info.st_mode & 0o022 == 0 else {
            throw EmbeddedPostgresError(
                "\(root.path) is not a private folder of this account (a link, someone else's, or writable by others), so it may not hold the development database",
                fix: "look at it (ls -ld \(root.path)), and if you do not know it, delete it (rm -rf \(root.path)) and run the command again")
        }
        chmod(root.path, mode)
    }
}
