import Foundation
import PostgresTestKit

/// Migration files for the differential test: each is applied by `psql -X -1 -v ON_ERROR_STOP=1
/// -f` and by `bbmigrate up`, and the two databases must end up identical (or both refuse it).
///
/// In a case's SQL, `@` before a letter stands for a prefix unique to the case (`c17_`), so that
/// all cases that apply can live in one database.
struct CorpusCase: Sendable {
    enum Outcome: Sendable { case applies, fails }
    var name: String
    var sql: String
    /// What psql does with it: checked too, so the test cannot pass by running nothing.
    var outcome: Outcome

    /// The SQL with `@name` turned into `c<number>_name`.
    func sql(number: Int) -> String {
        sql.replacing(/@(?=[A-Za-z])/, with: "c\(number)_")
    }
}

enum DifferentialCorpus {
    static func all() -> [CorpusCase] {
        var cases = handWritten
        var generator = SeededGenerator(seed: 20261123)
        for index in 0..<170 { cases.append(generated(index, using: &generator)) }
        return cases
    }

    static let handWritten: [CorpusCase] = [
        .init(name: "plain", sql: "CREATE TABLE @t (id int PRIMARY KEY, v text);\nINSERT INTO @t VALUES (1, 'a');\n", outcome: .applies),
        .init(name: "no trailing semicolon", sql: "CREATE TABLE @t (id int);\nINSERT INTO @t VALUES (1)", outcome: .applies),
        .init(name: "semicolon in string", sql: "CREATE TABLE @t (v text DEFAULT 'a;b');\nINSERT INTO @t VALUES (DEFAULT), ('x;y;z');\n", outcome: .applies),
        .init(name: "doubled quotes", sql: "CREATE TABLE @t (v text);\nINSERT INTO @t VALUES ('it''s; fine'), ('''');\n", outcome: .applies),
        .init(name: "E string with escaped quote", sql: "CREATE TABLE @t (v text);\nINSERT INTO @t VALUES (E'\\';x'), (e'a\\\\'), (E'\\n;\\t');\n", outcome: .applies),
        .init(name: "E string continued", sql: "CREATE TABLE @t (v text);\nINSERT INTO @t VALUES (E'a'\n'\\';b');\n", outcome: .applies),
        .init(name: "standard string continued", sql: "CREATE TABLE @t (v text);\nINSERT INTO @t VALUES ('a;'\n  -- a comment between\n  'b;');\n", outcome: .applies),
        .init(name: "backslash in standard string", sql: "CREATE TABLE @t (v text);\nINSERT INTO @t VALUES ('\\');\nINSERT INTO @t VALUES ('C:\\dir\\');\n", outcome: .applies),
        .init(name: "identifier ending in E before quote", sql: "CREATE TABLE @t (v text);\nINSERT INTO @t SELECT 'x' AS typE;\n", outcome: .applies),
        .init(name: "unicode string", sql: "CREATE TABLE @t (v text);\nINSERT INTO @t VALUES (U&'\\0041;\\00e9'), (u&'d\\0061t\\+000061');\n", outcome: .applies),
        .init(name: "unicode identifier", sql: "CREATE TABLE @t (U&\"c\\0061l;\" int);\nINSERT INTO @t VALUES (1);\n", outcome: .applies),
        .init(name: "quoted identifier with semicolon", sql: "CREATE TABLE \"@t;x\" (\"a;b\" int, \"q\"\"uote\" text);\nINSERT INTO \"@t;x\" VALUES (1, ';');\n", outcome: .applies),
        .init(name: "bit and hex strings", sql: "CREATE TABLE @t (b bit varying, x bit varying);\nINSERT INTO @t VALUES (B'1010', X'1F');\n", outcome: .applies),
        .init(name: "national string", sql: "CREATE TABLE @t (v char(3));\nINSERT INTO @t VALUES (N'n;');\n", outcome: .applies),
        .init(name: "dollar quote", sql: "CREATE FUNCTION @f() RETURNS text LANGUAGE sql AS $$ SELECT 'a;b' $$;\nCREATE TABLE @t AS SELECT @f() AS v;\n", outcome: .applies),
        .init(name: "tagged dollar quote with $$ inside", sql: "CREATE FUNCTION @f() RETURNS text LANGUAGE sql AS $body$ SELECT $$;$$ $body$;\nCREATE TABLE @t AS SELECT @f() AS v;\n", outcome: .applies),
        .init(name: "dollar tag look-alike", sql: "CREATE TABLE @t (v text);\nINSERT INTO @t VALUES ($a$ $b$; $b$a$);\n", outcome: .applies),
        .init(name: "plpgsql function", sql: """
            CREATE TABLE @t (v int);
            CREATE FUNCTION @f(n int) RETURNS int LANGUAGE plpgsql AS $$
            BEGIN
              INSERT INTO @t VALUES (n); -- a comment; with a semicolon
              RETURN n * 2;
            END;
            $$;
            SELECT @f(21);
            """, outcome: .applies),
        .init(name: "begin atomic function", sql: """
            CREATE TABLE @t (v int);
            CREATE FUNCTION @f(x int) RETURNS int LANGUAGE sql
            BEGIN ATOMIC
              SELECT CASE WHEN x > 0 THEN 1 ELSE 0 END;
            END;
            INSERT INTO @t VALUES (@f(5));
            """, outcome: .applies),
        .init(name: "begin atomic procedure", sql: """
            CREATE TABLE @t (v int);
            CREATE OR REPLACE PROCEDURE @p(x int) LANGUAGE sql
            BEGIN ATOMIC
              INSERT INTO @t VALUES (x);
              INSERT INTO @t VALUES (x + 1);
            END;
            CALL @p(1);
            """, outcome: .applies),
        .init(name: "begin atomic with nested case", sql: """
            CREATE FUNCTION @f(x int) RETURNS text LANGUAGE sql
            BEGIN ATOMIC
              SELECT CASE WHEN x = 1 THEN 'one;' WHEN x = 2 THEN CASE WHEN true THEN 'two' END ELSE 'many' END;
            END;
            CREATE TABLE @t AS SELECT @f(2) AS v;
            """, outcome: .applies),
        .init(name: "return function", sql: "CREATE FUNCTION @f(x int) RETURNS int LANGUAGE sql RETURN CASE WHEN x > 0 THEN x ELSE 0 END;\nCREATE TABLE @t AS SELECT @f(3) AS v;\n", outcome: .applies),
        .init(name: "function named begin merges what follows (as in psql)", sql: """
            CREATE FUNCTION begin() RETURNS int LANGUAGE sql AS 'SELECT 1';
            CREATE TABLE @t (v int);
            INSERT INTO @t VALUES (1);
            """, outcome: .applies),
        .init(name: "do block", sql: "CREATE TABLE @t (v text);\nDO $do$ BEGIN INSERT INTO @t VALUES ('do;'); END $do$;\n", outcome: .applies),
        .init(name: "nested block comments", sql: "/* outer /* inner; */ still outer; */\nCREATE TABLE @t (v int); /* trailing */ INSERT INTO @t VALUES (1);\n", outcome: .applies),
        .init(name: "comment between tokens", sql: "CREATE/* c; */TABLE @t(v int)--; x\n;INSERT INTO @t VALUES (1/**/);\n", outcome: .applies),
        .init(name: "operators next to comments", sql: "CREATE TABLE @t AS SELECT 1+/*c*/2 AS a, 3--comment\n AS b;\n", outcome: .applies),
        .init(name: "empty statements", sql: ";;\nCREATE TABLE @t (v int);;\n; ;\n", outcome: .applies),
        .init(name: "only comments", sql: "-- nothing here\n/* still nothing */\n", outcome: .applies),
        .init(name: "crlf-free multi-line string", sql: "CREATE TABLE @t (v text);\nINSERT INTO @t VALUES ('line one;\nline two;');\n", outcome: .applies),
        .init(name: "non-ascii", sql: "CREATE TABLE @t (\"crème;brûlée\" text, bébé int);\nINSERT INTO @t VALUES ('🍼;😴', 1);\nCOMMENT ON TABLE @t IS 'Ünïcödé; ok';\n", outcome: .applies),
        .init(name: "dollar in identifier", sql: "CREATE TABLE @t (a$$b int, c$ int);\nINSERT INTO @t VALUES (1, 2);\n", outcome: .applies),
        .init(name: "parameter-like text", sql: "CREATE FUNCTION @f(int) RETURNS int LANGUAGE sql AS 'SELECT $1 + 1';\nCREATE TABLE @t AS SELECT @f(1) AS v;\n", outcome: .applies),
        .init(name: "array slices and casts", sql: "CREATE TABLE @t AS SELECT (ARRAY[1,2,3])[1:2] AS a, '1'::int AS b, 1::text AS c;\n", outcome: .applies),
        .init(name: "exponent numbers", sql: "CREATE TABLE @t AS SELECT 1e5 AS a, 1.5E-3 AS b, 2. AS c, .5 AS d;\n", outcome: .applies),
        .init(name: "comment on with quotes", sql: "CREATE TABLE @t (v int);\nCOMMENT ON COLUMN @t.v IS 'a ''quoted''; value';\n", outcome: .applies),
        .init(name: "view with semicolon alias", sql: "CREATE VIEW @v AS SELECT 'x;' AS \"a;b\";\n", outcome: .applies),
        .init(name: "check constraint with string", sql: "CREATE TABLE @t (v text CHECK (v <> ';'));\nINSERT INTO @t VALUES ('ok');\n", outcome: .applies),
        .init(name: "trigger function", sql: """
            CREATE TABLE @t (v text, n int DEFAULT 0);
            CREATE FUNCTION @trg() RETURNS trigger LANGUAGE plpgsql AS $f$
            BEGIN NEW.n := length(NEW.v); RETURN NEW; END;
            $f$;
            CREATE TRIGGER @tr BEFORE INSERT ON @t FOR EACH ROW EXECUTE FUNCTION @trg();
            INSERT INTO @t (v) VALUES ('abc;');
            """, outcome: .applies),
        .init(name: "set local inside", sql: "SET LOCAL search_path = public;\nCREATE TABLE @t (v int);\n", outcome: .applies),
        .init(name: "tabs and form feeds", sql: "CREATE\tTABLE\t@t\t(v\tint);\u{0C}\nINSERT INTO @t VALUES (1);\n", outcome: .applies),
        .init(name: "string then comment then string", sql: "CREATE TABLE @t (v text);\nINSERT INTO @t VALUES ('a' -- c\n'b');\n", outcome: .applies),
        .init(name: "enum and domain", sql: "CREATE TYPE @mood AS ENUM ('ok;', 'good');\nCREATE DOMAIN @d AS text CHECK (VALUE <> '');\nCREATE TABLE @t (m @mood, d @d);\nINSERT INTO @t VALUES ('ok;', 'x');\n", outcome: .applies),
        .init(name: "insert select with subquery parens", sql: "CREATE TABLE @t (v int);\nINSERT INTO @t SELECT (SELECT count(*) FROM (SELECT 1) s);\n", outcome: .applies),
        .init(name: "json operators", sql: "CREATE TABLE @t AS SELECT '{\"a\":\";\"}'::jsonb ->> 'a' AS v, '[1]'::jsonb @> '[1]' AS w;\n", outcome: .applies),
        .init(name: "psql-style line comment at eof without newline", sql: "CREATE TABLE @t (v int); -- end", outcome: .applies),

        // psql fails on these, so bbmigrate must fail too.
        .init(name: "unclosed nested comment", sql: "CREATE TABLE @t (v int);\n/* inputs come from data/*.csv */\nCREATE TABLE @u (v int);\n", outcome: .fails),
        .init(name: "unclosed string", sql: "CREATE TABLE @t (v text DEFAULT 'oops);\n", outcome: .fails),
        .init(name: "unclosed dollar quote", sql: "CREATE FUNCTION @f() RETURNS int LANGUAGE sql AS $$ SELECT 1;\n", outcome: .fails),
        .init(name: "unclosed quoted identifier", sql: "CREATE TABLE \"@t (v int);\n", outcome: .fails),
        .init(name: "semicolon inside parentheses", sql: "CREATE TABLE @t (v int; w int);\n", outcome: .fails),
        .init(name: "standard string with backslash before quote", sql: "CREATE TABLE @t (v text);\nINSERT INTO @t VALUES ('\\'');\n", outcome: .fails),
        .init(name: "runtime error in the middle", sql: "CREATE TABLE @t (v int);\nSELECT 1/0;\nCREATE TABLE @u (v int);\n", outcome: .fails),
        .init(name: "missing table", sql: "INSERT INTO @nope VALUES (1);\n", outcome: .fails),
        .init(name: "begin atomic without end", sql: "CREATE FUNCTION @f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT 1;\nCREATE TABLE @t (v int);\n", outcome: .fails),
        .init(name: "constraint violation", sql: "CREATE TABLE @t (v int CHECK (v > 0));\nINSERT INTO @t VALUES (-1);\n", outcome: .fails),
        .init(name: "syntax error after valid statements", sql: "CREATE TABLE @t (v int);\nINSERT INTO @t VALUES (1);\nCREATE TABEL @u (v int);\n", outcome: .fails),
        .init(name: "E string unclosed by escaped quote", sql: "CREATE TABLE @t (v text);\nINSERT INTO @t VALUES (E'\\');\n", outcome: .fails),
        .init(name: "duplicate object", sql: "CREATE TABLE @t (v int);\nCREATE TABLE @t (v int);\n", outcome: .fails),
    ]

