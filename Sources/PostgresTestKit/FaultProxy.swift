public import EmbeddedPostgres
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A TCP proxy in front of an embedded cluster that a test can make misbehave, for what a
/// real network does to a client: a silent peer (a dropped path, a frozen server), answers
/// that never come back, a connection cut mid-request.
///
/// It listens on 127.0.0.1 and forwards each connection to the cluster's Unix socket. Each
/// connection has two threads, which look at the proxy's `mode` between reads (every 20 ms).
///
/// ```swift
/// let proxy = try FaultProxy.start(in: cluster)
/// let connection = try await PostgresConnection.connect(proxy.connectionString(database: name))
/// proxy.mode = .silent           // nothing moves either way; sockets stay open
/// proxy.cutAll()                 // every connection closes now
/// proxy.stop()
/// ```
public final class FaultProxy: Sendable {
    /// What happens to the bytes.
    public enum Mode: Int, Sendable {
        /// Both ways, as they come.
        case forward
        /// Nothing is forwarded either way and nothing is closed: the peer has gone quiet.
        /// New connections are accepted by the kernel and then hear nothing.
        case silent
        /// The client's bytes reach the server; the server's answers are dropped.
        case dropAnswers
        /// The server's answers reach the client one protocol message at a time, 10 ms apart,
        /// so each is in a read of its own: an error and its Sync's answer, a row and the next,
        /// never together. (Switch to it while the connection is quiet: it splits at message
        /// boundaries, which it finds from the next byte the server sends.)
        case oneMessagePerRead
    }

    public let port: Int
    private let upstream: String
    private let passFile: URL
    private let listener: Int32
    private let state = Mutex(State())

    /// Descriptors are shut down only under this lock and only while listed here; their owners
    /// (the pump threads, the accept loop) unlist them under the same lock before they close
    /// them. A descriptor number is reused by the next socket the process opens (another
    /// test's proxy, a connection), so a shutdown after the close would cut someone else's
    /// socket: a load run saw a new proxy refuse connections that way.
    private struct State {
        var mode = Mode.forward
        var sockets: Set<Int32> = []
        var stopped = false
        /// Until the accept loop closes the listener.
        var listening = true
        var generation = 0
        var accepted = 0
    }

    /// What the proxy does now (takes effect within 20 ms).
    public var mode: Mode {
        get { state.withLock { $0.mode } }
        set { state.withLock { $0.mode = newValue } }
    }

    /// How many client connections the proxy has accepted so far (in every mode): a test can
    /// wait for a client to give up on a silent connection and dial again.
    public var connectionsAccepted: Int { state.withLock { $0.accepted } }

    /// `postgresql://postgres@127.0.0.1:PORT/database?passfile=…` (the cluster's password).
    public func connectionString(database: String, options: String = "") -> String {
        let passfile = passFile.path.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? passFile.path
        return "postgresql://\(EmbeddedPostgres.superuser)@127.0.0.1:\(port)/\(database)?passfile=\(passfile)" + (options.isEmpty ? "" : "&" + options)
    }

    /// Starts a proxy to `cluster` (running) on a free port.
    public static func start(in cluster: EmbeddedPostgres) throws -> FaultProxy {
        let socketPath = cluster.directory.appendingPathComponent(".s.PGSQL.\(try cluster.port())").path
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard listener >= 0 else { throw EmbeddedPostgresError("the proxy could not open a socket") }
        var yes: Int32 = 1
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        guard let port = EmbeddedPostgres.bindLoopback(listener), listen(listener, 64) == 0 else {
            close(listener)
            throw EmbeddedPostgresError("the proxy could not listen on 127.0.0.1")
        }
        let proxy = FaultProxy(port: port, upstream: socketPath, passFile: cluster.passFile, listener: listener)
        Thread.detachNewThread {
            nameThread()
            proxy.acceptLoop()
        }
        return proxy
    }

    /// The listening socket's descriptor number (for the test that it is never touched after
    /// the proxy closed it).
    package var listenerDescriptor: Int32 { listener }

    private init(port: Int, upstream: String, passFile: URL, listener: Int32) {
        self.port = port
        self.upstream = upstream
        self.passFile = passFile
        self.listener = listener
    }

    /// Closes every proxied connection now (the client sees the connection drop).
    public func cutAll() {
        state.withLock { state in
            state.generation += 1
            // shutdown, not close: the pump threads still hold the descriptors and close them,
            // after this (they see the set emptied).
            for fd in state.sockets { shutdown(fd, Int32(SHUT_RDWR)) }
            state.sockets.removeAll()
        }
    }

    /// Stops listening and closes every connection. Calling it again does nothing.
    public func stop() {
        state.withLock { state in
            guard !state.stopped else { return }
            state.stopped = true
            // Wakes the accept loop, which then closes the listener.
            if state.listening { shutdown(listener, Int32(SHUT_RDWR)) }
        }
        cutAll()
    }

