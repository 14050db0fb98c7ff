#!/usr/bin/env python3
"""Checks that the documentation names only what exists, and documents what exists.

Usage: check-docs.py --server target/debug/ticketing-server

Read: README.md, CONTRIBUTING.md and docs/*.md ("the docs"). Checked:

  flags      every `--flag` in the docs is a flag of one of the project's
             programs (the server, its gen-certs, the `ticketing` CLI,
             ticketing-bench, ticketing-verify, ticketing-sim, the ticket-sale demo and its
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

The checks below read "the user pages": the docs above, examples/README.md,
the bindings' READMEs (they ship in the packages) and deploy/server-README.md
(it ships in the server tarball):

  sections   every relative link resolves, and so does its #anchor (mdBook's
             heading ids); every `FILE.md, "Section"` citation names a
             heading of FILE exactly (or a heading that starts with it and
             goes on with ":" or " ("); every `"Section" below/above` one of
             the same page; every `FILE.md §N` a numbered heading; and every
             `docs/FILE.md#anchor` in the code a heading.
  figures    every benchmark figure quoted outside the report (a ratio `N×`,
             a failover time in seconds, and a rate in pairs/s, hand-overs/s
             or grants/s where its paragraph names the benchmark) is a figure
             of BENCHMARKS.md, rounded at most to the digits quoted. docs/benchmark-report.md (BENCHMARKS.md itself)
             and the appendices of earlier runs (HISTORY_PAGES) are exempt.
  durable    a paragraph that says the state is in memory only or is lost on
             a restart also names durable mode (`--data-dir`).
  indeterminate  no paragraph says an Indeterminate grant returns at its
             lease end without the client's 5 s release window.
  team-speak no phrase of TEAM_SPEAK (how the project is run, not how it is
             used: "this round", "gap (1)", "Decision 11", "the test machine").
  registries every `pip install`, `gem install` and `npm i`/`npm install` of
             the package `ticketing`, and every version pin of it, names where
             it comes from (a file, an index, a source or a registry): the
             public registries' `ticketing` is another project.
  install    README.md and every language page link docs/install.md before
             any other page in their install section.
  exit codes every exit code of the `ticketing` CLI (its `mod code`) and of
             ticketing-server (ExitCode::from, the EXIT_* constants, the data
             dir's exit_code, ExitCode::FAILURE, clap's usage error 2) is in
             docs/errors.md.

--static-only runs only the checks that need no built program (everything
but flags, env and metrics): about a second, no server binary needed.

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
    "--package", "--manifest-path", "--profile", "--dest-dir", "--cfg",
    # npm / node / pip / gem / python / ruby
    "--no-save", "--no-audit", "--no-fund", "--ignore-scripts", "--pack-destination", "--silent",
    "--loglevel", "--test-reporter", "--local", "--no-document", "--strict", "--install-dir", "--upgrade",
    "--user", "--index-url", "--extra-index-url", "--find-links", "--no-index", "--list-undoc",
    "--fail-on-warning", "--markup", "--no-save", "--no-cache", "--optional", "--server", "--only-binary",
    "--omit", "--registry", "--source", "--clear-sources",
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


# --- the user pages (the checks after the program-based ones) ---------------------------

# Pages users read besides README.md, CONTRIBUTING.md and docs/*.md: they ship
# in the packages (the bindings' READMEs, the server tarball's README).
EXTRA_USER_PAGES = ["examples/README.md", "bindings-python/README.md", "bindings-ruby/README.md",
                    "bindings-node/README.md", "bindings-node/npm/linux-x64-gnu/README.md",
                    "deploy/server-README.md"]
# BENCHMARKS.md included as a page, and the appendices that record earlier runs
# (their figures are history, each dated or tied to its commit there).
GENERATED_PAGES = {"docs/benchmark-report.md"}
HISTORY_PAGES = {"docs/performance-history.md", "docs/soak-runs.md"}

# Words about how the project is run, not about how it is used.
TEAM_SPEAK = [
    (r"\bthis round\b", "this round"),
    (r"\bround of work\b", "round of work"),
    (r"\bthe round before\b", "the round before"),
    (r"\bgoals?\b", "goal"),
    (r"\bgaps? \(\d+\)|\bgap \d+\b", "gap (N)"),
    (r"\bseed[- ]style\b|(?<![\w/])seeds/|\bseed documents?\b", "the seed"),
    (r"\bDecision \d+\b", "Decision N"),
    (r"\btest (machine|machines|VM)\b", "the test machine"),
    (r"\d s target\b|\btargets? (of|for) (this|the) (round|run)\b", "target"),
    (r"\bSPEC(\.md)?\b", "SPEC"),
    (r"§\s?\d+\.\d+", "a numbered subsection of another document"),
    (r"\baccess to GitHub\b", "access to GitHub"),
]

FAILOVER_WORDS = re.compile(r"failover|kill -9|new (?:serving )?leader|first grant|fast profile|another node leads", re.I)
SECONDS_FIGURE = re.compile(r"(?<![\d.])(\d+\.\d+)(?:\s*[–-]\s*(\d+\.\d+))? ?s\b")
RATIO_FIGURE = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)×")
RATE_FIGURE = re.compile(r"(?<![\d.])(\d{1,3}(?:[  ]\d{3})+|\d+) (?:pairs|hand-overs|grants)/s\b")


def user_pages():
    """README.md, CONTRIBUTING.md, docs/*.md and EXTRA_USER_PAGES: path -> text."""
    pages = docs()
    for rel in EXTRA_USER_PAGES:
        f = os.path.join(ROOT, rel)
        if os.path.exists(f):
            pages[rel] = open(f, encoding="utf-8").read()
    return pages


def prose(text):
    """The text outside fenced code blocks and HTML comments."""
    text = re.sub(r"^```.*?^```[^\n]*$", "", text, flags=re.S | re.M)
    return re.sub(r"<!--.*?-->", "", text, flags=re.S)


def paragraphs(text):
    """Paragraphs of prose (a table row is a paragraph of its own), whitespace joined."""
    out = []
    for block in re.split(r"\n\s*\n", prose(text)):
        lines = block.split("\n")
        if any(l.lstrip().startswith("|") for l in lines):
            out += [l for l in lines if l.strip()]
        else:
            out.append(" ".join(l.strip() for l in lines))
    return [p for p in out if p.strip()]


def mdbook_ids(text):
    """The ids mdBook gives the headings of `text` (duplicates get -1, -2, …)."""
    ids, seen = [], {}
    for h in headings(text):
        h = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", h)
        h = re.sub(r"[`*]", "", h)
        base = "".join(c.lower() if (c.isalnum() or c in "-_") else ("-" if c.isspace() else "") for c in h)
        n = seen.get(base, 0)
        ids.append(base if n == 0 else f"{base}-{n}")
        seen[base] = n + 1
    return ids


def norm_heading(h):
    h = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", h)
    h = re.sub(r"[`*]", "", h).strip()
    h = re.sub(r"^\d+\.\s*", "", h)
    return h.rstrip(".").strip().lower()


def names_heading(section, text):
    """Whether `section` is a heading of `text`: exactly, or the start of one
    that goes on with ':' or ' ('."""
    want = norm_heading(section)
    for h in (norm_heading(x) for x in headings(text)):
        if h == want or h.startswith(want + ":") or h.startswith(want + " ("):
            return True
    return False


def resolve_page(src, name):
    """The file a page name cited on page `src` means: next to it, then in docs/."""
    for cand in (os.path.normpath(os.path.join(os.path.dirname(src), name)), os.path.join("docs", name), name):
        if os.path.isfile(os.path.join(ROOT, cand)):
            return cand
    return None


def check_sections(pages, code):
    texts = dict(pages)
    # The pages of the site: a docs page that links another docs page not in
    # SUMMARY.md links a page the built site does not have.
    summary = pages.get("docs/SUMMARY.md", "")
    in_book = {"docs/" + t for t in re.findall(r"\]\(([^)#\s]+\.md)\)", summary)} | {"docs/SUMMARY.md"}

    def text_of(rel):
        if rel not in texts:
            texts[rel] = open(os.path.join(ROOT, rel), encoding="utf-8").read()
        return texts[rel]

    for src, text in sorted(pages.items()):
        body = prose(text)
        # Markdown links.
        for target in re.findall(r"\]\(([^)\s]+)\)", body):
            if re.match(r"[a-z]+:", target) or target.startswith("api/"):
                continue
            file, _, frag = target.partition("#")
            rel = os.path.normpath(os.path.join(os.path.dirname(src), file)) if file else src
            exists = os.path.exists(os.path.join(ROOT, rel))
            check(exists, f"{src}: link {target}: {file} does not exist")
            if src.startswith("docs/") and rel.startswith("docs/") and rel.endswith(".md"):
                check(rel in in_book, f"{src}: link {target}: {rel} is not a page of the site (docs/SUMMARY.md)")
            if exists and frag and rel.endswith(".md"):
                check(frag in mdbook_ids(text_of(rel)), f"{src}: link {target}: no heading #{frag} in {rel}")
        flat = re.sub(r"\s+", " ", body)
        # `page.md, "Section"` and `page.md "Section"` citations.
        for m in re.finditer(r'(?<![\w/.-])(?:docs/)?([a-z0-9-]+\.md)`?\)?,? "([^"]+)"', flat):
            rel = resolve_page(src, m.group(1))
            check(rel is not None, f'{src}: cites {m.group(1)}, which does not exist')
            if rel:
                check(names_heading(m.group(2), text_of(rel)), f'{src}: cites {m.group(1)}, "{m.group(2)}": no such section')
        # `"Section" below/above` on the same page.
        for m in re.finditer(r'"([^"]{3,80})" (?:below|above)\b', flat):
            check(names_heading(m.group(1), text), f'{src}: "{m.group(1)}" below/above: no such section on this page')
        # `page.md §N`.
        for m in re.finditer(r'(?<![\w/.-])(?:docs/)?([a-z0-9-]+\.md)`?\)? ?§ ?(\d+)', flat):
            rel = resolve_page(src, m.group(1))
            if rel:
                ok = any(re.match(r"%s[.\s]" % m.group(2), h) for h in headings(text_of(rel)))
                check(ok, f"{src}: cites {m.group(1)} §{m.group(2)}: no such section")
    # Anchors named in the code (error messages point users at them).
    for path, text in code:
        for m in re.finditer(r"docs/([a-z0-9-]+\.md)#([a-z0-9_-]+)", text):
            rel = "docs/" + m.group(1)
            ok = os.path.isfile(os.path.join(ROOT, rel)) and m.group(2) in mdbook_ids(text_of(rel))
            check(ok, f"{path}: names docs/{m.group(1)}#{m.group(2)}, which does not resolve")


def bench_figures():
    """The figures of BENCHMARKS.md: ratios, failover seconds, rates."""
    text = open(os.path.join(ROOT, "BENCHMARKS.md"), encoding="utf-8").read()
    ratios = {float(x) for x in re.findall(r"(\d+(?:\.\d+)?)×", text)}
    seconds = {float(x) for x in re.findall(r"(?:leader_s|first_grant_s)=(\d+\.\d+)", text)}
    for line in text.split("\n"):
        if line.startswith("| W3 ") or "--failover fast" in line:
            seconds |= {float(x) for x in re.findall(r"(\d+\.\d+)", line)}
    rates = {int(x) for x in re.findall(r"\bops_s=(\d+)", text)}
    rates |= {int(x) for x in re.findall(r"\b(\d+) grants/s", text)}
    rates |= {int(x.replace(" ", "")) for x in re.findall(r"(?<![\d.])(\d{1,3}(?: \d{3})+)(?![\d.])", text)}
    return ratios, seconds, rates


def quoted_as(q, values):
    """Whether the figure written `q` is one of `values`, rounded to q's digits."""
    if re.fullmatch(r"\d+", q.replace(" ", "").replace("\u202f", "")) and "." not in q:
        n = int(q.replace(" ", "").replace("\u202f", ""))
        zeros = len(str(n)) - len(str(n).rstrip("0")) if n else 0
        return any(v == n or (zeros and round(v, -zeros) == n) for v in values)
    digits = len(q.split(".")[1]) if "." in q else 0
    return any(abs(v - float(q)) <= 0.5 * 10 ** -digits + 1e-9 for v in values)


def check_figures(pages):
    ratios, seconds, rates = bench_figures()
    for src, text in sorted(pages.items()):
        if src in GENERATED_PAGES or src in HISTORY_PAGES:
            continue
        for par in paragraphs(text):
            for m in RATIO_FIGURE.finditer(par):
                check(quoted_as(m.group(1), ratios), f"{src}: the ratio {m.group(1)}× is not a ratio of BENCHMARKS.md")
            # A rate is a benchmark figure where the paragraph says so (a model's or an
            # A/B experiment's rate is not).
            quoted = re.search(r"BENCHMARKS|benchmark|ticketing-bench|\bW[1-7]\b", par)
            for m in (RATE_FIGURE.finditer(par) if quoted else ()):
                check(quoted_as(m.group(1), rates),
                      f"{src}: the rate {m.group(0)} is not a figure of BENCHMARKS.md")
            cells = par.split("|")
            row_is_failover = par.lstrip().startswith("|") and len(cells) > 2 and FAILOVER_WORDS.search(cells[1])
            for m in SECONDS_FIGURE.finditer(par):
                if not row_is_failover:
                    # A figure within a few words after a failover word, with nothing in
                    # between that makes it another duration (a lease's end across a
                    # failover is domain time; an election timeout is a setting).
                    before = par[max(0, m.start() - 40):m.start()]
                    words = list(FAILOVER_WORDS.finditer(before))
                    if not words or re.search(r"lease|tick|timeout|down|heal", before[words[-1].end():]):
                        continue
                for q in filter(None, (m.group(1), m.group(2))):
                    check(quoted_as(q, seconds),
                          f"{src}: the failover time {q} s is not a W3 figure of BENCHMARKS.md (quote it from there)")


def check_durable(pages):
    said = re.compile(r"in memory only|memory[- ]only|state is lost|forgets every lock|(?:state|everything) is kept in memory", re.I)
    for src, text in sorted(pages.items()):
        if src in GENERATED_PAGES or src in HISTORY_PAGES:
            continue
        for par in paragraphs(text):
            if said.search(par):
                check(re.search(r"durable|--data-dir|data_dir", par) is not None,
                      f"{src}: says the state is in memory only without durable mode (--data-dir): {par[:90]}…")


def check_indeterminate(pages):
    back = re.compile(r"\b(?:returns?|comes? back|is back|returned)\b[^.|;]{0,25}\blease end", re.I)
    for src, text in sorted(pages.items()):
        for par in paragraphs(text):
            for sentence in re.split(r"(?<=[.;])\s", par):
                if re.search(r"ndeterminate|INDETERMINATE", par) and back.search(sentence):
                    check("5 s" in par, f"{src}: an Indeterminate grant 'returns at lease end' without the "
                                        f"client's 5 s release window (docs/concepts.md#indeterminate): {sentence[:90]}…")


def check_team_speak(pages):
    for src, text in sorted(pages.items()):
        if src in GENERATED_PAGES:
            continue
        body = prose(text)
        for rx, name in TEAM_SPEAK:
            for m in re.finditer(rx, body, flags=re.I if name not in ("SPEC", "Decision N") else 0):
                line = body[: m.start()].count("\n") + 1
                problem(f"{src}: team-speak ({name}): '{m.group(0)}' near line {line}")
        global checks
        checks += 1


def check_registries(pages):
    install = re.compile(r"\b(pip3?|gem|npm) (?:install|i)\b([^\n|`]*)")
    for src, text in sorted(pages.items()):
        # Paragraphs of prose and table rows, and the lines of code blocks.
        lines = [l for l in text.split("\n") if install.search(l) and l not in prose(text)]
        for par in paragraphs(text) + lines:
            for m in install.finditer(par):
                tool, args = m.group(1), m.group(2)
                words = args.split()
                if not any(re.fullmatch(r"['\"]?ticketing(?:[=~<>!@].*)?['\"]?", w) for w in words):
                    continue
                where = {"pip": r"--index-url|\s-i\s|--find-links|--no-index|index-url =",
                         "pip3": r"--index-url|\s-i\s|--find-links|--no-index|index-url =",
                         "gem": r"--source|--local|--clear-sources|source \"",
                         "npm": r"--registry|registry="}[tool]
                # A warning about the public registries names what they hold instead.
                warning = re.search(r"\b(?:another|other) projects?\b", par)
                check(warning is not None or re.search(where, par) is not None,
                      f"{src}: `{tool} install ... ticketing` without an index, source, registry or file: "
                      f"the public registries' `ticketing` is another project ({par.strip()[:80]}…)")
        for m in re.finditer(r"ticketing\s*(~=|==|>=)\s*\d|\"~> \d|ticketing@[~^]?\d", text):
            # Its paragraph, or the code block it is in (with the line before the block).
            start = max(text.rfind("\n\n", 0, m.start()), text.rfind("\n- ", 0, m.start())) + 1
            ends = [e for e in (text.find("\n\n", m.end()), text.find("\n- ", m.end())) if e >= 0]
            par = text[start:min(ends) if ends else len(text)]
            named = r"index-url|--source|source \"|--registry|registry=|\.whl|\.gem\b|\.tgz|(?:another|other) projects?"
            check(re.search(named, par) is not None,
                  f"{src}: the pin '{m.group(0)}' resolves on the public registry (another project): name the index")


def check_install_links(pages):
    for src in ("README.md", "docs/python.md", "docs/ruby.md", "docs/node.md", "docs/libraries.md", "docs/client.md"):
        text = pages.get(src, "")
        sec = section(text, "Install") if src != "docs/libraries.md" else text
        if src == "docs/client.md" and not sec:
            sec = text
        links = [t for t in re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", prose(sec)) if not re.match(r"[a-z]+:", t)]
        check(bool(links) and links[0].endswith("install.md"),
              f"{src}: the first link of its install section is not docs/install.md ({links[:1]})")


def exit_codes():
    """The exit codes of the CLI and of the server, from their sources."""
    cli = open(os.path.join(ROOT, "ticketing-client", "src", "bin", "ticketing.rs"), encoding="utf-8").read()
    mod = re.search(r"mod code \{(.*?)\n\}", cli, re.S)
    cli_codes = {int(x) for x in re.findall(r"pub const \w+: u8 = (\d+);", mod.group(1) if mod else "")}
    server = set()
    for dirpath, _, files in os.walk(os.path.join(ROOT, "ticketing-server", "src")):
        for f in files:
            if not f.endswith(".rs"):
                continue
            t = open(os.path.join(dirpath, f), encoding="utf-8").read()
            server |= {int(x) for x in re.findall(r"ExitCode::from\((\d+)\)", t)}
            server |= {int(x) for x in re.findall(r"pub const EXIT_\w+: i32 = (\d+);", t)}
            for body in re.findall(r"fn exit_code\(&self\) -> u8 \{(.*?)\n    \}", t, re.S):
                server |= {int(x) for x in re.findall(r"=> (\d+),", body)}
            if "ExitCode::FAILURE" in t:
                server.add(1)
            if "ExitCode::SUCCESS" in t:
                server.add(0)
            if ".exit()" in t:
                server.add(2)  # clap: a usage error exits 2 (--help and --version 0)
    return cli_codes, server


def check_exit_codes(pages):
    cli_codes, server_codes = exit_codes()
    errors = pages.get("docs/errors.md", "")
    check(len(cli_codes) >= 10 and len(server_codes) >= 3, "found too few exit codes in the sources")
    srv = section(errors, "ticketing-server` exit codes")
    listed = {int(x) for x in re.findall(r"^\| (\d+) \|", srv, re.M)}
    for c in sorted(server_codes):
        check(c in listed, f"docs/errors.md: ticketing-server exits {c}, which its table does not list")
    cl = section(errors, "ticketing` CLI exit codes")
    listed = {int(x) for x in re.findall(r"(?<![\d.])(\d+)(?![\d.])", cl)}
    for c in sorted(cli_codes):
        check(c in listed, f"docs/errors.md: the ticketing CLI exits {c}, which its section does not list")


def static_checks(code):
    pages = user_pages()
    check_sections(pages, code)
    check_figures(pages)
    check_durable(pages)
    check_indeterminate(pages)
    check_team_speak(pages)
    check_registries(pages)
    check_install_links(pages)
    check_exit_codes(pages)


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
    # scripts/bench-peers parses its own options (its usage line is its header).
    for script in ("bench-peers", "simulate"):
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", default=os.path.join(ROOT, "target", "debug", "ticketing-server"))
    ap.add_argument("--static-only", action="store_true",
                    help="only the checks that need no built program (not flags, env, metrics)")
    args = ap.parse_args()
    pages = docs()
    code = code_text()
    if not args.static_only:
        program_checks(os.path.abspath(args.server), pages, code)

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

    static_checks(code)

    for p in problems:
        print(p)
    print(f"claims: {checks} checks, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
