import BabyBasicsStore
import CoreMetrics
import EmbeddedPostgres
import Foundation
import Logging
import NIOCore
import Postgres
import PostgresNIO
import Synchronization

/// A backend's work under load: C caller tasks through a pool of P connections, each loop one
/// family's dashboard, its timeline of today and one event insert, the statements the store
/// runs. Ours = the store's calls; PostgresNIO = the same statements (text and binary values
/// taken from the store's public builders) through `PostgresClient`; pgbench = the same
/// statements from a script, `-M prepared`, min(C, P) clients.
struct MixResult: Codable, Sendable {
    var client: String
    var connections: Int
    var callers: Int
    var loops: Int
    var seconds: Double
    var p50: Double
    var p99: Double
    var p999: Double
    var maximum: Double
    /// Ours: the pool's acquire wait (its `postgres.pool.acquire.wait` timer), p50 and p99.
    var acquireP50: Double?
    var acquireP99: Double?
    /// The client's CPU time (user + system, getrusage) per loop, in seconds.
    var cpuPerLoop: Double = 0
    var throughput: Double { seconds > 0 ? Double(loops) / seconds : 0 }
}

/// One family's statements, fixed for a run: "now" is the end of the loaded data, the
/// timeline is the family's today, the insert a wet diaper three days back (so that neither
/// today's timeline nor the dashboard's counts grow with the inserts of the run).
struct MixFamily: Sendable {
    var family: DomainData.Family
    var now: Date
    var day: PostgresDate
    var insertAt: EventTimestamp

    /// Without an id, the store makes one (as for a backend's caller that sends none).
    func draft(id: UUID? = nil) -> EventDraft {
        EventDraft(id: id, childID: family.child, payload: .diaper(.wet), start: insertAt)
    }
    var dashboard: SQL { Dashboard.statement(child: family.child, now: now, as: family.user) }
    var timeline: SQL { Timeline.statement(child: family.child, day: day, now: now, as: family.user) }
}

/// A value of ours, already encoded, as a PostgresNIO bind: the same bytes and type.
struct EncodedBind: PostgresDynamicTypeEncodable {
    var bytes: [UInt8]
    var oid: UInt32
    var psqlType: PostgresDataType { PostgresDataType(oid) }
    var psqlFormat: PostgresNIO.PostgresFormat { .binary }
    func encode<JSONEncoder: PostgresJSONEncoder>(into byteBuffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>) {
        byteBuffer.writeBytes(bytes)
    }
}

/// Only the pool's acquire wait is kept; every other metric goes nowhere.
final class AcquireWaits: MetricsFactory, Sendable {
    let nanoseconds = Mutex<[Int64]>([])

    final class Recorder: TimerHandler, Sendable {
        let owner: AcquireWaits
        init(owner: AcquireWaits) { self.owner = owner }
        func recordNanoseconds(_ duration: Int64) { owner.nanoseconds.withLock { $0.append(duration) } }
    }

    func makeCounter(label: String, dimensions: [(String, String)]) -> any CounterHandler { NOOPMetricsHandler.instance }
    func makeRecorder(label: String, dimensions: [(String, String)], aggregate: Bool) -> any RecorderHandler { NOOPMetricsHandler.instance }
    func makeTimer(label: String, dimensions: [(String, String)]) -> any TimerHandler {
        label == PostgresMetricName.acquireWait ? Recorder(owner: self) : NOOPMetricsHandler.instance
    }
    func destroyCounter(_ handler: any CounterHandler) {}
    func destroyRecorder(_ handler: any RecorderHandler) {}
    func destroyTimer(_ handler: any TimerHandler) {}
}

