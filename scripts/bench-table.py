#!/usr/bin/env python3
"""BENCHMARKS.md from the lines of one scripts/bench-peers run.

usage: bench-table.py RESULTS MACHINE  (RESULTS: ticketing-bench output lines)
"""
import sys

# (system, fsyncs before answering, column). Memory-mode rows do not compare
# with fsync'd ones: the table says which is which.
SYSTEMS = [
    ("ticketing", "no", "Ticketing 3 nodes"),
    ("ticketing-standalone", "no", "Ticketing standalone"),
    ("ticketing", "yes", "Ticketing 3 nodes durable"),
    ("ticketing-standalone", "yes", "Ticketing standalone durable"),
    ("etcd", "yes", "etcd 3 nodes"),
    ("zookeeper", "yes", "ZooKeeper 3 nodes"),
    ("redis", "no", "Redis 1 node"),
]
# What a line without `fsync=` (older runs) means.
FSYNC_DEFAULT = {"etcd": "yes", "zookeeper": "yes"}


def parse(path):
    runs = []
    for line in open(path):
        line = line.strip()
        if not line.startswith("system="):
            continue
        runs.append(dict(f.split("=", 1) for f in line.split() if "=" in f))
    return runs


def find(runs, system, workload, fsync=None, **extra):
    for r in runs:
        if fsync is not None and r.get("fsync", FSYNC_DEFAULT.get(system, "no")) != fsync:
            continue
        if r.get("system") == system and r.get("workload") == workload and all(r.get(k) == v for k, v in extra.items()):
            return r
    return None


def num(r, k):
    try:
        return float(r[k])
    except (TypeError, KeyError, ValueError):
        return None


def ms(us):
    return "—" if us is None else f"{us / 1000:.2f}"


