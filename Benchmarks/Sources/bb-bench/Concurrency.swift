import EmbeddedPostgres
import Foundation
import Logging
import Postgres
import PostgresNIO
#if canImport(Glibc)
import Glibc
#endif

/// Many callers through a pool of P connections: ours (`PostgresPool`, one-statement calls
/// pipelined), PostgresNIO's `PostgresClient` and asyncpg's pool (on uvloop) with the same
/// limit, and pgbench with P clients as the floor. Same server, same statements; every client
/// twice per cell, interleaved (`everyClientTwice`); then a few cells again with the server on
/// one core and the client on another.
struct LoadResult: Codable, Sendable {
    var client: String
    var statement: String
    var callers: Int
    var connections: Int
    var operations: Int
    var seconds: Double
    var p50: Double
    var p99: Double
    var maximum: Double
    /// Client CPU (user + system) per operation, in seconds.
    var cpuPerOperation: Double
    /// Voluntary and involuntary context switches of the client per operation.
    var switchesPerOperation: Double
    /// The throughput of each run pooled into this one, in the order they ran (nil: one run;
    /// a report of an older run has none).
    var passes: [Double]? = nil
    var throughput: Double { seconds > 0 ? Double(operations) / seconds : 0 }

    /// Two or more runs of one client in one cell as one result: operations over seconds; CPU,
    /// context switches, p50 and p99 averaged with each run weighted by its operations; the
    /// largest maximum. (asyncpg reports percentiles, not every latency, so the percentiles
    /// are averaged rather than recomputed from all the latencies.)
    static func pooled(_ runs: [LoadResult]) -> LoadResult? {
        guard var pooled = runs.first else { return nil }
        let operations = runs.map(\.operations).reduce(0, +)
        let weight = Double(max(operations, 1))
        func mean(_ figure: KeyPath<LoadResult, Double>) -> Double {
            runs.map { $0[keyPath: figure] * Double($0.operations) }.reduce(0, +) / weight
        }
        pooled.operations = operations
        pooled.seconds = runs.map(\.seconds).reduce(0, +)
        pooled.p50 = mean(\.p50)
        pooled.p99 = mean(\.p99)
        pooled.maximum = runs.map(\.maximum).max() ?? 0
        pooled.cpuPerOperation = mean(\.cpuPerOperation)
        pooled.switchesPerOperation = mean(\.switchesPerOperation)
        pooled.passes = runs.flatMap { $0.passes ?? [$0.throughput] }
        return pooled
    }

    /// How far apart this result's runs were: (highest − lowest) / lowest throughput (0: one run).
    var spread: Double {
        guard let passes, let low = passes.min(), let high = passes.max(), low > 0 else { return 0 }
        return (high - low) / low
    }
}

/// CPU time and context switches so far, of this process or of its waited-for children.
struct Usage {
    var cpu: Double
    var switches: Double

    static func now(children: Bool = false) -> Usage {
        var usage = rusage()
        getrusage(children ? RUSAGE_CHILDREN.rawValue : RUSAGE_SELF.rawValue, &usage)
        let cpu = Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
            + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
        return Usage(cpu: cpu, switches: Double(usage.ru_nvcsw + usage.ru_nivcsw))
    }

    static func - (a: Usage, b: Usage) -> Usage { Usage(cpu: a.cpu - b.cpu, switches: a.switches - b.switches) }
}

enum LoadStatement: String, CaseIterable {
    case select1 = "SELECT $1"
    case lookup = "index lookup"

    /// The same statement for pgbench (its own random parameter).
    var pgbenchScript: String {
        switch self {
        case .select1: "\\set v random(1, 1000000)\nSELECT :v::int4;\n"
        case .lookup: "\\set id random(1, 200000)\nSELECT id, child_id, start_time, note FROM bench_events WHERE id = :id;\n"
        }
    }
}

/// What each caller task brings back: its latencies, and its completions per window.
struct CallerRecord: Sendable {
    var latencies: [Double] = []
    var windows: [Int] = []
}