extension Runner {
    mutating func mix(cluster: EmbeddedPostgres) async throws {
        let (url, admin, families, end) = try await familyDatabase(cluster, name: "mix")
        let mixFamilies = families.map { family in
            let zone = TimeZone(identifier: family.zone) ?? .gmt
            return MixFamily(family: family, now: end, day: PostgresDate(end, in: zone),
                             insertAt: EventTimestamp(end.addingTimeInterval(-3 * 86_400), in: zone))
        }
        // The app's role and the store's session settings, for all three clients.
        let appURL = url + "&options=-crole%3Dbabybasics_app"
        let settings = Store.configured(PostgresConfiguration(appURL)).serverSettings
        let options = (["-c role=babybasics_app"] + settings.sorted { $0.key < $1.key }.map { "-c \($0.key)=\($0.value)" }).joined(separator: " ")
        let script = try await pgbenchMixScript(admin, mixFamilies)
        await admin.close()

        if let cell = ProcessInfo.processInfo.environment["BB_BENCH_MIX_CELL"] {
            // `BB_BENCH_MIX_CELL=P,C,ours|nio|pgbench,seconds` (e.g. `8,64,ours,20`): only that
            // client's cell, for profiling a change (`perf record -p`) or comparing two builds.
            let parts = cell.split(separator: ",").map(String.init)
            guard parts.count == 4, let connections = Int(parts[0]), let callers = Int(parts[1]), let seconds = Double(parts[3]),
                  ["ours", "nio", "pgbench"].contains(parts[2]) else {
                throw BenchError("BB_BENCH_MIX_CELL is \"\(cell)\": give P,C,ours|nio|pgbench,seconds such as 8,64,ours,20")
            }
            let sample = switch parts[2] {
            case "ours": try await mixOurs(appURL: appURL, families: mixFamilies, callers: callers, connections: connections, duration: seconds)
            case "nio": try await mixNIO(cluster: cluster, options: options, families: mixFamilies, callers: callers, connections: connections, duration: seconds)
            default: try await mixPgbench(cluster: cluster, options: options, script: script, callers: callers, connections: connections, duration: seconds)
            }
            guard let result = MixSample.pooled([sample]) else { throw BenchError("no sample") }
            print("mix cell \(cell): \(Int(result.throughput)) loops/s, " + String(format: "%.0f µs CPU per loop, p50 %.1f ms", result.cpuPerLoop * 1e6, result.p50 * 1e3))
            return
        }
        // Each cell twice per client, in the order ours, NIO, pgbench, pgbench, NIO, ours (a
        // drift during the cell weighs on the three alike); each figure pools the two (loops
        // over seconds, every latency, CPU over loops). One 5-second sample swung ±12% here:
        // pgbench's three P = 8 cells are the same 8 clients, and one run measured them at 792,
        // 1012 and 820 loops/s.
        let duration = quick ? 2.0 : 5.0
        let clients = ["ours", "PostgresNIO", "pgbench"]
        for connections in [8, 32] {
            for callers in [16, 64, 256] {
                log("concurrency mix: P=\(connections), C=\(callers)")
                var samples: [MixSample] = []
                for client in clients + clients.reversed() {
                    switch client {
                    case "ours": samples.append(try await mixOurs(appURL: appURL, families: mixFamilies, callers: callers, connections: connections, duration: duration))
                    case "PostgresNIO": samples.append(try await mixNIO(cluster: cluster, options: options, families: mixFamilies, callers: callers, connections: connections, duration: duration))
                    default: samples.append(try await mixPgbench(cluster: cluster, options: options, script: script, callers: callers, connections: connections, duration: duration))
                    }
                }
                for client in clients {
                    if let result = MixSample.pooled(samples.filter { $0.client == client }) { mixResults.append(result) }
                }
            }
        }
    }

    func mixOurs(appURL: String, families: [MixFamily], callers: Int, connections: Int, duration: Double) async throws -> MixSample {
        let waits = AcquireWaits()
        var configuration = PostgresConfiguration(appURL)
        configuration.metricsFactory = waits
        let pool = PostgresPool(configuration: Store.configured(configuration),
                                options: PoolOptions(minimumConnections: connections, maximumConnections: connections, acquireTimeout: .seconds(60)))
        let store = Store(pool: pool)
        let operation: @Sendable (inout SplitMix) async throws -> Void = { random in
            let family = families[random.int(families.count)]
            _ = try await store.events.dashboard(for: family.family.child, now: family.now, as: family.family.user)
            _ = try await store.events.timeline(for: family.family.child, day: family.day, now: family.now, as: family.family.user)
            guard try await store.events.record(family.draft(), as: family.family.user).created else { throw BenchError("the insert was not new (ours)") }
        }
        _ = try await drive(callers: min(callers, connections), duration: 0.5, window: 0, operation) // warm
        waits.nanoseconds.withLock { $0.removeAll() }
        let before = Usage.now()
        let (records, elapsed) = try await drive(callers: callers, duration: duration, window: 0, operation)
        let used = Usage.now() - before
        await pool.close()
        let acquired = waits.nanoseconds.withLock { $0 }.map { Double($0) / 1e9 }
        return MixSample(client: "ours", connections: connections, callers: callers,
                         latencies: records.flatMap(\.latencies), seconds: elapsed, cpu: used.cpu, acquireWaits: acquired)
    }

