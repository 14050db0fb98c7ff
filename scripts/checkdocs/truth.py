"""The user pages' claims: sections cited, benchmark figures, and the classes of claim that were once wrong."""

import os
import re

from .pages import *  # noqa: F401,F403 (the page readers and their constants)
from .pages import ROOT
from . import report
from .report import check, problem

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
        report.counted[0] += 1


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
