import EmbeddedPostgres
import Foundation
import Postgres
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A clone anywhere: as root in a folder the `postgres` account cannot enter (a clone under
/// /root), the development cluster moves to /var/tmp/babybasics and the folder links to it.
@Suite struct FirstRunTests {
    /// A clone inside a 0700 folder, like /root: `postgres` cannot enter it when we are root.
    private func privateClone() throws -> (home: URL, clone: URL) {
        let home = URL(fileURLWithPath: "/tmp/bb-home-\(UUID().uuidString.prefix(8))")
        let clone = home.appendingPathComponent("app")
        try FileManager.default.createDirectory(at: clone, withIntermediateDirectories: true)
        chmod(home.path, 0o700)
        return (home, clone)
    }

    @Test func aFolderTheServerCannotEnterGetsALinkToOneItCan() async throws {
        let (home, clone) = try privateClone()
        defer { try? FileManager.default.removeItem(at: home) }
        let path = clone.appendingPathComponent(".bbdata").path
        let cluster = try EmbeddedPostgres.development(at: path, options: .init(durable: false))
        defer { try? cluster.remove() }
        if geteuid() == 0 {
            let link = try #require(cluster.linkedFrom)
            #expect(link.path == path)
            #expect(cluster.directory.path.hasPrefix("/var/tmp/babybasics/bbdata-"))
            #expect(try FileManager.default.destinationOfSymbolicLink(atPath: path) == cluster.directory.path)
            try cluster.start()
            let connection = try await PostgresConnection.connect(try cluster.connectionString())
            #expect(try await connection.fetchValue(Int.self, "SELECT \(1)") == 1)
            await connection.close()
            // The next command finds the same cluster through the link.
            let again = try EmbeddedPostgres.development(at: path)
            #expect(again.directory.path == cluster.directory.path && again.linkedFrom?.path == path)
            if case .running = try again.status() {} else { Issue.record("the cluster is not found running through the link") }
            try again.remove()
            #expect(!FileManager.default.fileExists(atPath: cluster.directory.path))
            #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: path)) == nil)
        } else {
            // Not root: the server runs as this account, which owns the folder.
            #expect(cluster.linkedFrom == nil && cluster.directory.path == path)
        }
    }

    @Test func aFolderTheServerCanEnterStaysWhereItIs() throws {
        let folder = URL(fileURLWithPath: "/tmp/bb-open-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let path = folder.appendingPathComponent(".bbdata").path
        let cluster = try EmbeddedPostgres.development(at: path)
        #expect(cluster.linkedFrom == nil)
        #expect(cluster.directory.path == path)
    }

    @Test func aNonEmptyFolderTheServerCannotEnterIsRefusedWithAFix() throws {
        let (home, clone) = try privateClone()
        defer { try? FileManager.default.removeItem(at: home) }
        let data = clone.appendingPathComponent(".bbdata")
        try FileManager.default.createDirectory(at: data, withIntermediateDirectories: true)
        try Data("x".utf8).write(to: data.appendingPathComponent("keep.txt"))
        if geteuid() == 0 {
            #expect {
                _ = try EmbeddedPostgres.development(at: data.path)
            } throws: { error in
                "\(error)".contains("not empty") && "\(error)".contains("mv ")
            }
            #expect(FileManager.default.fileExists(atPath: data.appendingPathComponent("keep.txt").path))
        } else {
            #expect(try EmbeddedPostgres.development(at: data.path).linkedFrom == nil)
        }
    }

    @Test func aBinFolderNamedInBBPGBINDIRMustHoldTheServer() throws {
        #expect {
            _ = try ServerBinaries.locate(environment: ["BB_PG_BINDIR": "/nonexistent/bin", "PATH": "/usr/bin"])
        } throws: { error in
            "\(error)".contains("BB_PG_BINDIR is /nonexistent/bin")
        }
        let found = try ServerBinaries.locate()
        #expect(try ServerBinaries.locate(environment: ["BB_PG_BINDIR": found.directory]).directory == found.directory)
    }
}
