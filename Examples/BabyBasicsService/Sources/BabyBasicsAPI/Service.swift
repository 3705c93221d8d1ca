import BabyBasicsStore
import Foundation
import Hummingbird
import Logging
import Postgres
import ServiceLifecycle
import UnixSignals

/// The HTTP server and the pool in one `ServiceGroup`: SIGTERM stops taking requests first,
/// then the pool waits for its lent connections and closes.
///
/// ```swift
/// let service = try await BabyBasicsService(store: store, secret: secret, port: 8080)
/// try await service.run()
/// ```
public struct BabyBasicsService: Sendable {
    public let store: Store
    public let authority: TokenAuthority
    public let host: String
    public let port: Int
    public let logger: Logger
    /// The exports running, and their limits: at most two per user and half the pool's
    /// connections in all by default.
    public let exports: ExportLimiter
    /// A client that takes no export data for this long is cut off.
    public let exportStall: Duration
    /// How long a graceful shutdown may take before what is left is cancelled.
    public let shutdownLimit: Duration

    public init(store: Store, authority: TokenAuthority, host: String = "127.0.0.1", port: Int = 8080,
                exports: ExportLimiter? = nil, exportStall: Duration = .seconds(30), shutdownLimit: Duration = .seconds(15),
                logger: Logger = Logger(label: "babybasics.service")) {
        self.store = store
        self.authority = authority
        self.host = host
        self.port = port
        self.exports = exports ?? ExportLimiter(perUser: 2, total: max(1, store.pool.options.maximumConnections / 2))
        self.exportStall = exportStall
        self.shutdownLimit = shutdownLimit
        self.logger = logger
    }

    /// The application; `onRunning` gets the port it listens on (useful with port 0).
    public func application(onRunning: @escaping @Sendable (Int) async -> Void = { _ in }) -> some ApplicationProtocol {
        Application(
            router: BabyBasicsAPI.router(store: store, authority: authority, exports: exports, exportStall: exportStall),
            configuration: .init(address: .hostname(host, port: port), serverName: "babybasics"),
            onServerRunning: { channel in await onRunning(channel.localAddress?.port ?? 0) },
            logger: logger)
    }

    /// The pool and the server in one group, the pool first: on graceful shutdown the running
    /// exports are ended (a client that stopped reading cannot hold the process), the server
    /// stops taking requests and finishes the ones it has (each bounded by the store's
    /// deadlines), then the pool waits for lent connections and closes. Whatever is left after
    /// `shutdownLimit` is cancelled.
    ///
    /// ```swift
    /// let group = service.serviceGroup(gracefulShutdownSignals: [.sigterm])
    /// try await group.run()
    /// ```
    public func serviceGroup(gracefulShutdownSignals: [UnixSignal] = [.sigterm, .sigint], onRunning: @escaping @Sendable (Int) async -> Void = { _ in }) -> ServiceGroup {
        var configuration = ServiceGroupConfiguration(
            services: [.init(service: store.pool), .init(service: application(onRunning: onRunning)), .init(service: ExportDrain(limiter: exports))],
            gracefulShutdownSignals: gracefulShutdownSignals, logger: logger)
        configuration.maximumGracefulShutdownDuration = shutdownLimit
        return ServiceGroup(configuration: configuration)
    }

    /// Runs the pool and the server until SIGTERM or SIGINT.
    public func run(onRunning: @escaping @Sendable (Int) async -> Void = { _ in }) async throws {
        try await serviceGroup(onRunning: onRunning).run()
    }
}