def main():
    runs = parse(sys.argv[1])
    if not runs:
        sys.exit("bench-table.py: no result lines")
    machine = open(sys.argv[2]).read().strip().splitlines()
    out = []
    w = out.append
    w("# Benchmarks")
    w("")
    w("One run of `scripts/bench-peers` on one machine: every server and the load generator")
    w("share it, on loopback. Only the ratios within this one run mean anything; absolute")
    w("figures move up to 2x between runs on a shared machine. Workloads and fields:")
    w("[docs/benchmarks.md](docs/benchmarks.md).")
    w("")
    for m in machine:
        w(f"- {m}")
    w("")
    # The 1-minute load before the run (the runs themselves keep both cores busy).
    load = [m for m in machine if m.startswith("load")]
    try:
        busy = float(load[0].split("before the run:")[1].split()[0]) > 2.0
    except (IndexError, ValueError):
        busy = False
    if busy:
        w("**This run started while something else loaded the machine** (load average above its")
        w("2 cores): treat it as a smoke of the comparison, and re-run `scripts/bench-peers` on a")
        w("quiet machine before quoting any ratio.")
        w("")
    rows = [
        ("W1 C=1 pairs/s", "W1", {"clients": "1"}, "ops_s"),
        ("W1 C=1 acquire p50 / p99 ms", "W1", {"clients": "1"}, "lat"),
        ("W1 C=64 pairs/s", "W1", {"clients": "64"}, "ops_s"),
        ("W1 C=64 acquire p50 / p99 ms", "W1", {"clients": "64"}, "lat"),
        ("W2 16 on 1 key, hand-overs/s", "W2", {}, "ops_s"),
        ("W2 release→next grant p50 / p99 ms", "W2", {}, "lat"),
        ("W2 grants per client max/min", "W2", {}, "fair"),
        ("W3 kill -9 leader → new leader s", "W3", {"failover": None}, "leader_s"),
        ("W3 kill -9 leader → first grant s", "W3", {"failover": None}, "first_grant_s"),
        ("W3 Indeterminate / duplicate grants", "W3", {"failover": None}, "w3err"),
    ]
    w("| workload | " + " | ".join(name for _, _, name in SYSTEMS) + " |")
    w("|---|" + "---|" * len(SYSTEMS))
    w("| fsyncs before answering | " + " | ".join(f for _, f, _ in SYSTEMS) + " |")
    for label, wl, extra, field in rows:
        cells = []
        for sysname, fs, _ in SYSTEMS:
            ex = {k: v for k, v in extra.items() if v is not None}
            r = find(runs, sysname, wl, fsync=fs, **ex)
            if wl == "W3" and sysname == "ticketing":
                r = find(runs, sysname, wl, fsync=fs, failover="default", **ex)
            if r is None:
                cells.append("—")
            elif "error" in r:
                cells.append("error: " + r["error"].replace("_", " ")[:60])
            elif field == "ops_s":
                cells.append(f"{num(r, 'ops_s'):,.0f}".replace(",", " "))
            elif field == "lat":
                cells.append(f"{ms(num(r, 'p50_us'))} / {ms(num(r, 'p99_us'))}")
            elif field == "fair":
                cells.append(f"{r.get('max_grants')}/{r.get('min_grants')} ({r.get('fairness')})")
            elif field == "w3err":
                cells.append(f"{r.get('indeterminate')} / {r.get('dup_grants')}")
            else:
                cells.append(r.get(field, "—"))
        w(f"| {label} | " + " | ".join(cells) + " |")
    w("")
    fast = find(runs, "ticketing", "W3", failover="fast")
    if fast and "error" not in fast:
        w(f"Ticketing with `--failover fast` (W3, same run): new leader {fast.get('leader_s')} s, "
          f"first grant {fast.get('first_grant_s')} s, {fast.get('indeterminate')} Indeterminate, "
          f"{fast.get('dup_grants')} duplicate grants.")
        w("")
    w("## Ratios: Ticketing 3 nodes ÷ system (throughput; above 1 = Ticketing ahead)")
    w("")
    w("Each system against the Ticketing 3-node row of the same fsync column: memory")
    w("mode against Redis, durable mode against etcd and ZooKeeper (which fsync too).")
    w("")
    w("| workload | " + " | ".join(name for _, _, name in SYSTEMS[1:]) + " |")
    w("|---|" + "---|" * (len(SYSTEMS) - 1))
    for label, wl, extra in [("W1 C=1", "W1", {"clients": "1"}), ("W1 C=64", "W1", {"clients": "64"}),
                             ("W2 hand-overs", "W2", {})]:
        cells = []
        for sysname, fs, _ in SYSTEMS[1:]:
            base = find(runs, "ticketing", wl, fsync=fs, **extra)
            r = find(runs, sysname, wl, fsync=fs, **extra)
            b, v = num(base or {}, "ops_s"), num(r or {}, "ops_s")
            cells.append("—" if not b or not v else f"{b / v:.2f}×")
        w(f"| {label} | " + " | ".join(cells) + " |")
    w("")
    w("## Reading it")
    w("")
    w("- Every system runs on the same 2-core machine as the load generator; the 3-node")
    w("  systems run three servers on those 2 cores. The `load` line above says how busy")
    w("  the machine was (other builds ran beside this run when the load is above 2).")
    w("- Clients: ONE shared client per system and run (Ticketing's `TicketBroker`, one etcd")
    w("  gRPC channel, one ZooKeeper session, one multiplexed Redis connection); W1 C=64 is")
    w("  64 concurrent tasks on it. W1/W3 acquires of an own key wait at most 1 s.")
    w("- etcd: v3 lock API, one lease per client. ZooKeeper: ephemeral-sequential recipe")
    w("  (create, list, watch the predecessor). Redis: one node, no persistence, no")
    w("  replication; `SET NX PX` + compare-and-delete; W2 waits by spin-retrying `SET NX`,")
    w("  so its hand-overs are not FIFO. Ticketing and etcd/ZooKeeper replicate every grant")
    w("  to a majority before answering.")
    w("- W3 errors (not shown in the table, see the raw lines): the etcd client keeps")
    w("  sending some requests to the killed endpoint (fast `transport error`s, retried).")
    w("")
    w4 = find(runs, "ticketing", "W4")
    if w4 and "error" not in w4:
        w("## W4: memory and capacity (Ticketing 3 nodes)")
        w("")
        w(f"- filled {w4.get('held_keys')} held keys (wait 0, lease 250 s) at {w4.get('ops_s')} grants/s; "
          f"RSS per node (MB, node order): {w4.get('rss_mb_after_fill')}")
        w(f"- then {w4.get('waiters')} waiters queued: RSS {w4.get('rss_mb_with_waiters')}")
        w(f"- then {w4.get('connections')} client connections held on the leader (asked for "
          f"{w4.get('conns_target')}; opened gradually, stopping after 3 refusals in a row): "
          f"RSS {w4.get('rss_mb_with_conns')}")
        w("")
    w("## Raw lines")
    w("")
    w("```")
    for line in open(sys.argv[1]):
        if line.startswith("system="):
            w(line.rstrip())
    w("```")
    print("\n".join(out))


if __name__ == "__main__":
    main()
