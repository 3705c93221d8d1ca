import EmbeddedPostgres
import Foundation
import Logging
import NIOCore
import Postgres
import PostgresNIO

/// The three clients, one connection each, to the same server over the same Unix socket.
struct Clients {
    let ours: Postgres.PostgresConnection
    let nio: PostgresNIO.PostgresConnection
    let conninfo: String
    let cBinary: String
    let logger = Logger(label: "bb-bench")

    static func connect(cluster: EmbeddedPostgres, database: String, cBinary: String) async throws -> Clients {
        let port = try cluster.port()
        let ours = try await Postgres.PostgresConnection.connect(try cluster.connectionString(database: database))
        let socket = cluster.directory.appendingPathComponent(".s.PGSQL.\(port)").path
        // The embedded server asks for the superuser's password (SCRAM), even on its socket.
        let configuration = PostgresNIO.PostgresConnection.Configuration(
            unixSocketPath: socket, username: EmbeddedPostgres.superuser, password: try cluster.superuserPassword(), database: database)
        let nio = try await PostgresNIO.PostgresConnection.connect(configuration: configuration, id: 1, logger: Logger(label: "bb-bench-nio"))
        return Clients(ours: ours, nio: nio, conninfo: "host=\(cluster.directory.path) port=\(port) user=\(EmbeddedPostgres.superuser) dbname=\(database) passfile=\(cluster.passFile.path)", cBinary: cBinary)
    }

    /// Runs the C program; returns (seconds, p50, p99 in seconds).
    func c(_ arguments: [String]) async throws -> (seconds: Double, p50: Double, p99: Double) {
        let result = try await ChildProcess.spawn([cBinary] + arguments).result()
        guard result.status == 0, let json = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Double] else {
            throw BenchError("bench-clibpq \(arguments.first ?? "") failed: \(result.stderr)")
        }
        return (json["seconds"] ?? 0, (json["p50_us"] ?? 0) / 1e6, (json["p99_us"] ?? 0) / 1e6)
    }
}

struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// One decoded row of the decoding case.
struct BenchRow: Sendable {
    var id: UUID
    var at: Date
    var label: String
    var n: Int64
    var doc: String
    var x: Double
}

// MARK: Round trips

extension Clients {
    /// `onIOThread`: the calling task prefers the connection's I/O thread (no hop per call).
    func roundTripsOurs(_ count: Int, onIOThread: Bool = false) async throws -> [Double] {
        if onIOThread {
            return try await withTaskExecutorPreference(ours.taskExecutor) { try await roundTripsOursBody(count) }
        }
        return try await roundTripsOursBody(count)
    }

    func roundTripsOursBody(_ count: Int) async throws -> [Double] {
        var latencies: [Double] = []
        latencies.reserveCapacity(count)
        let clock = ContinuousClock()
        for index in 0..<count {
            let start = clock.now
            let value = try await ours.query("SELECT \(Int32(index))::int4").first?.decode(Int32.self, at: 0)
            guard value == Int32(index) else { throw BenchError("wrong round-trip value") }
            latencies.append(seconds(clock.now - start))
        }
        return latencies
    }

    func roundTripsNIO(_ count: Int) async throws -> [Double] {
        var latencies: [Double] = []
        latencies.reserveCapacity(count)
        let clock = ContinuousClock()
        for index in 0..<count {
            let start = clock.now
            let value = Int32(index)
            let rows = try await nio.query("SELECT \(value)::int4", logger: logger)
            var got: Int32?
            for try await decoded in rows.decode(Int32.self) { got = decoded }
            guard got == value else { throw BenchError("wrong round-trip value (NIO)") }
            latencies.append(seconds(clock.now - start))
        }
        return latencies
    }

    // MARK: Decoding

    func decodeOurs() async throws -> Int {
        let rows = try await ours.query("SELECT id, at, label, n, doc, x FROM bench_rows")
        var decoded: [BenchRow] = []
        decoded.reserveCapacity(rows.count)
        for row in rows {
            let (id, at, label, n, doc, x) = try row.decode((UUID, Date, String, Int64, String, Double).self)
            decoded.append(BenchRow(id: id, at: at, label: label, n: n, doc: doc, x: x))
        }
        return decoded.count
    }

