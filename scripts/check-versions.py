#!/usr/bin/env python3
"""Checks that every manifest of the project carries ONE version: the
workspace version of /Cargo.toml. Prints it on success; exits 1 naming every
manifest that disagrees (scripts/release runs this first)."""
import json
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    root = tomllib.loads((ROOT / "Cargo.toml").read_text())
    version = root["workspace"]["package"]["version"]
    problems = []

    def expect(what: str, found: object) -> None:
        if found != version:
            problems.append(f"{what}: version {found!r}, the workspace {version!r}")

    # Every crate of the workspace inherits it (or states the same).
    for member in root["workspace"]["members"]:
        manifest = ROOT / member / "Cargo.toml"
        pkg = tomllib.loads(manifest.read_text()).get("package", {})
        v = pkg.get("version")
        if v != {"workspace": True}:
            expect(str(manifest.relative_to(ROOT)), v)
    # Path dependencies of the workspace name the same version (a crate that
    # is never published, `publish = false`, needs none).
    for name, dep in root["workspace"].get("dependencies", {}).items():
        if isinstance(dep, dict) and "path" in dep:
            target = tomllib.loads((ROOT / dep["path"] / "Cargo.toml").read_text()).get("package", {})
            if target.get("publish") is False:
                continue
            expect(f"Cargo.toml [workspace.dependencies] {name}", dep.get("version"))

    # Python: maturin takes the version from Cargo (dynamic), or pyproject states it.
    project = tomllib.loads((ROOT / "bindings-python/pyproject.toml").read_text())["project"]
    if "version" in project:
        expect("bindings-python/pyproject.toml", project["version"])
    elif "version" not in project.get("dynamic", []):
        problems.append("bindings-python/pyproject.toml: neither a version nor a dynamic one")

    # Ruby.
    rb = (ROOT / "bindings-ruby/lib/ticketing/version.rb").read_text()
    m = re.search(r'VERSION\s*=\s*"([^"]+)"', rb)
    expect("bindings-ruby/lib/ticketing/version.rb", m.group(1) if m else None)

    # Node: the main package, its lock file and every platform package.
    main = json.loads((ROOT / "bindings-node/package.json").read_text())
    expect("bindings-node/package.json", main.get("version"))
    lock = json.loads((ROOT / "bindings-node/package-lock.json").read_text())
    expect("bindings-node/package-lock.json", lock.get("version"))
    expect("bindings-node/package-lock.json packages['']", lock.get("packages", {}).get("", {}).get("version"))
    platforms = sorted((ROOT / "bindings-node/npm").glob("*/package.json"))
    if not platforms:
        problems.append("bindings-node/npm/: no platform package")
    for p in platforms:
        expect(str(p.relative_to(ROOT)), json.loads(p.read_text()).get("version"))

    if problems:
        print("version mismatch:", *problems, sep="\n  ", file=sys.stderr)
        return 1
    print(version)
    return 0


if __name__ == "__main__":
    sys.exit(main())
