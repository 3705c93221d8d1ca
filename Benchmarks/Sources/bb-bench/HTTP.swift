import AsyncHTTPClient
import BabyBasicsAPI
import BabyBasicsStore
import EmbeddedPostgres
import Foundation
import Hummingbird
import Logging
import Migrator
import NIOCore
import NIOHTTP1
import Postgres

/// The HTTP group's figures: wrk against the reference service's reads, and a write mix
/// whose every acknowledged event is checked in the database afterwards.
struct HTTPResult: Codable, Sendable {
    struct Load: Codable, Sendable {
        var route: String
        var connections: Int
        var requestsPerSecond: Double
        var p50: String
        var p99: String
        var errors: String
    }
    var loads: [Load] = []
    var writes = Measurement()
    var writesPerSecond = 0.0
    var acknowledged = 0
    var foundOnce = 0
    var statuses: [String: Int] = [:]
}

extension Runner {
    /// The reference service (Examples/BabyBasicsService) in this process on a loopback port,
    /// its store on the bench cluster as `babybasics_app`; wrk (Debian's) in a process of its
    /// own, as a client would be.
    mutating func http(cluster: EmbeddedPostgres) async throws {
        guard let wrk = ["/usr/bin/wrk", "/usr/local/bin/wrk"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            notes.append("HTTP group skipped: wrk is not installed (make bench installs it with apt-get)")
            return
        }
        let (url, admin, families, _) = try await familyDatabase(cluster, name: "http")

        let store = Store(configuration: PostgresConfiguration(url + "&options=-crole%3Dbabybasics_app"), options: PoolOptions(maximumConnections: 16))
        let authority = try await TokenAuthority(secret: "the benchmark's secret, long enough for HS256")
        var logger = Logger(label: "bench-http")
        logger.logLevel = .critical
        let service = BabyBasicsService(store: store, authority: authority, port: 0, logger: logger)
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let application = service.application { continuation.yield($0) }
        let server = Task { try await application.runService(gracefulShutdownSignals: []) }
        defer { server.cancel() }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next() else { throw BenchError("the service did not start") }
        let family = families[0]
        let token = try await authority.issue(for: family.user, lifetime: 3600)
        let duration = quick ? 5 : 10

        var result = HTTPResult()
        for (name, path) in [("dashboard", "/children/\(family.child)/dashboard"), ("timeline", "/children/\(family.child)/timeline?date=today")] {
            for connections in [64, 256] {
                let run = try await ChildProcess.spawn([
                    wrk, "-t2", "-c\(connections)", "-d\(duration)s", "--latency", "--timeout", "10s",
                    "-H", "Authorization: Bearer \(token)", "http://127.0.0.1:\(port)\(path)",
                ]).result()
                let output = run.stdout
                func line(_ prefix: String) -> String? {
                    output.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.first { $0.hasPrefix(prefix) }
                }
                let rps = Double(line("Requests/sec:")?.split(separator: " ").last.map(String.init) ?? "") ?? 0
                let p50 = line("50%")?.split(separator: " ").last.map(String.init) ?? "?"
                let p99 = line("99%")?.split(separator: " ").last.map(String.init) ?? "?"
                let errors = [line("Non-2xx"), line("Socket errors")].compactMap { $0 }.joined(separator: "; ")
                log("http: \(name) at \(connections) connections: \(rps) req/s, p99 \(p99)")
                result.loads.append(.init(route: name, connections: connections, requestsPerSecond: rps, p50: p50, p99: p99, errors: errors.isEmpty ? "none" : errors))
            }
        }

        // Writes: 64 clients log events with ids of their own for a fixed time; afterwards every
        // acknowledged id must be in the table exactly once.
        let base = "http://127.0.0.1:\(port)"
        let deadline = ContinuousClock.now + .seconds(duration)
        let started = ContinuousClock.now
        let outcomes = try await withThrowingTaskGroup(of: [(UUID?, Int, Double)].self) { group in
            for client in 0..<64 {
                let writer = families[client % families.count]
                let writerToken = try await authority.issue(for: writer.user, lifetime: 3600)
                group.addTask {
                    var done: [(UUID?, Int, Double)] = []
                    while ContinuousClock.now < deadline {
                        let id = UUID()
                        var request = HTTPClientRequest(url: "\(base)/children/\(writer.child)/events")
                        request.method = .POST
                        request.headers.add(name: "Authorization", value: "Bearer \(writerToken)")
                        request.headers.add(name: "Content-Type", value: "application/json")
                        request.body = .bytes(ByteBuffer(string: #"{"id":"\#(id)","type":"diaper","start_time":"\#(ExportCoding.format(Date()))","time_zone":"UTC","data":{"contents":"wet"}}"#))
                        let (response, elapsed) = try await timed { try await HTTPClient.shared.execute(request, timeout: .seconds(30)) }
                        _ = try await response.body.collect(upTo: 1 << 20)
                        let status = Int(response.status.code)
                        done.append(((200...201).contains(status) ? id : nil, status, elapsed))
                    }
                    return done
                }
            }
            return try await group.reduce(into: [(UUID?, Int, Double)]()) { $0 += $1 }
        }
        let elapsed = seconds(ContinuousClock.now - started)
        let acknowledged = outcomes.compactMap(\.0)
        result.acknowledged = acknowledged.count
        result.writes.latencies = outcomes.map(\.2)
        result.writesPerSecond = Double(outcomes.count) / elapsed
        for outcome in outcomes { result.statuses[String(outcome.1), default: 0] += 1 }
        result.foundOnce = try await admin.fetchValue(Int.self, "SELECT count(*) FROM (SELECT id FROM events WHERE id = ANY(\(acknowledged)) GROUP BY id HAVING count(*) = 1) once") ?? 0
        log("http: writes \(Int(result.writesPerSecond))/s, \(result.acknowledged) acknowledged, \(result.foundOnce) found exactly once")
        server.cancel()
        _ = try? await server.value
        await store.pool.close()
        await admin.close()
        httpResult = result
    }

    func httpSection() -> [String] {
        guard let result = httpResult else { return [] }
        var lines = [
            "",
            "## HTTP: the reference service under wrk",
            "",
            "`Examples/BabyBasicsService` (Hummingbird 2) in the bench process on a loopback port, its pool of 16 on the",
            "bench server as `babybasics_app`; `wrk -t2` (Debian's) in its own process, one family's dashboard and timeline",
            "with a valid bearer token. Client, service and PostgreSQL share the 2 cores.",
            "",
            "| Route | Connections | Requests/s | p50 | p99 | Errors |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for load in result.loads {
            lines.append("| \(load.route) | \(load.connections) | \(Int(load.requestsPerSecond)) | \(load.p50) | \(load.p99) | \(load.errors) |")
        }
        let statuses = result.statuses.sorted { $0.key < $1.key }.map { "\($0.value) × \($0.key)" }.joined(separator: ", ")
        let exact = result.foundOnce == result.acknowledged
        lines += [
            "",
            "Write mix: 64 clients `POST /children/:id/events` with ids of their own: \(Int(result.writesPerSecond)) writes/s, p50 / p99 "
                + "\(formatLatency(result.writes.p50)) / \(formatLatency(result.writes.p99)); answers: \(statuses). "
                + "Acknowledged: \(result.acknowledged); found in `events` exactly once afterwards: \(result.foundOnce) "
                + (exact ? "(every one)." : "(**not every one**)."),
        ]
        return lines
    }
}