extension Runner {
    mutating func concurrency(cluster: EmbeddedPostgres) async throws {
        let admin = try await Postgres.PostgresConnection.connect(try cluster.connectionString(database: "bench"))
        _ = try await admin.executeUnsafeRawSQL("""
            CREATE TABLE bench_events (id int8 PRIMARY KEY, child_id uuid NOT NULL, start_time timestamptz NOT NULL, note text);
            INSERT INTO bench_events SELECT n, gen_random_uuid(), now() - n * interval '1 minute', 'note ' || n FROM generate_series(1, 200000) AS n;
            """)
        _ = try await admin.executeUnsafeRawSQL("VACUUM (ANALYZE) bench_events") // alone: VACUUM refuses a transaction block
        await admin.close()
        if let cell = ProcessInfo.processInfo.environment["BB_BENCH_CELL"] {
            try await oneCell(cluster: cluster, cell)
            return
        }
        let duration = quick ? 2.0 : 5.0
        let callerCounts = [1, 16, 64, 256]
        var loads: [LoadResult] = []
        for statement in LoadStatement.allCases {
            for connections in [16, 32] {
                for callers in callerCounts {
                    log("concurrency: \(statement.rawValue), P=\(connections), C=\(callers)")
                    loads += try await everyClientTwice(cluster: cluster, statement: statement, callers: callers, connections: connections, duration: duration)
                }
            }
        }
        self.pinnedLoads = try await pinned(cluster: cluster, callerCounts: callerCounts, duration: duration)
        // Flat over time: one long run, throughput per 10 s window.
        let long = quick ? 20.0 : 60.0
        log("concurrency: \(long) s run of SELECT $1, P=16, C=256, for throughput over time")
        let (flatLoad, windows) = try await loadOurs(cluster: cluster, statement: .select1, callers: 256, connections: 16, duration: long, window: 10, onIOThread: true)
        self.loads = loads
        self.flatness = Flatness(load: flatLoad, windowSeconds: 10, perWindow: windows)
    }

    /// Every client in one cell, twice: in the order ours, ours (I/O), pgbench, NIO, asyncpg,
    /// then back (asyncpg, NIO, pgbench, ours (I/O), ours), so that a drift of the shared
    /// machine during the cell weighs on every client alike; each client's two runs pooled.
    /// One run of 5 s per client let one stall of the host decide a cell: a full run measured
    /// the plain P = 32, C = 64 index lookup at 15,500/s, where the same build made
    /// 25,457/s and 26,051/s alone on the same host minutes later.
    func everyClientTwice(cluster: EmbeddedPostgres, statement: LoadStatement, callers: Int, connections: Int, duration: Double) async throws -> [LoadResult] {
        let order = ["ours", "ours, I/O thread", "pgbench", "PostgresNIO", "asyncpg"]
        var runs: [String: [LoadResult]] = [:]
        for client in order + order.reversed() {
            let run: LoadResult? = switch client {
            case "ours": try await loadOurs(cluster: cluster, statement: statement, callers: callers, connections: connections, duration: duration).0
            case "ours, I/O thread": try await loadOurs(cluster: cluster, statement: statement, callers: callers, connections: connections, duration: duration, onIOThread: true).0
            case "pgbench": try await loadPgbench(cluster: cluster, statement: statement, callers: callers, connections: connections, duration: duration)
            case "PostgresNIO": try await loadNIO(cluster: cluster, statement: statement, callers: callers, connections: connections, duration: duration)
            default: try await loadAsyncpg(cluster: cluster, statement: statement, callers: callers, connections: connections, duration: duration)
            }
            if let run { runs[client, default: []].append(run) }
        }
        return order.compactMap { runs[$0].flatMap(LoadResult.pooled) }
    }

    /// `BB_BENCH_CELL=statement,P,C,ours|io,seconds` (e.g. `lookup,16,256,ours,20`): only that
    /// cell of ours, for profiling a change (`perf record -p`) or comparing two builds; the
    /// report is partial.
    func oneCell(cluster: EmbeddedPostgres, _ cell: String) async throws {
        let parts = cell.split(separator: ",").map(String.init)
        guard parts.count == 5, let statement = LoadStatement.allCases.first(where: { "\($0)" == parts[0] }),
              let connections = Int(parts[1]), let callers = Int(parts[2]), let seconds = Double(parts[4]) else {
            throw BenchError("BB_BENCH_CELL is \"\(cell)\": give statement,P,C,ours|io,seconds such as select1,16,256,ours,20")
        }
        let (load, _) = try await loadOurs(cluster: cluster, statement: statement, callers: callers, connections: connections, duration: seconds, onIOThread: parts[3] == "io")
        print("cell \(cell): \(Int(load.throughput)) ops/s, " + String(format: "%.1f µs CPU and %.2f context switches per operation, p50 %.0f µs",
                                                                     load.cpuPerOperation * 1e6, load.switchesPerOperation, load.p50 * 1e6))
    }

