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
        #expect(throws: SQLScript.SyntaxError(line: 2, column: 1, message: "\\set is a psql meta-command, not SQL, and bbmigrate runs SQL only: "
            + "psql variables do not exist here; write the value out (a server setting is SET name = value)")) {
            try SQLScript.statements(in: "SELECT 1;\n\\set x 1\nSELECT :x;")
        }
        // Inside strings and comments a backslash is nothing special.
        #expect(try texts("SELECT E'\\\\'; -- \\i nothing\n/* \\set */ SELECT '\\'") == ["SELECT E'\\\\'", "/* \\set */ SELECT '\\'"])
    }

    /// Each meta-command's message says what to write instead: an include is not a variable.
    @Test func eachMetaCommandSaysWhatToDoInstead() throws {
        func message(_ sql: String) -> String {
            do {
                _ = try SQLScript.statements(in: sql)
                return "accepted"
            } catch {
                return error.message
            }
        }
        #expect(message("\\i other.sql\n").contains("it reads another file, and a migration is one file"))
        #expect(message("\\ir ../shared.sql\n").contains("it reads another file"))
        #expect(message("\\connect other\n").contains("--url"))
        #expect(message("\\copy t FROM 'rows.csv'\n").contains("INSERT … VALUES"))
        #expect(message("\\if :x\nSELECT 1;\n\\endif\n").contains("DO block"))
        #expect(message("SELECT 1 \\gexec\n").contains("EXECUTE"))
        #expect(message("\\echo hello\n").contains("RAISE NOTICE"))
        #expect(message("\\pset format csv\n").contains("\\pset is a psql meta-command") && message("\\pset x\n").contains("delete it"))
        // None of them says the same thing as \set.
        #expect(!message("\\i other.sql\n").contains("write the value out"))
    }

    /// Every current pg_dump writes `\restrict KEY` at the top and `\unrestrict KEY` at the end:
    /// a dump used as a first migration is read, both lines skipped; keys that do not match, or
    /// an \unrestrict alone, are refused at their line.
    @Test func aDumpsRestrictAndUnrestrictAreTakenAsPsqlTakesThem() throws {
        let dump = """
            --
            -- PostgreSQL database dump
            --

            \\restrict 4hZq0x9b2TkRr1

            SET statement_timeout = 0;
            CREATE TABLE public.t (id integer NOT NULL);

            --
            -- PostgreSQL database dump complete
            --

            \\unrestrict 4hZq0x9b2TkRr1

            """
        let statements = try SQLScript.statements(in: dump)
        #expect(statements.map(\.text) == ["SET statement_timeout = 0", "CREATE TABLE public.t (id integer NOT NULL)"])
        #expect(statements.map(\.line) == [7, 8])
        #expect(throws: SQLScript.SyntaxError(line: 3, column: 1, message: "\\unrestrict's key is not the one \\restrict gave on line 1; they come from one pg_dump run and must match")) {
            try SQLScript.statements(in: "\\restrict abc\nSELECT 1;\n\\unrestrict abd\n")
        }
        #expect(throws: SQLScript.SyntaxError(line: 2, column: 1, message: "\\unrestrict without a \\restrict before it; a dump has one pair, \\restrict at its top")) {
            try SQLScript.statements(in: "SELECT 1;\n\\unrestrict abc\n")
        }
        #expect(throws: SQLScript.SyntaxError.self) { try SQLScript.statements(in: "\\restrict\nSELECT 1;\n") }
        #expect(throws: SQLScript.SyntaxError.self) { try SQLScript.statements(in: "\\restrict a\n\\restrict a\n") }
    }

    /// COPY … FROM stdin is refused at the COPY (line 2), not at the `\.` that ends its rows,
    /// and a row that looks like an open string does not hide it.
    @Test func copyFromStdinIsRefusedAtTheCopy() throws {
        let sql = "CREATE TABLE t (id int, name text);\nCOPY public.t (id, name) FROM stdin;\n1\tO'Brien\n2\tSmith\n\\.\n"
        #expect(throws: SQLScript.SyntaxError(line: 2, column: 1, message: "COPY … FROM stdin takes its rows from the lines after it, which psql sends and bbmigrate does not "
            + "(it runs SQL only); write the rows as INSERT … VALUES (pg_dump --inserts writes them so)")) {
            try SQLScript.statements(in: sql)
        }
        // COPY from a server file, or to stdout, is SQL like any other.
        #expect(try texts("COPY t FROM '/srv/rows.csv' WITH (FORMAT csv);\nCOPY t TO STDOUT;") == ["COPY t FROM '/srv/rows.csv' WITH (FORMAT csv)", "COPY t TO STDOUT"])
    }

    /// Messages name a statement as it is written, not by upper-cased words.
    @Test func theExcerptIsTheStatementAsWritten() throws {
        let statements = try SQLScript.statements(in: """
            /* why */ CREATE INDEX CONCURRENTLY IF NOT EXISTS events_by_day
                ON events (child_id, start_time);
            VACUUM ANALYZE auth.users;
            CREATE TABLE a_table_with_a_long_name (first_column integer, second_column text, third_column jsonb);
            """)
        #expect(statements[0].excerpt == "CREATE INDEX CONCURRENTLY IF NOT EXISTS events_by_day ON events …")
        #expect(statements[1].excerpt == "VACUUM ANALYZE auth.users")
        #expect(statements[2].excerpt == "CREATE TABLE a_table_with_a_long_name (first_column integer, …")
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
