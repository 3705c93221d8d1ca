import Foundation

/// What the previous run left in `Benchmarks/results/latest.json`: the groups issue 32's goal 6
/// says must not get worse (round trips, decoding, HTTP, scale-out).
struct PreviousRun: Decodable {
    var machine: String?
    /// Whether it was a `--quick` run (absent in files written before this was recorded).
    var quick: Bool?
    var results: [CaseResult]?
    var http: HTTPResult?
    var scaleOut: ScaleOutResult?
    /// The host's CPU steal per group (absent in files written before it was recorded).
    var steal: [GroupSteal]?

    /// What `latest.json` held before this run's report replaces it.
    enum File {
        case none
        case unreadable(String)
        case run(PreviousRun)
    }

    static func load(from file: URL) -> File {
        guard let data = try? Data(contentsOf: file) else { return .none }
        do {
            return .run(try JSONDecoder().decode(PreviousRun.self, from: data))
        } catch {
            return .unreadable("\(error)")
        }
    }
}

/// One figure of both runs: `higherIsBetter` says which way is worse.
private struct Compared {
    var name: String
    /// The run's group it belongs to, as `Runner.noteSteal` names it.
    var group: String
    var before: Double
    var now: Double
    var higherIsBetter: Bool

    /// How much worse now is than before, as a fraction of before (0.2 = 20% worse; negative =
    /// better): a time that grew, or a throughput that fell.
    var worsening: Double { higherIsBetter ? 1 - now / max(before, 1e-12) : now / max(before, 1e-12) - 1 }
}