    private func acceptLoop() {
        while true {
            let client = accept(listener, nil, nil)
            if client < 0 {
                let failure = errno
                if state.withLock({ $0.stopped }) { break }
                if failure == EINTR || failure == ECONNABORTED { continue }
                if failure == EMFILE || failure == ENFILE || failure == ENOBUFS || failure == ENOMEM {
                    usleep(10_000) // out of descriptors or memory for a moment: the client waits in the backlog
                    continue
                }
                break
            }
            if state.withLock({ $0.stopped }) {
                close(client)
                break
            }
            state.withLock { $0.accepted += 1 }
            let server = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            let capacity = MemoryLayout.size(ofValue: address.sun_path)
            withUnsafeMutableBytes(of: &address.sun_path) { raw in
                let bytes = Array(upstream.utf8.prefix(capacity - 1)) + [0]
                raw.copyBytes(from: bytes)
            }
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(server, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
            guard server >= 0, connected == 0 else {
                close(client)
                if server >= 0 { close(server) }
                continue
            }
            // Listed only while the proxy runs: a pair accepted as stop() cut the others is closed.
            let listed = state.withLock { state -> Bool in
                guard !state.stopped else { return false }
                state.sockets.formUnion([client, server])
                return true
            }
            guard listed else {
                close(client)
                close(server)
                break
            }
            let pair = Pair()
            Thread.detachNewThread {
                nameThread()
                self.pump(from: client, to: server, answers: false, pair: pair)
            }
            Thread.detachNewThread {
                nameThread()
                self.pump(from: server, to: client, answers: true, pair: pair)
            }
        }
        state.withLock { $0.listening = false }
        close(listener)
    }

    /// Closes both descriptors once both directions have stopped.
    private final class Pair: Sendable {
        let finished = Atomic<Int>(0)
    }

    private func pump(from source: Int32, to destination: Int32, answers: Bool, pair: Pair) {
        var buffer = [UInt8](repeating: 0, count: 16_384)
        var pendingAnswer: [UInt8] = []
        loop: while true {
            let (current, open) = state.withLock { ($0.mode, $0.sockets.contains(source)) }
            if !open { break } // cut or stopped, even while silent
            if current == .silent {
                usleep(20_000) // leave the bytes where they are
                continue
            }
            var poller = pollfd(fd: source, events: Int16(POLLIN), revents: 0)
            let ready = poll(&poller, 1, 20)
            if ready < 0 && errno == EINTR { continue }
            if ready <= 0 { continue }
            let mode = state.withLock { $0.mode }
            if mode == .silent { continue }
            let count = buffer.withUnsafeMutableBytes { recv(source, $0.baseAddress, $0.count, 0) }
            if count <= 0 { break }
            if answers && mode == .dropAnswers { continue }
            if answers && mode == .oneMessagePerRead {
                pendingAnswer += buffer[0..<count]
                // Type byte, then a 4-byte length that counts itself.
                while pendingAnswer.count >= 5 {
                    let length = pendingAnswer[1..<5].reduce(0) { $0 << 8 | Int($1) }
                    guard pendingAnswer.count >= 1 + length else { break }
                    guard sendAll(Array(pendingAnswer.prefix(1 + length)), to: destination) else { break loop }
                    pendingAnswer.removeFirst(1 + length)
                    usleep(10_000)
                }
                continue
            }
            if !pendingAnswer.isEmpty {
                guard sendAll(pendingAnswer, to: destination) else { break loop }
                pendingAnswer.removeAll()
            }
            guard sendAll(Array(buffer[0..<count]), to: destination) else { break loop }
        }
        shutdown(destination, Int32(SHUT_RDWR))
        shutdown(source, Int32(SHUT_RDWR))
        if pair.finished.add(1, ordering: .acquiringAndReleasing).newValue == 2 {
            state.withLock { $0.sockets.subtract([source, destination]) }
            close(source)
            close(destination)
        }
    }
}

/// Writes all of `bytes` to `destination`; false when the peer is gone.
private func sendAll(_ bytes: [UInt8], to destination: Int32) -> Bool {
    var offset = 0
    while offset < bytes.count {
        let written = bytes.withUnsafeBytes { raw -> Int in
            guard let base = raw.baseAddress else { return -1 }
            return send(destination, base + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
        }
        if written <= 0 { return false }
        offset += written
    }
    return true
}

/// The name of the proxy's threads, for a test that counts threads (`/proc/self/task/*/comm`).
public let faultProxyThreadName = "bb-faultproxy"

private func nameThread() {
    Thread.current.name = faultProxyThreadName // Foundation names the system thread too
}
