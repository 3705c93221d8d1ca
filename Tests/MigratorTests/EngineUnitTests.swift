import Foundation
import Migrator
import Testing

@Suite struct EngineUnitTests {
    @Test func checksumIgnoresBOMAndCRLF() throws {
        let url = URL(fileURLWithPath: "/tmp/x.sql")
        let plain = try MigrationFile(version: 1, name: "x", url: url, contents: Data("CREATE TABLE a ();\nSELECT 1;\n".utf8))
        let windows = try MigrationFile(version: 1, name: "x", url: url, contents: Data(([0xEF, 0xBB, 0xBF] as [UInt8]) + Array("CREATE TABLE a ();\r\nSELECT 1;\r\n".utf8)))
        let edited = try MigrationFile(version: 1, name: "x", url: url, contents: Data("CREATE TABLE a ();\nSELECT 2;\n".utf8))
        #expect(plain.checksum == windows.checksum)
        #expect(plain.checksum != edited.checksum)
        #expect(plain.checksum.count == 64)
    }

    @Test func filesMustBeNamedAndNumberedUniquely() throws {
        let folder = try MigrationFolder()
        try folder.write("0001_ok.sql", "SELECT 1;")
        try folder.write("0001_clash.sql", "SELECT 1;")
        #expect(throws: MigratorError.self) { try MigrationFile.load(from: folder.url) }
        let other = try MigrationFolder()
        try other.write("1_bad-name.sql", "SELECT 1;")
        do {
            _ = try MigrationFile.load(from: other.url)
            Issue.record("a badly named file was accepted")
        } catch let error as MigratorError {
            #expect(error.exitCode == .usage)
        }
    }

    @Test func filesMustBeUTF8AndTheErrorNamesLineAndByte() throws {
        let url = URL(fileURLWithPath: "/tmp/x.sql")
        let latin1 = Data("CREATE TABLE a ();\nCOMMENT ON TABLE a IS 'caf".utf8) + Data([0xE9]) + Data("';\n".utf8)
        do {
            _ = try MigrationFile(version: 3, name: "x", url: url, contents: latin1)
            Issue.record("a Latin-1 file was accepted")
        } catch let error as MigratorError {
            #expect(error.exitCode == .usage)
            #expect(error.message == "0003_x.sql:2: byte 46 of the file is byte 0xE9, which is not UTF-8", "\(error.message)")
            #expect(error.fix?.contains("iconv") == true)
        }
        #expect(throws: MigratorError.self) { try MigrationFile(version: 1, name: "x", url: url, contents: Data([0x53, 0x00, 0x3B])) }
        // Valid UTF-8 (any script, emoji) and a byte-order mark are fine.
        let file = try MigrationFile(version: 1, name: "x", url: url, contents: Data([0xEF, 0xBB, 0xBF]) + Data("SELECT 'café 🍼 ñ';".utf8))
        #expect(file.sql == "SELECT 'café 🍼 ñ';")
    }

    @Test func theNoTransactionMarkerIsSeenAmongTheLeadingComments() throws {
        let url = URL(fileURLWithPath: "/tmp/x.sql")
        let marked = try MigrationFile(version: 1, name: "x", url: url, contents: Data("-- 0001_x.sql: an index\n--\n-- bbmigrate:no-transaction\n\nCREATE INDEX CONCURRENTLY i ON t (x);".utf8))
        #expect(marked.runsOutsideTransaction)
        let prose = try MigrationFile(version: 1, name: "x", url: url, contents: Data("-- put such statements in a file whose first line is: -- bbmigrate:no-transaction\nSELECT 1;".utf8))
        #expect(!prose.runsOutsideTransaction)
        let late = try MigrationFile(version: 1, name: "x", url: url, contents: Data("SELECT 1;\n-- bbmigrate:no-transaction\n".utf8))
        #expect(!late.runsOutsideTransaction)
    }
}
