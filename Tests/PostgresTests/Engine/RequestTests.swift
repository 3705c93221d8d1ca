@testable import Postgres
import Testing

@Suite struct RequestTests {
    /// A COMMIT or END leaves a lost connection's outcome unknown even in a transaction, so the
    /// test that spots one must not miss any spelling, nor take another statement for one.
    @Test(arguments: ["COMMIT", "commit", "  Commit;", "\nEND", "end transaction", "COMMIT AND CHAIN"])
    func aCommitIsRecognized(_ text: String) {
        #expect(Request.isCommitText(text))
    }

    @Test(arguments: ["", "CO", "COMMENT ON TABLE t IS 'x'", "ROLLBACK", "SELECT 'COMMIT'", "ÇOMMIT", "\tCOMMIT x", "EN"])
    func anotherStatementIsNotACommit(_ text: String) {
        #expect(!Request.isCommitText(text))
    }
}
