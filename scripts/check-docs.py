#!/usr/bin/env python3
"""Checks that the documentation names only what exists, and documents what exists.

Usage: check-docs.py --server target/debug/ticketing-server

Read: README.md, CONTRIBUTING.md and docs/*.md ("the docs"). Checked:

  flags      every `--flag` in the docs is a flag of one of the project's
             programs (the server, its gen-certs, the `ticketing` CLI,
             ticketing-bench, ticketing-verify, the ticket-sale demo and its
             sellers: each one's --help) or of a tool the docs tell you to
             run (cargo, npm, pip, ...: EXTERNAL_FLAGS below); every flag of
             the configuration page's tables is a server flag; and every
             server flag in `ticketing-server --help` is on the configuration page.
  env        every TICKETING_* variable in the docs is in a --help above or
             in the project's code (not only in the docs).
  metrics    every ticketing_* metric name in the docs is served by /metrics
             (scraped from a started standalone server; the cluster-only
             ticketing_raft_* metrics come from manager/metrics.rs), and every
             served metric is on docs/metrics.md.
  errors     every `E <code>` in the docs is an ErrorCode of ticketing-proto,
             and every code is in docs/protocol.md or docs/cluster-protocol.md.
  citations  every `docs/FILE.md, "Section"` and `docs/FILE.md §N` in the
             code names a page that exists and a heading on it.
  links      every relative link of README.md and CONTRIBUTING.md names a file
             that exists, and each #anchor into a page a heading of it.
  snippets   in README.md and every docs page, every fenced code block is
             marked: `<!-- tested: FILE -->` on the line before it (a README
             block must then be exactly FILE, which scripts/test-doc-examples
             runs) or `<!-- excerpt -->`; output blocks are ```text.

Prints one line per problem and "claims: N checks, M problems"; exit 1 on a problem.
"""
import argparse
import glob
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))

# Flags of tools outside the project that the docs tell the reader to run.
EXTERNAL_FLAGS = {
    # cargo / rustup / rustdoc
    "--release", "--workspace", "--all-targets", "--no-deps", "--locked", "--example", "--bin", "--test",
    "--lib", "--doc", "--features", "--no-default-features", "--exclude", "--no-fail-fast", "--check",
    "--all", "--path", "--version", "--help", "--offline", "--target-dir", "--quiet", "--target",
    "--package", "--manifest-path", "--profile", "--dest-dir",
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
}
# Crate names that look like metric names.
NOT_METRICS = {"ticketing_proto", "ticketing_client", "ticketing_server", "ticketing_verify", "ticketing_bench",
               "ticketing_python", "ticketing_node", "ticketing_ruby", "ticketing_fuzz"}

problems = []
checks = 0


def problem(msg):
    problems.append(msg)


def check(ok, msg):
    global checks
    checks += 1
    if not ok:
        problem(msg)


def docs():
    files = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "CONTRIBUTING.md")]
    files += sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    return {os.path.relpath(f, ROOT): open(f, encoding="utf-8").read() for f in files if os.path.exists(f)}


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


def code_text():
    """Every source file of the project (not docs, not target/)."""
    exts = (".rs", ".py", ".rb", ".js", ".mjs", ".ts", ".sh", ".toml")
    out = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        rel = os.path.relpath(dirpath, ROOT)
        parts = rel.split(os.sep)
        if parts[0] in ("target", ".git", "docs", "node_modules") or "node_modules" in parts or "vendor" in parts:
            dirnames[:] = []
            continue
        for f in filenames:
            p = os.path.join(dirpath, f)
            if f.endswith(exts) or (rel in ("scripts", ".ci") or "demo" == f or f == "run"):
                if f.endswith(".md"):
                    continue
                try:
                    out.append((os.path.relpath(p, ROOT), open(p, encoding="utf-8").read()))
                except (UnicodeDecodeError, OSError):
                    pass
    return out


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


def section(text, heading):
    """The text of the markdown section whose heading contains `heading`."""
    m = re.search(r"^(#+) [^\n]*" + re.escape(heading) + r"[^\n]*\n", text, re.M)
    if not m:
        return ""
    level = len(m.group(1))
    rest = text[m.end():]
    end = re.search(r"^#{1,%d} " % level, rest, re.M)
    return rest[: end.start()] if end else rest


