"""Reading the project: the docs pages, the user pages, the code, and their prose, paragraphs and headings."""

import glob
import os
import re

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def docs():
    files = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "CONTRIBUTING.md")]
    files += sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    return {os.path.relpath(f, ROOT): open(f, encoding="utf-8").read() for f in files if os.path.exists(f)}


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