    /// `onIOThread`: the caller tasks prefer the pool's I/O thread as their executor (Swift's
    /// task-executor preference), so that no call hops between threads.
    func loadOurs(cluster: EmbeddedPostgres, statement: LoadStatement, callers: Int, connections: Int, duration: Double, window: Double = 0,
                  onIOThread: Bool = false) async throws -> (LoadResult, [Int]) {
        let pool = PostgresPool(configuration: PostgresConfiguration(try cluster.connectionString(database: "bench")),
                                options: PoolOptions(minimumConnections: connections, maximumConnections: connections, acquireTimeout: .seconds(60)))
        let operation: @Sendable (inout SplitMix) async throws -> Void = { random in
            switch statement {
            case .select1:
                let value = Int32(random.int(1_000_000))
                guard try await pool.fetchValue(Int32.self, "SELECT \(value)::int4") == value else { throw BenchError("wrong value (ours)") }
            case .lookup:
                let id = Int64(random.int(200_000) + 1)
                let rows = try await pool.query("SELECT id, child_id, start_time, note FROM bench_events WHERE id = \(id)")
                guard let row = rows.first, try row.decode(Int64.self, at: 0) == id else { throw BenchError("wrong row (ours)") }
                _ = try row.decode((Int64, UUID, Date, String?).self)
            }
        }
        _ = try await drive(callers: min(callers, connections), duration: 0.5, window: 0, operation) // warm: connections open, statements prepared
        let preference: (any TaskExecutor)? = onIOThread ? pool.taskExecutor : nil
        let before = Usage.now()
        let (records, elapsed) = try await drive(callers: callers, duration: duration, window: window, preference: preference, operation)
        let used = Usage.now() - before
        await pool.close()
        return (summarize(onIOThread ? "ours, I/O thread" : "ours", statement, callers, connections, records, elapsed, used), merge(records.map(\.windows)))
    }

    func loadNIO(cluster: EmbeddedPostgres, statement: LoadStatement, callers: Int, connections: Int, duration: Double) async throws -> LoadResult {
        let socket = cluster.directory.appendingPathComponent(".s.PGSQL.\(try cluster.port())").path
        var configuration = PostgresClient.Configuration(unixSocketPath: socket, username: EmbeddedPostgres.superuser, password: try cluster.superuserPassword(), database: "bench")
        configuration.options.minimumConnections = connections
        configuration.options.maximumConnections = connections
        let client = PostgresClient(configuration: configuration, backgroundLogger: Logger(label: "bb-bench-nio"))
        let running = Task { await client.run() }
        let logger = Logger(label: "bb-bench-nio")
        let operation: @Sendable (inout SplitMix) async throws -> Void = { random in
            switch statement {
            case .select1:
                let value = Int32(random.int(1_000_000))
                var got: Int32?
                for try await decoded in try await client.query("SELECT \(value)::int4", logger: logger).decode(Int32.self) { got = decoded }
                guard got == value else { throw BenchError("wrong value (NIO)") }
            case .lookup:
                let id = Int64(random.int(200_000) + 1)
                var got: Int64?
                let rows = try await client.query("SELECT id, child_id, start_time, note FROM bench_events WHERE id = \(id)", logger: logger)
                for try await (rowID, _, _, _) in rows.decode((Int64, UUID, Date, String?).self) { got = rowID }
                guard got == id else { throw BenchError("wrong row (NIO)") }
            }
        }
        _ = try await drive(callers: min(callers, connections), duration: 0.5, window: 0, operation)
        let before = Usage.now()
        let (records, elapsed) = try await drive(callers: callers, duration: duration, window: 0, operation)
        let used = Usage.now() - before
        running.cancel()
        _ = await running.value
        return summarize("PostgresNIO", statement, callers, connections, records, elapsed, used)
    }

    /// SELECT $1 at P = 16 with the server's processes on one CPU and this process (and pgbench,
    /// and Python, which inherit it) on another: every client of the table, cell by cell. Empty
    /// (with a note) on a machine with one CPU, or where the processes cannot be pinned.
    mutating func pinned(cluster: EmbeddedPostgres, callerCounts: [Int], duration: Double) async throws -> [LoadResult] {
        let cpus = Pinning.allowedCPUs()
        guard cpus.count >= 2 else {
            notes.append("Concurrency, pinned: skipped, this process may use \(cpus.count) CPU (two are needed: one for the server, one for the client).")
            return []
        }
        // The server on the first CPU, the client on the last: on a 2-core machine, one each.
        let server = cpus[0], client = cpus[cpus.count - 1]
        var loads: [LoadResult] = []
        do {
            try await Pinning.with(cluster: cluster, server: server, client: client, all: cpus) {
                for callers in callerCounts {
                    log("concurrency, pinned (server on CPU \(server), client on CPU \(client)): SELECT $1, P=16, C=\(callers)")
                    loads += try await everyClientTwice(cluster: cluster, statement: .select1, callers: callers, connections: 16, duration: duration)
                }
            }
        } catch let error as BenchError where error.description.hasPrefix("cannot pin") {
            notes.append("Concurrency, pinned: skipped, \(error.description).")
            return []
        }
        return loads
    }