    func mixNIO(cluster: EmbeddedPostgres, options: String, families: [MixFamily], callers: Int, connections: Int, duration: Double) async throws -> MixSample {
        let socket = cluster.directory.appendingPathComponent(".s.PGSQL.\(try cluster.port())").path
        var configuration = PostgresClient.Configuration(unixSocketPath: socket, username: EmbeddedPostgres.superuser, password: try cluster.superuserPassword(), database: "mix")
        configuration.options.minimumConnections = connections
        configuration.options.maximumConnections = connections
        configuration.options.additionalStartupParameters = [("options", options)]
        let client = PostgresClient(configuration: configuration, backgroundLogger: Logger(label: "bb-bench-nio"))
        let running = Task { await client.run() }
        let logger = Logger(label: "bb-bench-nio")

        // Each family's statements, encoded once; the insert's id is replaced per loop.
        struct Prepared: Sendable {
            var dashboard: PostgresQuery
            var timeline: PostgresQuery
            var insertText: String
            var insertBinds: [EncodedBind?]
            var idPositions: [Int]
        }
        func encoded(_ sql: SQL) throws -> [EncodedBind?] {
            try sql.parameters.map { parameter in
                guard let value = parameter.value else { return nil }
                var bytes: [UInt8] = []
                try value.encode(into: &bytes)
                return EncodedBind(bytes: bytes, oid: parameter.type.rawValue)
            }
        }
        @Sendable func query(_ text: String, _ binds: [EncodedBind?]) -> PostgresQuery {
            var bindings = PostgresBindings(capacity: binds.count)
            for bind in binds {
                if let bind { bindings.append(bind) } else { bindings.appendNull() }
            }
            return PostgresQuery(unsafeSQL: text, binds: bindings)
        }
        let prepared: [Prepared] = try families.map { family in
            let template = family.draft(id: UUID.version4())
            let insert = EventRepository.recordStatement(template, as: family.family.user)
            let ids = insert.parameters.enumerated().compactMap { ($0.element.value as? UUID) == template.id ? $0.offset : nil }
            return Prepared(dashboard: query(family.dashboard.description, try encoded(family.dashboard)),
                            timeline: query(family.timeline.description, try encoded(family.timeline)),
                            insertText: insert.description, insertBinds: try encoded(insert), idPositions: ids)
        }
        let operation: @Sendable (inout SplitMix) async throws -> Void = { random in
            let family = prepared[random.int(prepared.count)]
            for statement in [family.dashboard, family.timeline] {
                var count = 0
                for try await _ in try await client.query(statement, logger: logger) { count += 1 }
                guard count >= 1 else { throw BenchError("no row (NIO): the family's child was not found") }
            }
            var binds = family.insertBinds
            let id = UUID.version4() // as the store makes them (Foundation's UUID() opens /dev/urandom each time)
            var bytes: [UInt8] = []
            try id.encode(into: &bytes)
            for position in family.idPositions { binds[position] = EncodedBind(bytes: bytes, oid: PostgresType.uuid.rawValue) }
            var created = false
            for try await row in try await client.query(query(family.insertText, binds), logger: logger) {
                created = try row.makeRandomAccess()["created"].decode(Bool?.self) ?? false
            }
            guard created else { throw BenchError("the insert returned nothing (NIO)") }
        }
        _ = try await drive(callers: min(callers, connections), duration: 0.5, window: 0, operation)
        let before = Usage.now()
        let (records, elapsed) = try await drive(callers: callers, duration: duration, window: 0, operation)
        let used = Usage.now() - before
        running.cancel()
        _ = await running.value
        return MixSample(client: "PostgresNIO", connections: connections, callers: callers,
                         latencies: records.flatMap(\.latencies), seconds: elapsed, cpu: used.cpu)
    }

