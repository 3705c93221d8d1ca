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
            try await cluster.start()
            let connection = try await PostgresConnection.connect(try cluster.connectionString())
            #expect(try await connection.fetchValue(Int.self, "SELECT \(1)") == 1)
            await connection.close()
            // The next command finds the same cluster through the link.
            let again = try EmbeddedPostgres.development(at: path)
            #expect(again.directory.path == cluster.directory.path && again.linkedFrom?.path == path)
            if case .running = try again.status() {} else { Issue.record("the cluster is not found running through the link") }
            try await again.remove()
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

    /// The decision alone, both ways: an open folder keeps its cluster; a folder inside a 0700
    /// folder of root's moves (only when we are root: anyone else runs the server themselves).
    @Test func placementKeepsAnOpenFolderAndMovesAClosedOneForRoot() throws {
        let open = URL(fileURLWithPath: "/tmp/bb-open-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: open, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: open) }
        #expect(EmbeddedPostgres.placement(for: open.appendingPathComponent(".bbdata").path) == .inPlace)
        // A folder not made yet is judged by the nearest one that exists.
        #expect(EmbeddedPostgres.placement(for: open.appendingPathComponent("not/yet/.bbdata").path) == .inPlace)

        let (home, clone) = try privateClone()
        defer { try? FileManager.default.removeItem(at: home) }
        let placement = EmbeddedPostgres.placement(for: clone.appendingPathComponent(".bbdata").path)
        if geteuid() == 0 {
            guard case .relocated(let folder, let reason) = placement else {
                Issue.record("a folder postgres cannot enter was kept: \(placement)")
                return
            }
            #expect(folder.deletingLastPathComponent().path == "/var/tmp/babybasics")
            #expect(folder.lastPathComponent.hasPrefix("bbdata-"))
            #expect(reason.contains("cannot enter \(home.path)"), "\(reason)")
            // Nothing was made: placement only decides.
            #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: clone.appendingPathComponent(".bbdata").path)) == nil)
        } else {
            #expect(placement == .inPlace)
        }
    }

    /// A folder too deep for the server's Unix socket (107 bytes) moves too, for any account.
    @Test func aPathTooLongForTheSocketMovesToAShortOne() throws {
        let deep = URL(fileURLWithPath: "/tmp/bb-deep-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: deep) }
        let clone = deep.appendingPathComponent(String(repeating: "a-rather-long-folder-name/", count: 4))
        try FileManager.default.createDirectory(at: clone, withIntermediateDirectories: true)
        let path = clone.appendingPathComponent(".bbdata").path
        #expect(path.utf8.count > 92)
        guard case .relocated(_, let reason) = EmbeddedPostgres.placement(for: path) else {
            Issue.record("a path of \(path.utf8.count) bytes was kept")
            return
        }
        #expect(reason.contains("Unix socket"))
        let cluster = try EmbeddedPostgres.development(at: path, options: .init(durable: false))
        defer { try? cluster.remove() }
        #expect(cluster.linkedFrom?.path == path)
        #expect(cluster.directory.deletingLastPathComponent().path == EmbeddedPostgres.relocationRoot.path)
        #expect(cluster.directory.path.utf8.count <= 92)
        try cluster.remove()
        #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: path)) == nil)
    }

    /// As root, server programs the `postgres` account cannot reach (a venv under /root) are
    /// refused before initdb fails on them, with the fix in the message.
    @Test func serverProgramsThePostgresAccountCannotRunAreNamed() throws {
        let (home, clone) = try privateClone()
        defer { try? FileManager.default.removeItem(at: home) }
        let bin = clone.appendingPathComponent("bin")
        try FileManager.default.createDirectory(at: bin, withIntermediateDirectories: true)
        let real = try ServerBinaries.locate()
        for program in ["initdb", "pg_ctl", "postgres"] {
            try FileManager.default.createSymbolicLink(atPath: bin.appendingPathComponent(program).path, withDestinationPath: real.directory + "/" + program)
        }
        let hidden = ServerBinaries(directory: bin.path)
        if geteuid() == 0 {
            #expect {
                try hidden.checkServerAccountCanRun()
            } throws: { error in
                "\(error)".contains("cannot run the server programs in \(bin.path)") && "\(error)".contains("pg18-bindir.sh")
            }
            try real.checkServerAccountCanRun()
        } else {
            try hidden.checkServerAccountCanRun()
        }
    }

    /// `bbmigrate embedded` as root in a clone postgres cannot enter: start makes the link,
    /// status and stop say where the data really lives, remove deletes both.
    @Test func bbmigrateEmbeddedSaysWhereTheDataLives() async throws {
        guard geteuid() == 0 else { return } // nothing moves for other accounts
        let bbmigrate = try #require(Self.bbmigratePath, "bbmigrate is not built (make build-tests builds it)")
        let (home, clone) = try privateClone()
        defer { try? FileManager.default.removeItem(at: home) }
        func run(_ arguments: String...) async throws -> ChildProcess.Result {
            var environment = ProcessInfo.processInfo.environment
            environment["BB_DATA_DIR"] = nil
            return try await ChildProcess.spawn([bbmigrate, "embedded"] + arguments, environment: environment, directory: clone.path).result()
        }
        let link = clone.appendingPathComponent(".bbdata").path
        let stopped = try await run("status")
        #expect(stopped.status == 3 && stopped.stdout.contains("not created"), "\(stopped)")
        #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: link)) == nil, "status made the link")

        let start = try await run("start")
        #expect(start.status == 0, "\(start.stderr)")
        let folder = try FileManager.default.destinationOfSymbolicLink(atPath: link)
        defer { _ = try? EmbeddedPostgres.development(at: link).remove() }
        #expect(folder.hasPrefix("/var/tmp/babybasics/bbdata-"))
        let status = try await run("status")
        #expect(status.status == 0)
        #expect(status.stdout.contains("\(folder) (linked from \(link))") && status.stdout.contains("running"), "\(status.stdout)")
        let stop = try await run("stop")
        #expect(stop.status == 0)
        #expect(stop.stderr.contains("its data stays in \(folder) (\(link) links to it)"), "\(stop.stderr)")
        #expect(stop.stderr.contains("bbmigrate embedded remove"))
        let remove = try await run("remove")
        #expect(remove.status == 0, "\(remove.stderr)")
        #expect(!FileManager.default.fileExists(atPath: folder))
        #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: link)) == nil)
    }

    /// The bbmigrate built with the tests (`swift build --build-tests` builds every product).
    static let bbmigratePath: String? = {
        let beside = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("bbmigrate").path
        let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let built = repository.appendingPathComponent(".build/debug/bbmigrate").path
        return [beside, built].first { FileManager.default.isExecutableFile(atPath: $0) }
    }()

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
