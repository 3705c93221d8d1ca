import Foundation

/// The machine's CPU time so far, from the first line of `/proc/stat`: all of it, and the part
/// the hypervisor gave to other guests while this machine's CPUs wanted to run ("steal").
///
/// On a virtual machine, steal is the host's load showing through: a group of cases measured
/// while the host took a fifth of the CPUs measures the host as much as the code. The report
/// gives each group's share, and goal 6 does not compare figures measured under much of it.
struct CPUTimes {
    var steal: Double
    var total: Double

    /// Nil where `/proc/stat` is missing or unreadable (not Linux).
    static func now() -> CPUTimes? {
        guard let text = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
              let line = text.split(separator: "\n").first(where: { $0.hasPrefix("cpu ") }) else { return nil }
        // cpu user nice system idle iowait irq softirq steal guest guest_nice: guest time is
        // already counted in user and nice, so the total stops at steal.
        let fields = line.split(separator: " ").dropFirst().compactMap { Double($0) }
        guard fields.count >= 8 else { return nil }
        return CPUTimes(steal: fields[7], total: fields.prefix(8).reduce(0, +))
    }

    /// The share of the CPU time between `earlier` and `self` that was stolen (0 to 1).
    func stealShare(since earlier: CPUTimes) -> Double? {
        let total = self.total - earlier.total
        guard total > 0 else { return nil }
        return max(0, steal - earlier.steal) / total
    }
}

/// The steal share during one group of the run (`Runner.noteSteal`).
struct GroupSteal: Codable, Sendable {
    var group: String
    var share: Double
}

extension Runner {
    /// A steal share above this during a group makes its figures the host's as much as ours:
    /// goal 6 does not judge them (during a quiet pgbench run here, steal stayed at 0–4%).
    static let stealThreshold = 0.10

    /// Records the steal share since `start` for `group` (nothing where `/proc/stat` is missing).
    mutating func noteSteal(_ group: String, since start: CPUTimes?) {
        guard let start, let share = CPUTimes.now()?.stealShare(since: start) else { return }
        steal.append(GroupSteal(group: group, share: share))
    }

    /// One line for the report's header: each group's steal share, or nil when none was recorded.
    func stealLine() -> String? {
        guard !steal.isEmpty else { return nil }
        let shares = steal.map { "\($0.group) \(String(format: "%.0f", $0.share * 100))%" }.joined(separator: ", ")
        return "**Host CPU steal** (the share of this machine's CPU time the hypervisor gave to other guests, from `/proc/stat`), "
            + "per group: \(shares). Above \(Int(Self.stealThreshold * 100))%, a group measures the host's load as much as the code."
    }
}