    /// The same three statements for pgbench: `$n` becomes a variable cast to the parameter's
    /// type, set per loop by `\gset` from a table of each family's values (as the server prints
    /// them); the insert's id is a new `gen_random_uuid()` each loop; NULL values are literals.
    /// Comments go (pgbench would read `02:30` in one as a variable).
    func pgbenchMixScript(_ admin: Postgres.PostgresConnection, _ families: [MixFamily]) async throws -> String {
        func statements(_ family: MixFamily) -> [(prefix: String, sql: SQL)] {
            [("d", family.dashboard), ("t", family.timeline), ("r", EventRepository.recordStatement(family.draft(id: Self.mixTemplateID), as: family.family.user))]
        }
        guard let first = families.first else { throw BenchError("no families") }
        var columns: [String] = []
        var texts: [String] = []
        for (prefix, sql) in statements(first) {
            var text = Self.withoutComments(sql.description)
            // Highest numbers first, so that $1 does not rewrite the start of $12.
            for (index, parameter) in sql.parameters.enumerated().reversed() {
                let replacement: String
                if parameter.value == nil {
                    replacement = "NULL::\(parameter.type)"
                } else if prefix == "r", (parameter.value as? UUID) == Self.mixTemplateID {
                    replacement = ":eid::uuid"
                } else {
                    replacement = ":\(prefix)\(index + 1)::\(parameter.type)"
                    columns.append("\(prefix)\(index + 1)")
                }
                text = text.replacingOccurrences(of: "$\(index + 1)", with: replacement)
            }
            texts.append(text + ";")
        }
        columns.sort()
        try await admin.executeUnsafeRawSQL("CREATE TABLE bench_mix_params (n int PRIMARY KEY, \(columns.map { "\($0) text" }.joined(separator: ", ")))")
        for (number, family) in families.enumerated() {
            var values: [String: SQL] = [:]
            for (prefix, sql) in statements(family) {
                for (index, parameter) in sql.parameters.enumerated() {
                    guard let value = parameter.value, !(prefix == "r" && (value as? UUID) == Self.mixTemplateID) else { continue }
                    values["\(prefix)\(index + 1)"] = "\(value)::text"
                }
            }
            let row = SQL.joined(columns.map { values[$0] ?? "NULL" })
            try await admin.execute("INSERT INTO bench_mix_params VALUES (\(number + 1), \(row))")
        }
        try await admin.executeUnsafeRawSQL("GRANT SELECT ON bench_mix_params TO babybasics_app")
        return (["\\set i random(1, \(families.count))",
                 "SELECT \(columns.joined(separator: ", ")), gen_random_uuid() AS eid FROM bench_mix_params WHERE n = :i \\gset"] + texts)
            .joined(separator: "\n") + "\n"
    }

    static let mixTemplateID = UUID(uuidString: "00000000-0000-4000-8000-00000000beef") ?? UUID()

    /// SQL text without `--` comments (the store's statements hold none inside literals).
    static func withoutComments(_ text: String) -> String {
        text.split(separator: "\n", omittingEmptySubsequences: false).map { line in
            guard let range = line.range(of: "--") else { return String(line) }
            return String(line[..<range.lowerBound])
        }.joined(separator: "\n")
    }

    func mixPgbench(cluster: EmbeddedPostgres, options: String, script: String, callers: Int, connections: Int, duration: Double) async throws -> MixSample {
        let clients = min(callers, connections)
        let (latencies, used) = try await runPgbench(cluster: cluster, database: "mix", script: script, clients: clients, duration: duration, options: options)
        return MixSample(client: "pgbench", connections: clients, callers: callers, latencies: latencies, seconds: duration, cpu: used.cpu)
    }
}

/// One client's run of one cell: what `MixResult` is made of, kept apart so that the two runs
/// of a cell can be pooled.
struct MixSample {
    var client: String
    var connections: Int
    var callers: Int
    var latencies: [Double]
    var seconds: Double
    /// User + system seconds of the client (getrusage).
    var cpu: Double
    /// Ours only: the pool's acquire waits, in seconds.
    var acquireWaits: [Double]? = nil

    /// The samples of one cell and client as one result: loops over seconds, percentiles of
    /// every loop's latency, CPU over loops. Nil for no sample.
    static func pooled(_ samples: [MixSample]) -> MixResult? {
        guard let first = samples.first else { return nil }
        let sorted = samples.flatMap(\.latencies).sorted()
        func at(_ p: Double) -> Double { sorted.isEmpty ? 0 : sorted[Int(Double(sorted.count - 1) * p)] }
        var result = MixResult(client: first.client, connections: first.connections, callers: first.callers, loops: sorted.count,
                               seconds: samples.reduce(0) { $0 + $1.seconds },
                               p50: at(0.5), p99: at(0.99), p999: at(0.999), maximum: sorted.last ?? 0,
                               cpuPerLoop: samples.reduce(0) { $0 + $1.cpu } / Double(max(sorted.count, 1)))
        let waits = samples.compactMap(\.acquireWaits)
        if !waits.isEmpty {
            result.acquireP50 = Measurement.percentile(waits.flatMap { $0 }, 0.5)
            result.acquireP99 = Measurement.percentile(waits.flatMap { $0 }, 0.99)
        }
        return result
    }
}
