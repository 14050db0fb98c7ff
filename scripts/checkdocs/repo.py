"""The docs against the code: wire error codes, the code's citations of the docs, and code blocks."""

import os
import re

from .pages import ROOT, headings
from .report import check


def check_error_codes(pages):
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


def check_citations(pages, code):
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


def check_snippets(pages):
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
