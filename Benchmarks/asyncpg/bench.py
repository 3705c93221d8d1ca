"""asyncpg on uvloop: the peer from another ecosystem in bb-bench's concurrency group.

C callers (asyncio tasks) share a pool of P connections (asyncpg.create_pool, min = max = P),
each calling the same statement as ours, PostgresNIO and pgbench until the time is up. asyncpg
prepares and caches each statement itself and reads binary results, as ours does.

    bench.py --host SOCKET_DIR --port PORT --user USER --database DB \
             --statement select1|lookup --callers C --connections P --seconds S

The password comes from PGPASSWORD or PGPASSFILE, as for libpq. Prints one JSON object:
{"operations": N, "seconds": S, "p50": s, "p99": s, "maximum": s, "cpu": s, "switches": n},
where cpu (user + system) and switches (voluntary + involuntary) are this process's, counted
over the timed part only (not Python's start, the pool's connections or the warm-up).
"""

import argparse
import asyncio
import json
import random
import resource
import sys
import time

import asyncpg
import uvloop

STATEMENTS = {
    "select1": "SELECT $1::int4",
    "lookup": "SELECT id, child_id, start_time, note FROM bench_events WHERE id = $1",
}


def usage():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime, u.ru_nvcsw + u.ru_nivcsw


async def call(pool, statement, rng):
    if statement == "select1":
        value = rng.randrange(1_000_000)
        got = await pool.fetchval(STATEMENTS[statement], value)
        if got != value:
            raise RuntimeError(f"wrong value (asyncpg): {got} for {value}")
    else:
        key = rng.randrange(200_000) + 1
        row = await pool.fetchrow(STATEMENTS[statement], key)
        if row is None or row[0] != key:
            raise RuntimeError(f"wrong row (asyncpg) for id {key}")


async def drive(pool, statement, callers, seconds):
    end = time.perf_counter() + seconds
    latencies = []

    async def caller(index):
        rng = random.Random(index * 7919 + 1)
        mine = []
        while True:
            begin = time.perf_counter()
            if begin >= end:
                break
            await call(pool, statement, rng)
            mine.append(time.perf_counter() - begin)
        latencies.extend(mine)

    start = time.perf_counter()
    await asyncio.gather(*(caller(i) for i in range(callers)))
    return latencies, time.perf_counter() - start


async def main(args):
    pool = await asyncpg.create_pool(host=args.host, port=args.port, user=args.user, database=args.database,
                                     min_size=args.connections, max_size=args.connections)
    try:
        # Warm: every connection open, the statement prepared on each.
        await drive(pool, args.statement, min(args.callers, args.connections), 0.5)
        cpu0, switches0 = usage()
        latencies, elapsed = await drive(pool, args.statement, args.callers, args.seconds)
        cpu1, switches1 = usage()
    finally:
        await pool.close()
    latencies.sort()

    def at(p):
        return latencies[int((len(latencies) - 1) * p)] if latencies else 0.0

    json.dump({"operations": len(latencies), "seconds": elapsed, "p50": at(0.5), "p99": at(0.99),
               "maximum": latencies[-1] if latencies else 0.0, "cpu": cpu1 - cpu0,
               "switches": switches1 - switches0,
               "versions": {"asyncpg": asyncpg.__version__, "uvloop": uvloop.__version__,
                            "python": sys.version.split()[0]}}, sys.stdout)
    print()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", required=True, help="the server's socket folder (or a host name)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--user", required=True)
    parser.add_argument("--database", required=True)
    parser.add_argument("--statement", choices=sorted(STATEMENTS), required=True)
    parser.add_argument("--callers", type=int, required=True, help="C: concurrent callers")
    parser.add_argument("--connections", type=int, required=True, help="P: the pool's size")
    parser.add_argument("--seconds", type=float, required=True)
    arguments = parser.parse_args()
    uvloop.run(main(arguments))
