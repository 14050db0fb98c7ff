#!/usr/bin/env python3
"""Checks every internal link of the built documentation site.

Usage: check-links.py SITE_DIR [--optional api/python ...]

For every page of the book (the *.html mdBook wrote at SITE_DIR's top level)
each relative href/src must name a file that exists in the site, and each
#fragment must name an id in that file (same-page fragments included).
Links under an --optional prefix (an API reference that was skipped) are not
checked. External links (a scheme such as https:, mailto:) are not fetched.
Exit 1 with one line per broken link; last line "links: N checked, M broken".
"""
import html.parser
import os
import sys
import urllib.parse


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.links = []
        self.ids = set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "a" and a.get("name"):
            self.ids.add(a["name"])
        for attr in ("href", "src"):
            if a.get(attr) is not None and tag in ("a", "img", "script", "link", "iframe"):
                self.links.append(a[attr])


_cache = {}


def parse(path):
    if path not in _cache:
        p = Page()
        with open(path, encoding="utf-8", errors="replace") as f:
            p.feed(f.read())
        _cache[path] = p
    return _cache[path]


def main(argv):
    if not argv:
        print(__doc__)
        return 2
    site = os.path.abspath(argv[0])
    optional = []
    rest = argv[1:]
    while rest:
        if rest[0] == "--optional" and len(rest) > 1:
            optional.append(rest[1].strip("/") + "/")
            rest = rest[2:]
        else:
            print(f"unknown argument {rest[0]}")
            return 2
    if not os.path.isfile(os.path.join(site, "index.html")):
        print(f"links: no site at {site} (index.html missing)")
        return 1
    # The book's own pages; mdBook's print.html repeats every page, so skip it.
    pages = sorted(
        f for f in os.listdir(site) if f.endswith(".html") and f not in ("print.html", "toc.html", "404.html")
    )
    checked = 0
    broken = []
    for name in pages:
        path = os.path.join(site, name)
        for link in parse(path).links:
            url = urllib.parse.urlsplit(link)
            if url.scheme or link.startswith("//") or link.startswith("javascript:"):
                continue
            checked += 1
            target = path if not url.path else os.path.normpath(os.path.join(os.path.dirname(path), urllib.parse.unquote(url.path)))
            rel = os.path.relpath(target, site)
            if any((rel + "/").startswith(o) or rel.startswith(o) for o in optional):
                continue
            if rel.startswith(".."):
                broken.append(f"{name}: {link} leaves the site (link a page of the book instead)")
                continue
            if os.path.isdir(target):
                target = os.path.join(target, "index.html")
            if not os.path.isfile(target):
                broken.append(f"{name}: {link} -> {rel} does not exist")
                continue
            if url.fragment and target.endswith(".html"):
                frag = urllib.parse.unquote(url.fragment)
                if frag not in parse(target).ids:
                    broken.append(f"{name}: {link} -> no id '{frag}' in {os.path.relpath(target, site)}")
    for b in broken:
        print(b)
    print(f"links: {checked} checked, {len(broken)} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