    /// asyncpg's pool on uvloop (`Benchmarks/asyncpg/bench.py`, run by the Python of
    /// `BB_BENCH_PYTHON`, else `.venv-bench/bin/python`, which `make bench` installs), the same
    /// statement with its own random parameter; nil (the column shows –) without that Python.
    func loadAsyncpg(cluster: EmbeddedPostgres, statement: LoadStatement, callers: Int, connections: Int, duration: Double) async throws -> LoadResult? {
        let python = ProcessInfo.processInfo.environment["BB_BENCH_PYTHON"] ?? repository.appendingPathComponent(".venv-bench/bin/python").path
        guard FileManager.default.isExecutableFile(atPath: python) else { return nil }
        var environment = ProcessInfo.processInfo.environment
        environment["PGPASSFILE"] = cluster.passFile.path
        let result = try await ChildProcess.spawn([
            python, repository.appendingPathComponent("Benchmarks/asyncpg/bench.py").path,
            "--host", cluster.directory.path, "--port", String(try cluster.port()), "--user", EmbeddedPostgres.superuser, "--database", "bench",
            "--statement", "\(statement)", "--callers", String(callers), "--connections", String(connections), "--seconds", String(duration),
        ], environment: environment).result()
        struct Output: Decodable { var operations: Int; var seconds: Double; var p50: Double; var p99: Double; var maximum: Double; var cpu: Double; var switches: Double }
        guard result.status == 0, let line = result.stdout.split(separator: "\n").last,
              let output = try? JSONDecoder().decode(Output.self, from: Data(line.utf8)) else {
            throw BenchError("asyncpg's bench failed (exit \(result.status)): \(result.stderr.suffix(2000))")
        }
        let count = Double(max(output.operations, 1))
        return LoadResult(client: "asyncpg", statement: statement.rawValue, callers: callers, connections: connections, operations: output.operations,
                          seconds: output.seconds, p50: output.p50, p99: output.p99, maximum: output.maximum,
                          cpuPerOperation: output.cpu / count, switchesPerOperation: output.switches / count)
    }

    /// pgbench with as many clients as there are connections (one connection per client), at
    /// most `callers`: the server's own client, the floor for any pool of that size.
    func loadPgbench(cluster: EmbeddedPostgres, statement: LoadStatement, callers: Int, connections: Int, duration: Double) async throws -> LoadResult {
        let clients = min(callers, connections)
        let (latencies, used) = try await runPgbench(cluster: cluster, database: "bench", script: statement.pgbenchScript, clients: clients, duration: duration)
        return summarize("pgbench", statement, callers, clients, [CallerRecord(latencies: latencies)], duration, used)
    }

