import EmbeddedPostgres
import Foundation
import Logging

/// Test runs log through swift-log like services do; without a bootstrapped handler every
/// connection's `info` record (opened, closed) would print. `BB_TEST_LOG_LEVEL` (`make test`
/// sets `error`: under a parallel test load, slow-statement and pool warnings are expected)
/// bootstraps stderr at that level when ``TestPostgres/shared`` is first used.
/// Unset, nothing is bootstrapped, so a test suite that bootstraps its own handler is free to.
///
/// ```sh
/// BB_TEST_LOG_LEVEL=debug swift test --filter StoreLoggingTests   # every statement, on stderr
/// ```
enum TestLogging {
    static let bootstrapped: Void = {
        guard let text = ProcessInfo.processInfo.environment["BB_TEST_LOG_LEVEL"], !text.isEmpty else { return }
        let level = Logger.Level(rawValue: text.lowercased()) ?? .warning
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
    }()
}