def headings(text):
    # Outside fenced code blocks only.
    out, fence = [], False
    for line in text.split("\n"):
        if line.startswith("```"):
            fence = not fence
        elif not fence and re.match(r"#+ ", line):
            out.append(re.sub(r"^#+ ", "", line).strip())
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", default=os.path.join(ROOT, "target", "debug", "ticketing-server"))
    args = ap.parse_args()
    server = os.path.abspath(args.server)
    bindir = os.path.dirname(server)
    pages = docs()
    alltext = "\n".join(pages.values())

    # --- flags -------------------------------------------------------------
    server_help = run_help([server, "--help"])
    server_flags = flags_of(server_help) - {"--help", "--version", "--dir", "--nodes", "--hosts"}
    known = set(server_flags) | EXTERNAL_FLAGS
    helps = [server_help, run_help([server, "gen-certs", "--help"])]
    cli = os.path.join(bindir, "ticketing")
    for sub in ([], ["lock"], ["ping"], ["locks"]):
        helps.append(run_help([cli] + sub + ["--help"]))
    for prog in ("ticketing-bench", "ticketing-verify", "ticket-sale-seller"):
        p = os.path.join(bindir, prog)
        if os.path.exists(p):
            helps.append(run_help([p, "--help"]))
        else:
            problem(f"{p} is not built (cargo build --workspace --all-targets builds it)")
    helps.append(run_help([sys.executable, os.path.join(ROOT, "examples", "ticket-sale", "demo"), "--help"]))
    # scripts/bench-peers and scripts/release parse their own options (their usage is their header).
    for script in ("bench-peers", "release"):
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
    code = code_text()
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
    metrics_rs = open(os.path.join(ROOT, "ticketing-server", "src", "manager", "metrics.rs"), encoding="utf-8").read()
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

    # --- error codes -------------------------------------------------------
    code_rs = open(os.path.join(ROOT, "ticketing-proto", "src", "frame", "code.rs"), encoding="utf-8").read()
    codes = set(re.findall(r'ErrorCode::\w+ => "([a-z_]+)"', code_rs))
    # The peer handshake writes a few codes of its own before any frame exists.
    peer_wire = open(os.path.join(ROOT, "ticketing-server", "src", "cluster", "wire", "handshake.rs"), encoding="utf-8").read()
    codes |= set(re.findall(r'"E ([a-z_]+)[:\\ ]', peer_wire))
    check(len(codes) >= 10, f"found only {len(codes)} ErrorCodes in ticketing-proto/src/frame/code.rs")
    for path, text in pages.items():
        for c in sorted(set(re.findall(r"`E ([a-z_]+)", text))):
            check(c in codes, f"{path}: error code {c} is not an ErrorCode of ticketing-proto")
    proto = pages.get("docs/protocol.md", "") + pages.get("docs/cluster-protocol.md", "")
    for c in sorted(codes):
        check(f"`{c}`" in proto or f"E {c}" in proto, f"error code {c} is in neither docs/protocol.md nor docs/cluster-protocol.md")

    # --- citations in the code ---------------------------------------------
    heads = {p: headings(t) for p, t in pages.items()}
    cite = re.compile(r'docs/([a-z0-9-]+\.md)(?:,|:)?\s*(?:"([^"\n]+)"|§\s*(\d+))?')
    for path, text in code:
        for m in cite.finditer(text):
            page = "docs/" + m.group(1)
            check(page in pages, f"{path}: cites {page}, which does not exist")
            if page not in pages:
                continue
            if m.group(2):
                want = m.group(2).strip().rstrip(".").lower()
                ok = any(want in h.lower() for h in heads[page])
                # A quoted phrase that is not a heading must at least be on the page.
                ok = ok or want in pages[page].lower()
                check(ok, f'{path}: cites {page}, "{m.group(2)}": no such section')
            elif m.group(3):
                n = m.group(3)
                check(any(re.match(r"%s[.\s]" % n, h) for h in heads[page]), f"{path}: cites {page} §{n}: no such section")

    # --- snippets ----------------------------------------------------------
    for path in ["README.md"] + sorted(p for p in pages if p.startswith("docs/")):
        text = pages.get(path, "")
        lines = text.split("\n")
        i = 0
        while i < len(lines):
            line = lines[i]
            m = re.match(r"^```(\S*)", line)
            if not m:
                i += 1
                continue
            lang = m.group(1)
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            body = "\n".join(lines[i + 1 : j]) + "\n"
            prev = lines[i - 1].strip() if i > 0 else ""
            if lang != "text":
                t = re.match(r"<!-- tested: (\S+) -->", prev)
                check(bool(t) or prev == "<!-- excerpt -->",
                      f"{path}:{i + 1}: a ```{lang} block that is neither `<!-- tested: FILE -->` nor `<!-- excerpt -->`")
                if t:
                    f = os.path.join(ROOT, t.group(1))
                    check(os.path.isfile(f), f"{path}:{i + 1}: tested by {t.group(1)}, which does not exist")
                    if os.path.isfile(f) and not t.group(1).startswith("scripts/"):
                        included = body.strip() == "{{#include ../%s}}" % t.group(1)
                        check(included or open(f, encoding="utf-8").read() == body,
                              f"{path}:{i + 1}: the block differs from {t.group(1)} (it must be exactly that file)")
            i = j + 1

    # --- links of the pages outside the site (README.md, CONTRIBUTING.md) ------------
    def slug(h):
        h = re.sub(r"[`*_]", "", h).strip().lower()
        return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", h))

    for path in ("README.md", "CONTRIBUTING.md"):
        text = re.sub(r"```.*?```", "", pages.get(path, ""), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            file, _, frag = target.partition("#")
            f = os.path.normpath(os.path.join(ROOT, os.path.dirname(path), file))
            check(os.path.exists(f), f"{path}: link {target}: {file} does not exist")
            if frag and f.endswith(".md") and os.path.isfile(f):
                check(frag in {slug(h) for h in headings(open(f, encoding="utf-8").read())},
                      f"{path}: link {target}: no heading #{frag} in {file}")

    for p in problems:
        print(p)
    print(f"claims: {checks} checks, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
