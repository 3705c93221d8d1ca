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
}
