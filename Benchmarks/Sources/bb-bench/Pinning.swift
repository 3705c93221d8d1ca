import EmbeddedPostgres
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The pinned measurement: the server's processes on one core, the client (this process, and the
/// programs it starts, which inherit the setting) on another, so that neither takes the other's
/// CPU and a client's throughput shows whether it keeps up with a server it does not compete with.
///
/// Linux only: `taskset -a -p` (util-linux) sets the CPUs of every thread of a process. Threads and
/// processes started afterwards inherit the setting from the one that starts them, which is how
/// new backends (forked by the postmaster) and this process's new threads follow.
enum Pinning {
    /// The CPUs this process may run on now (`Cpus_allowed_list` of /proc/self/status: "0-3,6").
    static func allowedCPUs() -> [Int] {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("Cpus_allowed_list:") }) else { return [] }
        var cpus: [Int] = []
        for part in line.dropFirst("Cpus_allowed_list:".count).trimmingCharacters(in: .whitespaces).split(separator: ",") {
            let bounds = part.split(separator: "-").compactMap { Int($0) }
            if bounds.count == 1 { cpus.append(bounds[0]) } else if bounds.count == 2, bounds[0] <= bounds[1] { cpus += Array(bounds[0]...bounds[1]) }
        }
        return cpus
    }

    /// Runs `body` with the server's processes on `server` and this process on `client`, then
    /// allows every CPU of `all` again, to both. Throws "cannot pin …" when a process cannot be
    /// pinned (no taskset, or a server of another account for a user without CAP_SYS_NICE).
    static func with<T>(cluster: EmbeddedPostgres, server: Int, client: Int, all: [Int], _ body: () async throws -> T) async throws -> T {
        let postmaster = try postmasterID(cluster)
        try await pin(processTree(of: postmaster), to: [server])
        try await pin([getpid()], to: [client])
        let result: T
        do {
            result = try await body()
        } catch {
            try? await pin(processTree(of: postmaster), to: all)
            try? await pin([getpid()], to: all)
            throw error
        }
        try await pin(processTree(of: postmaster), to: all)
        try await pin([getpid()], to: all)
        return result
    }

    static func postmasterID(_ cluster: EmbeddedPostgres) throws -> pid_t {
        let text = try String(contentsOf: cluster.dataDirectory.appendingPathComponent("postmaster.pid"), encoding: .utf8)
        guard let first = text.split(separator: "\n").first, let pid = pid_t(first.trimmingCharacters(in: .whitespaces)) else {
            throw BenchError("cannot pin: the postmaster's process id is not in \(cluster.dataDirectory.path)/postmaster.pid")
        }
        return pid
    }

    /// The postmaster and its children (the backends and the server's helpers).
    static func processTree(of root: pid_t) -> [pid_t] {
        var found = [root]
        for name in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
            guard let pid = pid_t(name), pid != root,
                  let stat = try? String(contentsOfFile: "/proc/\(name)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")") else { continue }
            // After "(comm)": the state, then the parent's id.
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            if fields.count > 1, pid_t(fields[1]) == root { found.append(pid) }
        }
        return found
    }

    /// `taskset -a -p -c CPUS PID` for each process: every thread of it.
    static func pin(_ processes: [pid_t], to cpus: [Int]) async throws {
        let list = cpus.map(String.init).joined(separator: ",")
        for pid in processes {
            // taskset lists the threads, then sets each: a thread that ends in between fails it
            // with "No such process" (the process itself goes on): then it runs again.
            for attempt in 1...5 {
                let result: ChildProcess.Result
                do {
                    result = try await ChildProcess.spawn(["/usr/bin/taskset", "-a", "-p", "-c", list, String(pid)]).result()
                } catch {
                    throw BenchError("cannot pin: taskset could not be started (\(error)); it comes with util-linux")
                }
                // Done, or a backend that ended meanwhile, which needs no pinning.
                if result.status == 0 || kill(pid, 0) != 0 { break }
                if attempt == 5 || !result.stderr.contains("No such process") {
                    throw BenchError("cannot pin process \(pid) to CPU \(list): \(result.stderr.trimmingCharacters(in: .whitespacesAndNewlines)) (run the bench as the server's account or as root)")
                }
            }
        }
    }
}
