public import ServiceLifecycle

/// The pool as a `Service` of swift-service-lifecycle: it runs until graceful shutdown, then
/// stops lending, waits up to `PoolOptions.shutdownGracePeriod` for lent connections to come
/// back, and closes everything.
///
/// Add the pool to the `ServiceGroup` *before* the services that use it: a group shuts its
/// services down in reverse order, so the HTTP server stops taking requests first and the
/// pool closes last.
///
/// ```swift
/// let pool = PostgresPool(configuration: config)
/// let group = ServiceGroup(services: [pool, httpServer], gracefulShutdownSignals: [.sigterm], logger: logger)
/// try await group.run()
/// ```
extension PostgresPool: Service {
    /// Waits for graceful shutdown (or cancellation), then closes the pool. Task cancellation
    /// closes at once, without a grace period.
    public func run() async throws {
        do {
            try await gracefulShutdown()
            await close(gracePeriod: options.shutdownGracePeriod)
        } catch {
            // Cancelled: the group is tearing down without grace.
            await close(gracePeriod: .zero)
        }
    }
}
