import Foundation

/// Timings of one client in one case.
struct Measurement: Codable, Sendable {
    /// Seconds per repetition.
    var runs: [Double] = []
    /// Per-operation latencies, in seconds, across repetitions (when the case has them).
    var latencies: [Double] = []
    /// Operations per repetition.
    var count: Int = 0

    var median: Double? { Self.percentile(runs, 0.5) }
    var p50: Double? { Self.percentile(latencies, 0.5) }
    var p99: Double? { Self.percentile(latencies, 0.99) }

    static func percentile(_ values: [Double], _ p: Double) -> Double? {
        guard !values.isEmpty else { return nil }
        let sorted = values.sorted()
        return sorted[Int((Double(sorted.count - 1) * p).rounded(.down))]
    }
}

/// One benchmark case: a row of BENCHMARKS.md.
struct CaseResult: Codable, Sendable {
    var name: String
    var unit: String
    var ours: Measurement
    var c: Measurement?
    var nio: Measurement?
    var goal: String
    var goalMet: Bool?
    var note: String?
}

func seconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
}

/// Times `body`.
func timed<T>(_ body: () async throws -> T) async rethrows -> (T, Double) {
    let clock = ContinuousClock()
    let start = clock.now
    let value = try await body()
    return (value, seconds(clock.now - start))
}

func log(_ message: String) {
    FileHandle.standardError.write(Data("bb-bench: \(message)\n".utf8))
}
