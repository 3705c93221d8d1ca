/// How long a store call may take in all: waiting for a connection, connecting, its
/// statements, and its retries. Past it the call throws — `PostgresError.Kind.poolTimeout` while
/// it waited for a connection, `.timeout` once a statement ran — whatever the server does
/// (answers slowly, waits on a lock, freezes) or the network (goes silent). A service answers
/// those with 503 and `Retry-After`.
///
/// The same bounds reach the server: ``Store/serverSettings`` set `statement_timeout` to the
/// longer of the two, so a statement the client gave up on does not run on, and
/// `idle_in_transaction_session_timeout` so a session left in a transaction cannot hold locks.
///
/// ```swift
/// let store = Store(pool: pool, deadlines: StoreDeadlines(read: .seconds(2), write: .seconds(5)))
/// let unbounded = Store(pool: pool, deadlines: StoreDeadlines(read: nil, write: nil))
/// ```
public struct StoreDeadlines: Sendable, Equatable {
    /// A read (dashboard, timeline, sync page, one page of an export, lists); nil: none.
    public var read: Duration?
    /// A write (logging, editing, an account change); nil: none.
    public var write: Duration?

    public init(read: Duration? = .seconds(5), write: Duration? = .seconds(5)) {
        self.read = read
        self.write = write
    }
}