    // MARK: Generated cases

    /// Literals that hide statement ends in every way the scanners know.
    static let literals = [
        "'a;b'", "'it''s; ok'", "E'\\';x'", "e'a\\\\'", "E'tab\\t;'", "U&'\\0041;'", "$$;$$", "$q$ $$ ; $q$", "$tag$'$tag$",
        "'multi\nline;'", "'a'\n'b;'", "E'x\\''\n'y;'", "'-- not a comment;'", "'/* not a comment; */'", "'é;🙂'",
        "$a$ $b$; $b$a$", "'\\'", "N'n;'", "'\"'", "$$\n-- line;\n$$",
    ]

    static let comments = ["", " ", "\n", "-- note; with semicolon\n", "/* block; */ ", "/* outer /* inner; */ ; */ ", "\n\n-- a\n-- b;\n", "\t/**/"]

    static func generated(_ index: Int, using generator: inout SeededGenerator) -> CorpusCase {
        func pick<T>(_ items: [T]) -> T { items[Int(generator.next() % UInt64(items.count))] }
        var parts = ["CREATE TABLE @log (n int, v text);"]
        let count = 2 + Int(generator.next() % 6)
        var fails = false
        for step in 0..<count {
            let literal = pick(literals)
            let comment = pick(comments)
            let statement: String
            switch generator.next() % 10 {
            case 0: statement = "INSERT INTO @log VALUES (\(step), \(literal));"
            case 1: statement = "CREATE TABLE @t\(step) (v text DEFAULT \(literal));\nINSERT INTO @t\(step) DEFAULT VALUES;"
            case 2: statement = "COMMENT ON TABLE @log IS \(literal.hasPrefix("N") ? "'n;'" : literal);" // COMMENT ON takes a plain string, not N'…'
            case 3: statement = "CREATE FUNCTION @f\(step)() RETURNS text LANGUAGE sql AS $fn$ SELECT \(literal)::text $fn$;\nINSERT INTO @log VALUES (\(step), @f\(step)());"
            case 4: statement = "CREATE FUNCTION @g\(step)() RETURNS text LANGUAGE sql\nBEGIN ATOMIC\n  SELECT CASE WHEN true THEN \(literal)::text END;\nEND;\nINSERT INTO @log VALUES (\(step), @g\(step)());"
            case 5: statement = "CREATE PROCEDURE @p\(step)() LANGUAGE sql BEGIN ATOMIC INSERT INTO @log VALUES (\(step), \(literal)); INSERT INTO @log VALUES (\(step), 'second;'); END;\nCALL @p\(step)();"
            case 6: statement = "DO $do\(step)$ BEGIN INSERT INTO @log VALUES (\(step), \(literal)); END $do\(step)$;"
            case 7: statement = "CREATE VIEW \"@v;\(step)\" AS SELECT \(literal)::text AS \"c;\(step)\";"
            case 8: statement = "INSERT INTO @log SELECT \(step), v FROM (VALUES (\(literal)), (\(pick(literals)))) AS s(v);"
            default:
                // One in ten of these breaks the file the way a tired author would.
                switch generator.next() % 4 {
                case 0:
                    statement = "INSERT INTO @log VALUES (\(step), \(literal)); /* unclosed /* nested */"
                    fails = true
                case 1:
                    statement = "INSERT INTO @log VALUES (\(step), 1/0);"
                    fails = true
                default:
                    statement = "INSERT INTO @log VALUES (\(step), \(literal)) -- trailing\n;"
                }
            }
            parts.append(comment + statement)
        }
        return CorpusCase(name: "generated \(index)", sql: parts.joined(separator: "\n") + (generator.next() % 3 == 0 ? "" : "\n"), outcome: fails ? .fails : .applies)
    }
}
