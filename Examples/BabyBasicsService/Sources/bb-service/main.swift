import BabyBasicsAPI
import BabyBasicsStore
import EmbeddedPostgres
import Foundation
import Logging
import Migrator
import Postgres

/// `bb-service`: the reference service.
///
///     bb-service                  against DATABASE_URL (the service's role, e.g. babybasics_api)
///     bb-service --embedded       starts the development database (.bbdata of the repository),
///                                 migrates it, creates a demo family and prints a token
///
/// Settings (see `ServiceSettings`): `HOST` (127.0.0.1), `PORT` (8080), `BB_JWT_SECRET` (at
/// least 32 bytes, not a repetition; --embedded makes one up), `BB_JWT_ISSUER`,
/// `BB_JWT_AUDIENCE`, `BB_JWT_MAX_LIFETIME` (seconds, 30 days). A wrong one exits with status 2
/// and a line naming it.
@main
struct Main {
    static func main() async {
        // The service's own lines at info; the connections' (opened, closed) only from warning
        // on, unless LOG_LEVEL asks for more.
        let asked = ProcessInfo.processInfo.environment["LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:))
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = asked ?? (label == "babybasics.service" ? .info : .warning)
            return handler
        }
        do {
            try await run()
        } catch let invalid as ServiceSettings.Invalid {
            FileHandle.standardError.write(Data("bb-service: \(invalid)\n".utf8))
            exit(2)
        } catch {
            FileHandle.standardError.write(Data("bb-service: \(error)\n".utf8))
            exit(1)
        }
    }

    static func run() async throws {
        let environment = ProcessInfo.processInfo.environment
        let embedded = CommandLine.arguments.contains("--embedded")
        var settings = try ServiceSettings(environment: environment, secretRequired: !embedded)
        let port = settings.port
        var configuration: PostgresConfiguration
        if embedded {
            let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            let cluster = try EmbeddedPostgres.development(at: repository.appendingPathComponent(".bbdata").path)
            try await cluster.start()
            if try await !cluster.databaseExists("babybasics") { try await cluster.createDatabase("babybasics") }
            let url = try cluster.connectionString(database: "babybasics")
            try await Migrator(configuration: PostgresConfiguration(url), options: .init(directory: repository.appendingPathComponent("Migrations"))).up()
            configuration = PostgresConfiguration(url + "&options=-crole%3Dbabybasics_app")
            if settings.secret.isEmpty { settings.secret = (0..<4).map { _ in UUID().uuidString }.joined() }
        } else {
            guard let url = environment["DATABASE_URL"] else {
                throw APIError.invalid(field: "DATABASE_URL", reason: "is not set: point it at PostgreSQL (the babybasics_api role), or run bb-service --embedded")
            }
            configuration = PostgresConfiguration(url)
        }
        configuration.applicationName = "bb-service"
        let store = Store(configuration: configuration, options: PoolOptions(maximumConnections: 16))
        try await store.checkSchema()
        let authority = try await TokenAuthority(
            secret: settings.secret, issuer: settings.issuer, audience: settings.audience, maximumLifetime: settings.maximumTokenLifetime)
        let service = BabyBasicsService(store: store, authority: authority, host: settings.host, port: port)
        if embedded {
            let user = try await store.users.create(email: "demo-\(UUID().uuidString.prefix(8).lowercased())@example.com", displayName: "Demo parent")
            let child = try await store.children.create(ChildDraft(name: "Demo baby", birthDate: PostgresDate(Date().addingTimeInterval(-60 * 86_400), in: .gmt)), as: user.id)
            let token = try await authority.issue(for: user.id, lifetime: 86_400)
            // Unbuffered: a caller reading this through a pipe sees it at once.
            FileHandle.standardOutput.write(Data("""
                Serving on http://\(settings.host):\(port) (the development database in .bbdata). A demo family, and a token valid for a day:
                  TOKEN=\(token)
                  curl -H "Authorization: Bearer $TOKEN" http://\(settings.host):\(port)/children/\(child.id)/dashboard
                  curl -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' -X POST http://\(settings.host):\(port)/children/\(child.id)/events \\
                       -d '{"id":"'$(uuidgen)'","type":"diaper","start_time":"'$(date -u +%FT%TZ)'","time_zone":"UTC","data":{"contents":"both"}}'
                Stop with Ctrl-C.

                """.utf8))
        }
        try await service.run()
    }
}