    func decodeNIO() async throws -> Int {
        let rows = try await nio.query("SELECT id, at, label, n, doc, x FROM bench_rows", logger: logger)
        var decoded: [BenchRow] = []
        decoded.reserveCapacity(100_000)
        for try await (id, at, label, n, doc, x) in rows.decode((UUID, Date, String, Int64, String, Double).self) {
            decoded.append(BenchRow(id: id, at: at, label: label, n: n, doc: doc, x: x))
        }
        return decoded.count
    }

    // MARK: Writes

    static func insertSQL(_ id: UUID, _ child: UUID, _ user: UUID, _ at: Date) -> Postgres.SQL {
        """
        INSERT INTO events (id, child_id, logged_by, event_type, start_time, start_tz, start_offset_seconds, data)
        VALUES (\(id), \(child), \(user), 'diaper', \(at), 'UTC', 0, '{"contents":"wet"}')
        """
    }

    func insertOurs(_ count: Int, child: UUID, user: UUID, mode: String) async throws {
        let base = Date(timeIntervalSince1970: 1_735_689_600)
        switch mode {
        case "sequential":
            for index in 0..<count {
                try await ours.execute(Self.insertSQL(UUID(), child, user, base.addingTimeInterval(Double(index))))
            }
        case "pipeline":
            _ = try await ours.pipeline((0..<count).map { Self.insertSQL(UUID(), child, user, base.addingTimeInterval(Double($0))) })
        default:
            let document = JSONB.wet
            _ = try await ours.copyIn(table: "events", columns: ["id", "child_id", "logged_by", "event_type", "start_time", "start_tz", "start_offset_seconds", "data"]) { writer in
                for index in 0..<count {
                    try writer.append([UUID(), child, user, "diaper", base.addingTimeInterval(Double(index)), "UTC", Int32(0), document])
                }
            }
        }
    }

    func insertNIO(_ count: Int, child: UUID, user: UUID, mode: String) async throws {
        let base = Date(timeIntervalSince1970: 1_735_689_600)
        _ = base
        switch mode {
        case "sequential":
            for index in 0..<count {
                let id = UUID()
                let at = base.addingTimeInterval(Double(index))
                try await nio.query("""
                    INSERT INTO events (id, child_id, logged_by, event_type, start_time, start_tz, start_offset_seconds, data)
                    VALUES (\(id), \(child), \(user), 'diaper', \(at), 'UTC', 0, '{"contents":"wet"}')
                    """, logger: logger)
            }
        case "pipeline":
            // PostgresNIO pipelines the queries of concurrent tasks on one connection.
            let connection = nio
            let logger = self.logger
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 0..<count {
                    group.addTask {
                        let id = UUID()
                        let at = base.addingTimeInterval(Double(index))
                        try await connection.query("""
                            INSERT INTO events (id, child_id, logged_by, event_type, start_time, start_tz, start_offset_seconds, data)
                            VALUES (\(id), \(child), \(user), 'diaper', \(at), 'UTC', 0, '{"contents":"wet"}')
                            """, logger: logger)
                    }
                }
                try await group.waitForAll()
            }
        default:
            try await nio.copyFrom(table: "events", columns: ["id", "child_id", "logged_by", "event_type", "start_time", "start_tz", "start_offset_seconds", "data"], logger: logger) { writer in
                var buffer = ByteBuffer()
                for _ in 0..<count {
                    buffer.writeString("\(UUID().uuidString)\t\(child.uuidString)\t\(user.uuidString)\tdiaper\t2025-01-01 00:00:00+00\tUTC\t0\t{\"contents\":\"wet\"}\n")
                    if buffer.readableBytes > 1 << 18 {
                        try await writer.write(buffer)
                        buffer.clear()
                    }
                }
                try await writer.write(buffer)
            }
        }
    }
}

