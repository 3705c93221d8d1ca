import Foundation
#if canImport(Glibc)
import Glibc
#endif

extension EmbeddedPostgres {
    /// Where relocated development clusters live: a folder the `postgres` account can enter.
    public static let relocationRoot = URL(fileURLWithPath: "/var/tmp/babybasics")

    /// The development cluster kept at `path` (`.bbdata`), in a place its server can use.
    ///
    /// Run as root, PostgreSQL runs as the `postgres` account, which cannot enter a folder
    /// such as `/root` (mode 0700): a clone there could not hold its cluster. Then the data
    /// lives in `/var/tmp/babybasics/<name>-<hash of the path>/` and `path` becomes a link to
    /// it, so the data stays findable from the clone (`ls -l .bbdata`);
    /// ``linkedFrom`` says so, and `bbmigrate embedded status` prints both. Everywhere else
    /// the cluster is simply at `path`. A link made earlier is followed.
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
            return EmbeddedPostgres(directory: target, options: options, linkedFrom: link)
        }
        guard ProcessRunner.isRoot, !serverAccountCanEnter(link.deletingLastPathComponent()) else {
            return EmbeddedPostgres(directory: link, options: options)
        }
        var isDirectory: ObjCBool = false
        if fileManager.fileExists(atPath: link.path, isDirectory: &isDirectory) {
            let contents = isDirectory.boolValue ? (try? fileManager.contentsOfDirectory(atPath: link.path)) ?? [] : ["a file"]
            guard contents.isEmpty else {
                throw EmbeddedPostgresError(
                    "\(link.path) is in a folder the '\(ProcessRunner.serverAccount)' account cannot enter, and it is not empty, so it cannot become a link to a usable place",
                    fix: "move it away (mv \(link.path) \(link.path).old) and run the command again, or clone the project under /tmp or /home")
            }
            try fileManager.removeItem(at: link)
        }
        let target = relocationRoot.appendingPathComponent(relocatedName(for: link))
        do {
            try fileManager.createDirectory(at: relocationRoot, withIntermediateDirectories: true)
            chmod(relocationRoot.path, 0o755) // every account may enter; each cluster folder is 0700
            try fileManager.createSymbolicLink(at: link, withDestinationURL: target)
        } catch {
            throw EmbeddedPostgresError(
                "could not keep the development database in \(target.path) (the '\(ProcessRunner.serverAccount)' account cannot enter \(link.deletingLastPathComponent().path)): \(error)",
                fix: "run as a normal user, or clone the project under /tmp or /home")
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

    /// Whether the server account may enter `folder` (every folder above it included).
    static func serverAccountCanEnter(_ folder: URL) -> Bool {
        guard ProcessRunner.isRoot else { return true }
        let probe = try? ProcessRunner.run("/usr/bin/test", ["-x", folder.path])
        return probe?.status == 0
    }
}
