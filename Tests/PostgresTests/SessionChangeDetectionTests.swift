@testable import Postgres
import Testing

/// Which statement texts leave session state behind: what decides a reset on release and
/// whether a pool call may share its connection. A transaction-local `set_config(…, true)`
/// does not; anything the scanner cannot read as one does.
@Suite struct SessionChangeDetectionTests {
    @Test(arguments: [
        ("SELECT set_config('enable_bitmapscan', 'off', true)", false),
        ("SELECT 1 FROM set_config( 'a' , $1 ,TRUE ) AS x", false),
        ("SELECT set_config($1, $2, true), set_config('b', 'it''s', true)", false),
        ("SELECT set_config('a', 'b', false)", true),
        ("SELECT set_config('a', 'b', $3)", true),
        ("SELECT set_config('a', lower('B'), true)", true),
        ("SELECT set_config('a', 'b', true), set_config('c', 'd', false)", true),
        ("SELECT set_config('a', 'unterminated", true),
        ("SELECT set_config", true),
        ("SELECT 1", false),
        ("SELECT pg_advisory_lock(1)", true),
        ("LISTEN x", true),
        // Case-blind, whatever comes before (multi-byte text included), at the very end too.
        ("SELECT 'Zoë 👶' AS name; SeLeCt PG_ADVISORY_XACT_LOCK(1)", true),
        ("CREATE TEMPORARY TABLE t (id int)", true),
        ("SELECT 'Zoë 👶', 'Rôle' AS r", false),
        ("SET ROLE babybasics_app", true),
        ("Set Session AUTHORIZATION DEFAULT", true),
        ("SELECT * FROM dblink('x', 'y')", true),
        ("SELECT 'tem'", false),
        ("SELECT SET_CONFIG('a', 'b', TRUE)", false),
        ("SELECT 1 -- ends with tem", false),
        ("SELECT 1 -- ends with temp", true),
        ("", false),
    ])
    func detects(_ text: String, _ changes: Bool) {
        #expect(SessionSettings.mayChangeSession(text) == changes, "\(text)")
    }

    /// The first keyword decides too (`SET search_path`, `RESET`, `DECLARE`…), read past white
    /// space, parentheses and comments the way PostgreSQL reads them (block comments nest).
    @Test(arguments: [
        ("SET search_path TO x", true),
        ("  \n\t(set TIME ZONE 'UTC')", true),
        ("-- set by the deploy job\nSET search_path TO x", true),
        ("/* a /* nested */ comment */ RESET ALL", true),
        ("/* unterminated SET", false),
        ("DECLARE c CURSOR WITH HOLD FOR SELECT 1", true),
        ("discard all", true),
        ("UNLISTEN *", true),
        ("CREATE TABLE t (id int)", true),
        ("SELECT 1 -- SET search_path", false),
        ("settle_payment()", false),
        ("SELECT reset FROM t", false),
        ("WITH x AS (SELECT 1) SELECT * FROM x", false),
        ("Sét x", false),
        ("", false),
    ])
    func firstKeyword(_ text: String, _ ownSession: Bool) {
        #expect(SessionSettings.needsOwnSession(text) == ownSession, "\(text)")
    }

    /// The pool asks before rendering: scanning the pieces of an interpolated statement gives
    /// the same answer as scanning its text, parameters and quoted names included.
    @Test func theUnrenderedStatementGetsTheSameAnswer() {
        let name = "app.child", value = "x", id = 7
        let statements: [SQL] = [
            "SELECT \(id)::int4",
            "SET search_path TO \(identifier: "app")",
            "SELECT set_config(\(name), \(value), true)",
            "SELECT set_config(\(name), \(value), false)",
            "SELECT set_config(\(name), \(value), \(true))",
            "SELECT pg_advisory_lock(\(id))",
            "SELECT * FROM \(identifier: "temp_rows") WHERE id = \(id)",
            "\(id)",
            "",
        ]
        // Twice: the second answer for each literal comes from what the first scan remembered.
        for _ in 0..<2 {
            for sql in statements {
                #expect(SessionSettings.needsOwnSession(sql) == SessionSettings.needsOwnSession(sql.description), "\(sql.description)")
            }
        }
        // A word that runs across two composed pieces of text is still seen.
        let tail: SQL = "sory_lock(\(id))"
        let split: SQL = "SELECT pg_advi\(tail)"
        #expect(split.description == "SELECT pg_advisory_lock($1)")
        #expect(SessionSettings.needsOwnSession(split))
        #expect(SessionSettings.needsOwnSession(split)) // the seam of two literals, remembered
        let setTail: SQL = "ROLE app"
        #expect(SessionSettings.needsOwnSession("SELECT 1; SET \(setTail)" as SQL))
        let harmless: SQL = "porary_thing"
        #expect(!SessionSettings.needsOwnSession("SELECT tem_\(harmless)" as SQL))
        #expect(SessionSettings.needsOwnSession("SELECT set_config(\(name), \(value), true)" as SQL) == false)
        #expect(SessionSettings.needsOwnSession("SELECT set_config(\(name), \(value), \(true))" as SQL) == true)
    }
}