    /// Runs `script` with pgbench (`-M prepared`, `clients` clients, `duration` seconds) and
    /// returns each transaction's latency, from its per-transaction log, and the CPU it used.
    /// `options`: PGOPTIONS for its sessions (a role, settings).
    func runPgbench(cluster: EmbeddedPostgres, database: String, script: String, clients: Int, duration: Double, options: String? = nil) async throws -> ([Double], Usage) {
        let folder = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("bbbench-pgbench-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let file = folder.appendingPathComponent("script.sql")
        try Data(script.utf8).write(to: file)
        var environment = ProcessInfo.processInfo.environment
        environment["PGPASSFILE"] = cluster.passFile.path
        if let options { environment["PGOPTIONS"] = options }
        let before = Usage.now(children: true)
        let result = try await ChildProcess.spawn([
            try Self.pgbench(), "-n", "-M", "prepared", "-c", String(clients), "-j", String(min(clients, 2)), "-T", String(Int(duration)),
            "-f", file.path, "-l", "--log-prefix", folder.appendingPathComponent("log").path,
            "-h", cluster.directory.path, "-p", String(try cluster.port()), "-U", EmbeddedPostgres.superuser, database,
        ], environment: environment, directory: folder.path).result()
        let used = Usage.now(children: true) - before
        // A client that hits an error is aborted while the others go on: pgbench can then exit 0.
        guard result.status == 0, !result.stderr.contains("aborted") else { throw BenchError("pgbench failed: \(result.stderr)") }
        // Each log line: client, transaction number, latency in µs, script, epoch s, µs.
        var latencies: [Double] = []
        for name in try FileManager.default.contentsOfDirectory(atPath: folder.path) where name.hasPrefix("log") {
            let text = try String(contentsOf: folder.appendingPathComponent(name), encoding: .utf8)
            for line in text.split(separator: "\n") {
                let fields = line.split(separator: " ")
                if fields.count >= 3, let micros = Double(fields[2]) { latencies.append(micros / 1e6) }
            }
        }
        return (latencies, used)
    }

    static func pgbench() throws -> String {
        let candidates = ["/usr/bin/pgbench", "/usr/lib/postgresql/15/bin/pgbench"]
            + ((try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []).map { "/usr/lib/postgresql/\($0)/bin/pgbench" }
        guard let found = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw BenchError("pgbench is not installed (apt-get install postgresql-contrib, or postgresql)")
        }
        return found
    }

    /// Runs `callers` tasks, each calling `operation` until `duration` has passed.
    func drive(callers: Int, duration: Double, window: Double, preference: (any TaskExecutor)? = nil,
               _ operation: @escaping @Sendable (inout SplitMix) async throws -> Void) async throws -> ([CallerRecord], Double) {
        let clock = ContinuousClock()
        let start = clock.now
        let end = start + .milliseconds(Int(duration * 1000))
        let records = try await withThrowingTaskGroup(of: CallerRecord.self) { group in
            for caller in 0..<callers {
                let body: @Sendable () async throws -> CallerRecord = {
                    var random = SplitMix(seed: UInt64(caller) &* 7919 &+ 1)
                    var record = CallerRecord()
                    record.latencies.reserveCapacity(4096)
                    while true {
                        let begin = clock.now
                        if begin >= end { break }
                        try await operation(&random)
                        let finished = clock.now
                        record.latencies.append(seconds(finished - begin))
                        if window > 0 {
                            let index = Int(seconds(finished - start) / window)
                            while record.windows.count <= index { record.windows.append(0) }
                            record.windows[index] += 1
                        }
                    }
                    return record
                }
                // `addTask(executorPreference: nil)` is not `addTask`: the task is marked as having
                // a preference, and each time it resumes, the runtime looks the preference up under
                // the task's status lock (`getPreferredTaskExecutor`, `withStatusRecordLock`: 4.7%
                // of the client's samples in a profile of the mix). A plain caller in a service has
                // no preference, so none is given unless asked for. `SELECT $1` at P = C = 16, three
                // interleaved runs each: 36.6 µs of client CPU per operation with it, 32.7 without.
                if let preference {
                    group.addTask(executorPreference: preference, operation: body)
                } else {
                    group.addTask(operation: body)
                }
            }
            return try await group.reduce(into: [CallerRecord]()) { $0.append($1) }
        }
        return (records, seconds(clock.now - start))
    }

    func merge(_ windows: [[Int]]) -> [Int] {
        var total: [Int] = []
        for series in windows {
            for (index, count) in series.enumerated() {
                while total.count <= index { total.append(0) }
                total[index] += count
            }
        }
        return total
    }

    func summarize(_ client: String, _ statement: LoadStatement, _ callers: Int, _ connections: Int, _ records: [CallerRecord], _ elapsed: Double, _ used: Usage) -> LoadResult {
        let latencies = records.flatMap(\.latencies).sorted()
        let count = max(latencies.count, 1)
        func at(_ p: Double) -> Double { latencies.isEmpty ? 0 : latencies[Int(Double(latencies.count - 1) * p)] }
        return LoadResult(client: client, statement: statement.rawValue, callers: callers, connections: connections, operations: latencies.count,
                          seconds: elapsed, p50: at(0.5), p99: at(0.99), maximum: latencies.last ?? 0,
                          cpuPerOperation: used.cpu / Double(count), switchesPerOperation: used.switches / Double(count))
    }
}

/// Throughput of one long run in consecutive windows.
struct Flatness: Codable, Sendable {
    var load: LoadResult
    var windowSeconds: Double
    var perWindow: [Int]

    /// The last full window against the first, as a fraction (0.05: 5% apart).
    var drift: Double {
        let full = perWindow.prefix(Int(load.seconds / windowSeconds))
        guard let first = full.first, let last = full.last, first > 0 else { return 1 }
        return abs(Double(last - first)) / Double(first)
    }
}
