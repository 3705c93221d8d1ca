import Foundation
import Migrator
import Testing

@Suite struct EngineUnitTests {
    @Test func checksumIgnoresBOMAndCRLF() {
        let url = URL(fileURLWithPath: "/tmp/x.sql")
        let plain = MigrationFile(version: 1, name: "x", url: url, contents: Data("CREATE TABLE a ();\nSELECT 1;\n".utf8))
        let windows = MigrationFile(version: 1, name: "x", url: url, contents: Data(([0xEF, 0xBB, 0xBF] as [UInt8]) + Array("CREATE TABLE a ();\r\nSELECT 1;\r\n".utf8)))
        let edited = MigrationFile(version: 1, name: "x", url: url, contents: Data("CREATE TABLE a ();\nSELECT 2;\n".utf8))
        #expect(plain.checksum == windows.checksum)
        #expect(plain.checksum != edited.checksum)
        #expect(plain.checksum.count == 64)
    }

    @Test func splitterRespectsQuotesDollarQuotesAndComments() {
        let sql = """
            -- header; with a semicolon
            CREATE FUNCTION f() RETURNS text LANGUAGE sql AS $$ SELECT 'a;b' $$;
            /* block; /* nested; */ still comment */ SELECT 'it''s; fine', "odd;name" FROM t;
            SELECT $tag$ ; $tag$, E'\\';' ;
            """
        let statements = SQLStatementSplitter.statements(sql)
        #expect(statements.count == 3)
        #expect(statements[0].text.hasPrefix("-- header; with a semicolon\nCREATE FUNCTION"))
        #expect(statements[0].line == 1)
        #expect(statements[1].text.contains("\"odd;name\""))
        #expect(statements[2].line == 4)
    }

    @Test func onlyStatementsThatNeedItMayRunOutsideATransaction() {
        #expect(SQLStatementSplitter.needsNoTransaction("CREATE INDEX CONCURRENTLY a ON t (x)"))
        #expect(SQLStatementSplitter.needsNoTransaction("create unique index concurrently a on t (x)"))
        #expect(SQLStatementSplitter.needsNoTransaction("DROP INDEX CONCURRENTLY a"))
        #expect(SQLStatementSplitter.needsNoTransaction("ALTER TYPE mood ADD VALUE 'ok'"))
        #expect(!SQLStatementSplitter.needsNoTransaction("CREATE INDEX a ON t (x)"))
        #expect(!SQLStatementSplitter.needsNoTransaction("CREATE TABLE t (id int)"))
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
            #expect(error.exitCode == 2)
        }
    }
}
