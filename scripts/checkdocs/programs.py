"""flags, env, metrics: the checks that need the built programs (their --help, a running server)."""

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request

from .pages import ROOT, docs, section
from .report import check, problem

# Flags of tools outside the project that the docs tell the reader to run.
EXTERNAL_FLAGS = {
    # cargo / rustup / rustdoc
    "--release", "--workspace", "--all-targets", "--no-deps", "--locked", "--example", "--bin", "--test",
    "--lib", "--doc", "--features", "--no-default-features", "--exclude", "--no-fail-fast", "--check",
    "--all", "--path", "--version", "--help", "--offline", "--target-dir", "--quiet", "--target",
    "--package", "--manifest-path", "--profile", "--dest-dir", "--cfg",
    # npm / node / pip / gem / python / ruby
    "--no-save", "--no-audit", "--no-fund", "--ignore-scripts", "--pack-destination", "--silent",
    "--loglevel", "--test-reporter", "--local", "--no-document", "--strict", "--install-dir", "--upgrade",
    "--user", "--index-url", "--extra-index-url", "--find-links", "--no-index", "--list-undoc",
    "--fail-on-warning", "--markup", "--no-save", "--no-cache", "--optional", "--server", "--only-binary",
    "--omit", "--registry", "--source", "--clear-sources",
    # maturin (how the release builds the wheel: CONTRIBUTING.md)
    "--zig", "--compatibility",
    # systemctl
    "--now",
    # curl / openssl / shell / git / perf / misc
    "--proto", "--fail", "--silent", "--show-error", "--cacert", "--cert", "--key", "--data", "--max-time",
    "--depth", "--branch", "--pid", "--call-graph", "--noEmit", "--open",
    # arguments of the example commands the docs run under a lock
    "--full",
    # gem generate_index, sha256sum (docs/install.md)
    "--directory", "--ignore-missing",
    # this script (CONTRIBUTING.md)
    "--static-only",
}
# Crate names that look like metric names.
NOT_METRICS = {"ticketing_proto", "ticketing_client", "ticketing_server", "ticketing_verify", "ticketing_bench",
               "ticketing_python", "ticketing_node", "ticketing_ruby", "ticketing_fuzz"}


def run_help(cmd):
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        return out.stdout + out.stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        problem(f"cannot run {' '.join(cmd)}: {e}")
        return ""


def flags_of(text):
    return set(re.findall(r"(?<![\w-])(--[a-z][a-zA-Z0-9]*(?:-[a-zA-Z0-9]+)*)", text))


def env_of(text):
    return set(re.findall(r"\bTICKETING_[A-Z0-9]+(?:_[A-Z0-9]+)*\b", text))


def scrape_metrics(server):
    """Starts a standalone server on free loopback ports and returns its /metrics text."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    admin = s.getsockname()[1]
    s.close()
    proc = subprocess.Popen([server, "--listen", "127.0.0.1:0", "--admin-listen", f"127.0.0.1:{admin}"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=2) as r:
                    return r.read().decode()
            except OSError:
                if proc.poll() is not None:
                    break
                time.sleep(0.1)
        problem(f"no /metrics from {server} within 20 s")
        return ""
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def program_checks(server, pages, code):
    """flags, env and metrics: they need the built programs (their --help, a running server)."""
    bindir = os.path.dirname(server)
    # --- flags -------------------------------------------------------------
    server_help = run_help([server, "--help"])
    server_flags = flags_of(server_help) - {"--help", "--version", "--dir", "--nodes", "--hosts"}
    known = set(server_flags) | EXTERNAL_FLAGS
    helps = [server_help, run_help([server, "gen-certs", "--help"])]
    cli = os.path.join(bindir, "ticketing")
    for sub in ([], ["lock"], ["ping"], ["locks"]):
        helps.append(run_help([cli] + sub + ["--help"]))
    for prog in ("ticketing-bench", "ticketing-verify", "ticketing-sim", "ticket-sale-seller"):
        p = os.path.join(bindir, prog)
        if os.path.exists(p):
            helps.append(run_help([p, "--help"]))
        else:
            problem(f"{p} is not built (cargo build --workspace --all-targets builds it)")
    helps.append(run_help([sys.executable, os.path.join(ROOT, "examples", "ticket-sale", "demo"), "--help"]))
    # scripts/bench-peers, scripts/simulate and scripts/release parse their own options (their usage is their header).
    for script in ("bench-peers", "simulate", "release"):
        helps.append(open(os.path.join(ROOT, "scripts", script), encoding="utf-8").read().split("\nset ")[0])
    for h in helps:
        known |= flags_of(h)
    for path, text in pages.items():
        for f in sorted(flags_of(text)):
            check(f in known, f"{path}: flag {f} is not a flag of any program here")
    conf = pages.get("docs/configuration.md", "")
    table_flags = set()
    for line in (section(conf, "Flags") + section(conf, "Limits")).split("\n"):
        cells = line.split("|")
        if line.startswith("|") and len(cells) > 3:
            table_flags |= flags_of(cells[1] + cells[2])
    for f in sorted(table_flags):
        check(f in server_flags, f"docs/configuration.md: {f} in a table is not a ticketing-server flag")
    for f in sorted(server_flags):
        check(f in flags_of(conf), f"ticketing-server {f} is not documented in docs/configuration.md")

    # --- env ---------------------------------------------------------------
    codetext = "\n".join(t for _, t in code)
    env_known = set()
    for h in helps:
        env_known |= env_of(h)
    env_known |= env_of(codetext)
    for path, text in pages.items():
        for v in sorted(env_of(text)):
            check(v in env_known, f"{path}: environment variable {v} appears in no --help and no code")
    for f in sorted(server_flags - {"--config"}):
        var = "TICKETING_" + f[2:].upper().replace("-", "_")
        check(var in server_help, f"ticketing-server {f}: its variable {var} is not in --help")

    # --- metrics -----------------------------------------------------------
    scraped = scrape_metrics(server)
    served = set(re.findall(r"^# TYPE (ticketing_[a-z0-9_]+) (\w+)", scraped, re.M))
    metrics_rs = open(os.path.join(ROOT, "ticketing-server", "src", "metrics.rs"), encoding="utf-8").read()
    def cluster_kind(n):
        # A counter is registered through the `counter(&mut registry, "NAME", …)` helper.
        return "counter" if re.search(r'counter\(\s*&mut registry,\s*"' + n + '"', metrics_rs) else "gauge"
    cluster_only = {("ticketing_" + n, cluster_kind(n)) for n in re.findall(r'"(raft_[a-z_]+)"', metrics_rs)}
    served |= cluster_only
    names = set()
    for base, kind in served:
        if kind == "counter":
            names |= {base + "_total"}
        elif kind == "histogram":
            names |= {base, base + "_bucket", base + "_sum", base + "_count"}
        else:
            names.add(base)
    check(len(served) > 10, f"/metrics served only {len(served)} metrics")
    for path, text in pages.items():
        for m in sorted(set(re.findall(r"\bticketing_[a-z0-9_]+\b", text))):
            if m in NOT_METRICS or re.search(re.escape(m) + r"::", text) and m.count("_") == 1:
                continue
            check(m in names, f"{path}: metric {m} is not served by /metrics")
    mpage = pages.get("docs/metrics.md", "")
    for base, kind in sorted(served):
        wire = base + "_total" if kind == "counter" else base
        check(wire in mpage, f"metric {wire} is served but not on docs/metrics.md")
