import Foundation
import Migrator
import Testing

/// Where statements end, as psql decides it (the differential test checks the same against
/// psql itself; these pin down the individual rules).
@Suite struct SQLScriptTests {
    func texts(_ sql: String) throws -> [String] { try SQLScript.statements(in: sql).map(\.text) }

    @Test func blockCommentsNestAndAnUnclosedOneIsAnErrorWithItsLine() throws {
        let sql = "CREATE TABLE a (x int);\n/* inputs come from data/*.csv */\nCREATE TABLE b (x int);\n"
        // `/*.csv */` opens a nested comment, so the outer one never closes.
        #expect(throws: SQLScript.SyntaxError(line: 2, column: 1, message: "this /* comment is never closed (comments nest: each /* inside it needs its own */)")) {
            try SQLScript.statements(in: sql)
        }
        #expect(try texts("/* a /* b; */ c; */ SELECT 1; SELECT 2") == ["/* a /* b; */ c; */ SELECT 1", "SELECT 2"])
        #expect(try texts("SELECT 1 /**/; SELECT 2 /*/ still; comment */") == ["SELECT 1 /**/", "SELECT 2 /*/ still; comment */"])
    }

    @Test func stringsAndIdentifiersHideSemicolons() throws {
        #expect(try texts("SELECT 'a;b', 'it''s; ok'; SELECT 2") == ["SELECT 'a;b', 'it''s; ok'", "SELECT 2"])
        #expect(try texts(#"SELECT E'\';' ; SELECT 2"#) == [#"SELECT E'\';'"#, "SELECT 2"])
        // In a standard string a backslash is a character: the string ends at the quote.
        #expect(try texts(#"SELECT '\'; SELECT 2"#) == [#"SELECT '\'"#, "SELECT 2"])
        // "typE" is an identifier, not an E prefix.
        #expect(try texts(#"SELECT typE'\'; SELECT 2"#) == [#"SELECT typE'\'"#, "SELECT 2"])
        #expect(try texts(#"SELECT U&'\0041;' , U&"a;b", "x"";y"; SELECT 2"#) == [#"SELECT U&'\0041;' , U&"a;b", "x"";y""#, "SELECT 2"])
        #expect(try texts("SELECT B'10;', X'1F;', N'n;'; SELECT 2").count == 2)
    }

    @Test func aStringContinuedOnTheNextLineKeepsItsEscapes() throws {
        // E'a' newline '\';' is one E string: the second part's \' is an escaped quote.
        #expect(try texts("SELECT E'a'\n'\\';x'; SELECT 2") == ["SELECT E'a'\n'\\';x'", "SELECT 2"])
        // Without a newline between them it is not a continuation.
        #expect(try texts("SELECT E'a' '\\'; SELECT 2") == ["SELECT E'a' '\\'", "SELECT 2"])
    }

    @Test func dollarQuotesWithTagsAndIdentifiersWithDollars() throws {
        #expect(try texts("SELECT $$;$$; SELECT $q$ $$ ; $q$; SELECT 3") == ["SELECT $$;$$", "SELECT $q$ $$ ; $q$", "SELECT 3"])
        #expect(try texts("SELECT $a$ $b$; $b$a$; SELECT 2") == ["SELECT $a$ $b$; $b$a$", "SELECT 2"])
        // a$$b is one identifier; $1 is a parameter.
        #expect(try texts("SELECT 1 AS a$$b; SELECT $1; SELECT 3") == ["SELECT 1 AS a$$b", "SELECT $1", "SELECT 3"])
        #expect(throws: SQLScript.SyntaxError.self) { try SQLScript.statements(in: "SELECT $x$ never closed;") }
        #expect(throws: SQLScript.SyntaxError.self) { try SQLScript.statements(in: "SELECT 'never closed;") }
        #expect(throws: SQLScript.SyntaxError.self) { try SQLScript.statements(in: "SELECT \"never closed;") }
    }

    @Test func beginAtomicBodiesAndParenthesesKeepTheirSemicolons() throws {
        let function = """
            CREATE OR REPLACE FUNCTION f(x int) RETURNS int LANGUAGE sql
            BEGIN ATOMIC
              SELECT CASE WHEN x > 0 THEN 1 ELSE 0 END;
              SELECT x;
            END;
            CREATE PROCEDURE p() LANGUAGE sql BEGIN ATOMIC SELECT 1; END;
            SELECT (1; 2);
            DO $$ BEGIN PERFORM 1; END $$;
            """
        let statements = try SQLScript.statements(in: function)
        #expect(statements.count == 4)
        #expect(statements[0].text.hasSuffix("END"))
        #expect(statements[1].words.prefix(2) == ["CREATE", "PROCEDURE"])
        #expect(statements[2].text == "SELECT (1; 2)")
        #expect(statements[3].line == 8)
    }

    @Test func psqlMetaCommandsAreRefusedWithTheirLine() throws {
        #expect(throws: SQLScript.SyntaxError(line: 2, column: 1, message: "\\set is a psql meta-command, not SQL; bbmigrate runs SQL only (use SET, or write the value out)")) {
            try SQLScript.statements(in: "SELECT 1;\n\\set x 1\nSELECT :x;")
        }
        // Inside strings and comments a backslash is nothing special.
        #expect(try texts("SELECT E'\\\\'; -- \\i nothing\n/* \\set */ SELECT '\\'") == ["SELECT E'\\\\'", "/* \\set */ SELECT '\\'"])
    }

    @Test func linesAndWordsIgnoreLeadingComments() throws {
        let statements = try SQLScript.statements(in: "-- header\n\n/* note */\n  create   unique index concurrently i on t (x);\n-- trailing comment only\n")
        #expect(statements.count == 1)
        #expect(statements[0].line == 4)
        #expect(statements[0].textLine == 3) // psql drops the -- comment, keeps the /* */ one
        #expect(statements[0].leadingWords == "CREATE UNIQUE INDEX CONCURRENTLY I ON T X")
        #expect(statements[0].text == "/* note */\n  create   unique index concurrently i on t (x)")
    }

    @Test func theIndexAConcurrentBuildCreatesIsKnownByName() throws {
        func name(_ sql: String) throws -> String? {
            try SQLScript.statements(in: sql).first?.concurrentIndexName.map { ($0.schema.map { $0 + "." } ?? "") + $0.name }
        }
        #expect(try name("CREATE INDEX CONCURRENTLY Idx_A ON t (x)") == "idx_a")
        #expect(try name("create unique index concurrently if not exists \"My Idx\" on t (x)") == "My Idx")
        #expect(try name("CREATE INDEX CONCURRENTLY app.idx ON app.t (x)") == "app.idx")
        #expect(try name("CREATE INDEX CONCURRENTLY ON t (x)") == nil)
        #expect(try name("CREATE INDEX idx ON t (x)") == nil)
    }
}
