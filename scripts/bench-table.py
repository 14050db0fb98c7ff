#!/usr/bin/env python3
"""BENCHMARKS.md from the lines of one scripts/bench-peers run.

usage: bench-table.py RESULTS MACHINE [LOADS]
       bench-table.py --from BENCHMARKS.md   (re-render from the report's own raw lines)

RESULTS: ticketing-bench output lines; MACHINE: one fact a line; LOADS: the
load samples bench-peers took during the run. Everything in the output comes
from these inputs: commentary belongs in docs/benchmarks.md.
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
    ("etcd", "no", "etcd 3 nodes no fsync"),
    ("zookeeper", "yes", "ZooKeeper 3 nodes"),
    ("redis", "no", "Redis 1 node"),
]
# What a line without `fsync=` (runs before the field existed) means.
FSYNC_DEFAULT = {"etcd": "yes", "zookeeper": "yes"}

RAW_START = "```text"


def parse_lines(lines):
    runs = []
    for line in lines:
        line = line.strip()
        if not line.startswith("system="):
            continue
        runs.append(dict(f.split("=", 1) for f in line.split() if "=" in f))
    return runs


def from_report(path):
    """The machine facts, raw lines and load samples stored in a BENCHMARKS.md."""
    machine, raw, loads = [], [], []
    block = None
    seen_table = False
    for line in open(path):
        s = line.rstrip("\n")
        if s.startswith("```"):
            block = None if block else ("loads" if "load" in s else "raw")
            continue
        if block == "raw":
            raw.append(s)
        elif block == "loads":
            loads.append(s)
        elif s.startswith("|"):
            seen_table = True
        elif s.startswith("- ") and not seen_table and ":" in s:
            machine.append(s[2:])
    return raw, machine, loads


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


def dups(r):
    """Duplicate grants, or why there is no figure: lines from before the
    cross-client hold check (no `holds_checked`) did not record holds."""
    if "holds_checked" not in r:
        return "not recorded (older bench)"
    return f"{r.get('dup_grants')} in {r.get('holds_checked')} holds"


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--from":
        raw, machine, loads = from_report(sys.argv[2])
    elif len(sys.argv) in (3, 4):
        raw = [line.rstrip("\n") for line in open(sys.argv[1])]
        machine = open(sys.argv[2]).read().strip().splitlines()
        loads = open(sys.argv[3]).read().strip().splitlines() if len(sys.argv) == 4 else []
    else:
        sys.exit(__doc__.strip())
    raw = [line for line in raw if line.startswith("system=")]
    runs = parse_lines(raw)
    if not runs:
        sys.exit("bench-table.py: no result lines")
    out = []
    w = out.append
    w("# Benchmarks")
    w("")
    w("Written entirely by `scripts/bench-peers` from one run on one machine (every server and")
    w("the load generator share it, on loopback); do not edit it by hand. Only the ratios within")
    w("this one run mean anything. Workloads, fields, how to read this report, and where")
    w("Ticketing is ahead and behind: [docs/benchmarks.md](docs/benchmarks.md).")
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
        ("W1 C=64 duplicate grants", "W1", {"clients": "64"}, "dups"),
        ("W1 C=1 load generator CPU µs per pair", "W1", {"clients": "1"}, "client_cpu_us_per_pair"),
        ("W1 C=64 load generator CPU µs per pair", "W1", {"clients": "64"}, "client_cpu_us_per_pair"),
        ("W2 16 on 1 key, hand-overs/s", "W2", {}, "ops_s"),
        ("W2 release→next grant p50 / p99 ms", "W2", {}, "lat"),
        ("W2 grants per client max/min", "W2", {}, "fair"),
        ("W2 duplicate grants", "W2", {}, "dups"),
        ("W3 kill -9 leader → new leader s", "W3", {"failover": None}, "leader_s"),
        ("W3 kill -9 leader → first grant s", "W3", {"failover": None}, "first_grant_s"),
        ("W3 Indeterminate", "W3", {"failover": None}, "indeterminate"),
        ("W3 duplicate grants", "W3", {"failover": None}, "dups"),
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
            elif field == "dups":
                cells.append(dups(r))
            else:
                cells.append(r.get(field, "—"))
        w(f"| {label} | " + " | ".join(cells) + " |")
    w("")
    fast = find(runs, "ticketing", "W3", failover="fast")
    if fast and "error" not in fast:
        w(f"Ticketing with `--failover fast` (W3, same run): new leader {fast.get('leader_s')} s, "
          f"first grant {fast.get('first_grant_s')} s, {fast.get('indeterminate')} Indeterminate, "
          f"duplicate grants: {dups(fast)}.")
        w("")
    w("## Ratios: Ticketing 3 nodes ÷ system (throughput; above 1 = Ticketing ahead)")
    w("")
    w("Each system against the Ticketing 3-node row of the same fsync column: memory")
    w("mode against Redis and etcd without fsync, durable mode against etcd and ZooKeeper.")
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
    w5 = find(runs, "ticketing", "W5", fsync="no")
    w6 = find(runs, "ticketing", "W6", fsync="no")
    if (w5 and "error" not in w5) or (w6 and "error" not in w6):
        w("## W5, W6: counted and multi-key grants (Ticketing 3 nodes)")
        w("")
        if w5 and "error" not in w5:
            w(f"- W5, {w5.get('clients')} clients on a semaphore of {w5.get('permits')}: {w5.get('ops_s')} grants/s, "
              f"acquire p50 / p99 {ms(num(w5, 'p50_us'))} / {ms(num(w5, 'p99_us'))} ms; grants per client max/min "
              f"{w5.get('max_grants')}/{w5.get('min_grants')} ({w5.get('fairness')}); grants per slot "
              f"{w5.get('slot_grants')}; most holders at once {w5.get('max_holders')}; duplicate grants "
              f"{w5.get('dup_grants')}")
        if w6 and "error" not in w6:
            w(f"- W6, {w6.get('clients')} clients, baskets of {w6.get('basket')} keys out of "
              f"{w6.get('basket_keys')} in random order: {w6.get('ops_s')} grants/s, acquire p50 / p99 "
              f"{ms(num(w6, 'p50_us'))} / {ms(num(w6, 'p99_us'))} ms; stalls {w6.get('stalls')} (longest wait "
              f"without a grant {w6.get('longest_gap_ms')} ms); duplicate grants {w6.get('dup_grants')}")
        w("")
    w4 = find(runs, "ticketing", "W4")
    if w4 and "error" not in w4:
        w("## W4: memory and capacity (Ticketing 3 nodes)")
        w("")
        lat = "" if num(w4, "p99_us") in (None, 0.0) else \
            f", acquire p50 / p99 {ms(num(w4, 'p50_us'))} / {ms(num(w4, 'p99_us'))} ms"
        w(f"- filled {w4.get('held_keys')} held keys (wait 0, lease 250 s) at {w4.get('ops_s')} grants/s{lat}; "
          f"RSS per node (MB, node order): {w4.get('rss_mb_after_fill')}")
        w(f"- then {w4.get('waiters')} waiters queued: RSS {w4.get('rss_mb_with_waiters')}")
        w(f"- then {w4.get('connections')} client connections held on the leader (asked for "
          f"{w4.get('conns_target')}; opened gradually, stopping after 3 refusals in a row): "
          f"RSS {w4.get('rss_mb_with_conns')}")
        w("")
    if loads:
        w("## Load during the run")
        w("")
        w("The 1-minute load average every 10 s (`HH:MM:SS load`) and before every step (`step load=…`).")
        w("")
        w("```load")
        for line in loads:
            w(line)
        w("```")
        w("")
    w("## Raw lines")
    w("")
    w(RAW_START)
    for line in raw:
        w(line)
    w("```")
    print("\n".join(out))


if __name__ == "__main__":
    main()