extension Runner {
    /// Issue 32's goal 6: no figure of the round-trip, decode, HTTP or scale-out groups worse
    /// than in the previous run. Round trips and decoding are compared as ratios to C libpq in
    /// the same run, which takes out most of a machine's difference between runs; HTTP and
    /// scale-out figures are compared as they are. A figure counts as worse beyond 10%, the
    /// spread of two runs of the same code here. A case is matched by its name, which holds its
    /// repetition count, so a quick run is never compared with a full one. When C libpq's own
    /// times moved by more than half, the runs were on different machines: the section says so
    /// and leaves the verdict to `scripts/bench-ab.sh`. So it does for a group during which the
    /// hypervisor took more than `stealThreshold` of the CPU time in either run (HostSteal.swift):
    /// one full run here, with the library unchanged but for an error path, had 14 of 19 figures
    /// more than 10% worse, and a cell measured minutes later lost 30% of its CPU time to steal.
    func previousRunSection(_ file: PreviousRun.File) -> [String] {
        let title = ["", "## Against the previous run (issue 32, goal 6)", ""]
        let previous: PreviousRun
        switch file {
        case .none:
            return []
        case .unreadable(let problem):
            return title + ["`Benchmarks/results/latest.json` could not be read as a previous run (\(problem)): nothing compared."]
        case .run(let run):
            previous = run
        }
        if let wasQuick = previous.quick, wasQuick != quick {
            return title + ["The previous run was a \(wasQuick ? "quick" : "full") run and this one is \(quick ? "quick" : "full"): their figures are not comparable, nothing compared."]
        }
        var compared: [Compared] = []
        var groups = Set<String>()
        func overC(_ result: CaseResult) -> Double? {
            guard let mine = result.ours.median, let theirs = result.c?.median, theirs > 0 else { return nil }
            return mine / theirs
        }
        for result in results where result.name.hasPrefix("Round trips") || result.name.hasPrefix("Decoding") {
            guard let old = previous.results?.first(where: { $0.name == result.name }), let before = overC(old), let now = overC(result) else { continue }
            compared.append(Compared(name: "\(result.name) (ours / C)", group: result.name.hasPrefix("Decoding") ? "decoding" : "roundtrips",
                                     before: before, now: now, higherIsBetter: false))
            groups.insert(result.name.hasPrefix("Decoding") ? "decoding" : "round trips")
        }
        if let http = httpResult, let old = previous.http {
            for load in http.loads {
                guard let was = old.loads.first(where: { $0.route == load.route && $0.connections == load.connections }) else { continue }
                compared.append(Compared(name: "HTTP \(load.route), \(load.connections) connections (requests/s)", group: "http",
                                         before: was.requestsPerSecond, now: load.requestsPerSecond, higherIsBetter: true))
            }
            compared.append(Compared(name: "HTTP writes acknowledged per second", group: "http", before: old.writesPerSecond, now: http.writesPerSecond, higherIsBetter: true))
            groups.insert("HTTP")
        }
        if let scale = scaleOutResult, let old = previous.scaleOut {
            let figures: [(String, KeyPath<ScaleOutResult, Measurement>)] = [
                ("Scale-out: dashboard on the primary (p50)", \.dashboardPrimary), ("Scale-out: dashboard on the replica (p50)", \.dashboardReplica),
                ("Scale-out: round trip direct (p50)", \.roundTripDirect), ("Scale-out: round trip through PgBouncer (p50)", \.roundTripPgBouncer),
                ("Scale-out: store call direct (p50)", \.storeDirect), ("Scale-out: store call through PgBouncer (p50)", \.storePgBouncer),
            ]
            for (name, path) in figures {
                guard let before = old[keyPath: path].p50, let now = scale[keyPath: path].p50 else { continue }
                compared.append(Compared(name: name, group: "scaleout", before: before, now: now, higherIsBetter: false))
            }
            compared.append(Compared(name: "Scale-out: writes per second under the replica reads", group: "scaleout",
                                     before: old.writesPerSecond, now: scale.writesPerSecond, higherIsBetter: true))
            groups.insert("scale-out")
        }
        guard !compared.isEmpty else { return [] }
        // C libpq's own times in both runs say whether the machine is the same one. A ratio to C
        // takes out a CPU's speed, not the cost of waking a thread, which ours pays on every
        // round trip and C does not: on another machine the ratios move with the code unchanged.
        var machineMoved: [String] = []
        for result in results where result.name.hasPrefix("Round trips") || result.name.hasPrefix("Decoding") {
            guard let old = previous.results?.first(where: { $0.name == result.name }),
                  let was = old.c?.median, let now = result.c?.median, was > 0, abs(now / was - 1) > 0.5 else { continue }
            machineMoved.append("\(result.name): \(duration(was)) → \(duration(now))")
        }
        func figure(_ value: Double, of name: String) -> String {
            name.hasSuffix("(ours / C)") ? String(format: "%.2f×", value) : name.contains("(p50)") ? duration(value) : String(Int(value.rounded()))
        }
        let worse = compared.filter { $0.worsening > 0.10 }
        // A group during which the host stole more than the threshold, in either run: its
        // figures measured the host's load as much as the code, and are not judged.
        func share(_ steal: [GroupSteal]?, _ group: String) -> Double? { steal?.first { $0.group == group }?.share }
        let busy = Set(compared.map(\.group)).filter { group in
            [share(self.steal, group), share(previous.steal, group)].contains { ($0 ?? 0) > Self.stealThreshold }
        }
        let judged = worse.filter { !busy.contains($0.group) }
        let missing = ["round trips", "decoding", "HTTP", "scale-out"].filter { !groups.contains($0) }
        var lines = title + [
            "The round-trip, decode, HTTP and scale-out figures of this run against those `Benchmarks/results/latest.json` held",
            "before it (\(previous.machine.map { "measured on: \($0)" } ?? "machine not recorded")). Round trips and decoding as ours / C libpq",
            "of the same run; the rest as measured. Worse = more than 10% worse, the spread of two runs of the same code here.",
            "",
            "| Figure | Previous run | This run | Change |",
            "| --- | --- | --- | --- |",
        ]
        if !machineMoved.isEmpty {
            lines.insert(contentsOf: [
                "**Another machine:** C libpq's own times moved by more than half between the runs (" + machineMoved.joined(separator: "; ")
                    + "), so a change below can be the machine's alone. `scripts/bench-ab.sh` runs the previous run's library and this one",
                "on one machine, one after the other: that, not this table, says whether the code got worse.",
                "",
            ], at: lines.count - 2)
        }
        if !busy.isEmpty {
            let shares = busy.sorted().map { group in
                "\(group): " + [share(previous.steal, group), share(self.steal, group)]
                    .map { $0.map { String(format: "%.0f%%", $0 * 100) } ?? "not recorded" }.joined(separator: " → ")
            }
            lines.insert(contentsOf: [
                "**A busy host:** the hypervisor took more than \(Int(Self.stealThreshold * 100))% of this machine's CPU time during "
                    + "some groups (previous run → this run: " + shares.joined(separator: "; ") + "). A figure of those groups that is worse "
                    + "below is not judged: `scripts/bench-ab.sh` on a quiet host says whether the code got worse.",
                "",
            ], at: lines.count - 2)
        }
        for item in compared {
            let change = item.worsening * 100
            lines.append("| \(item.name) | \(figure(item.before, of: item.name)) | \(figure(item.now, of: item.name)) | "
                + (item.worsening > 0.10 && busy.contains(item.group) ? "\(String(format: "%.0f", change))% worse (not judged: a busy host)"
                    : item.worsening > 0.10 ? "**\(String(format: "%.0f", change))% worse**" : change > 0 ? String(format: "%.0f%% worse (within the spread)", change) : String(format: "%.0f%% better", -change)) + " |")
        }
        let verdict = worse.isEmpty ? (missing.isEmpty ? "yes" : "not all measured")
            : !machineMoved.isEmpty ? "not judged here: another machine (`scripts/bench-ab.sh`)"
            : judged.isEmpty ? "not judged here: a busy host (`scripts/bench-ab.sh`)" : "**no**"
        lines += [
            "",
            "| Goal | Here | Met |",
            "| --- | --- | --- |",
            "| No figure of the round-trip, decode, HTTP or scale-out groups worse than the previous run | "
                + (worse.isEmpty ? "none of \(compared.count) worse" : "\(worse.count) of \(compared.count) worse: " + worse.map(\.name).joined(separator: "; "))
                + (missing.isEmpty ? "" : "; not compared (absent from one of the runs): " + missing.joined(separator: ", "))
                + " | \(verdict) |",
        ]
        return lines
    }
}
