"""Where each language's seller comes from, whether it can run here, and how
to start it. Every seller takes the same arguments (see README.md):

    --addrs A,B,C --db URL --event KEY --name NAME --lease SECS --deadline SECS
    [--pause-file PATH] [--no-fence]
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Callable, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ALL_LANGUAGES = ["rust", "python", "ruby", "node"]

HINTS = {
    "rust": "needs cargo (a Rust toolchain): the demo builds examples/ticket-sale/rust itself",
    "python": "pip install ./bindings-python into the Python that runs the seller "
              "(TICKET_SALE_PYTHON=/path/to/venv/bin/python, default: the demo's own python3); "
              "PostgreSQL also needs: pip install 'psycopg[binary]'",
    "ruby": "cd bindings-ruby && rake gem && gem install --local pkg/ticketing-*.gem; "
            "apt-get install ruby-sqlite3 (and ruby-pg for PostgreSQL)",
    "node": "cd bindings-node && npm ci && npm run build && npm pack; then in examples/ticket-sale/node: "
            "npm install ../../../bindings-node/ticketing-*.tgz better-sqlite3@12 pg",
}


def _ok(argv: List[str], cwd: Optional[str] = None) -> Tuple[bool, str]:
    try:
        r = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, str(e)
    msg = (r.stderr or r.stdout).strip().splitlines()
    return r.returncode == 0, msg[-1] if msg else ""


class Languages:
    def __init__(self, workdir: str, pg: bool, log: Callable[[str], None]) -> None:
        self.workdir = workdir
        self.pg = pg
        self.log = log
        self.target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
        self.python = os.environ.get("TICKET_SALE_PYTHON") or sys.executable
        self.node_dir = os.path.join(HERE, "node")
        self._server: Optional[str] = None
        self._rust: Optional[str] = None
        self.built = False

    # -- the Rust parts: the server and the Rust seller ------------------------------------
    def _cargo_build(self, with_seller: bool) -> None:
        if self.built:
            return
        self.built = True
        if not shutil.which("cargo"):
            return
        pkgs = ["-p", "ticketing-server"] + (["-p", "ticket-sale"] if with_seller else [])
        self.log("cargo build --release " + " ".join(pkgs) + " (the first time takes a few minutes)")
        r = subprocess.run(["cargo", "build", "--release", "-q"] + pkgs, cwd=ROOT)
        if r.returncode != 0:
            raise RuntimeError("cargo build failed")

    def server_bin(self) -> str:
        if self._server:
            return self._server
        env = os.environ.get("TICKETING_SERVER_BIN")
        if env:
            path = env
        else:
            self._cargo_build(with_seller=False)
            path = os.path.join(self.target, "release", "ticketing-server")
        if not os.access(path, os.X_OK):
            raise SystemExit(f"demo: no ticketing-server at {path} (set TICKETING_SERVER_BIN or install cargo)")
        self._server = path
        return path

    def _rust_seller(self) -> Tuple[bool, str]:
        env = os.environ.get("TICKET_SALE_RUST_SELLER")
        if env:
            path = env
        else:
            if not shutil.which("cargo"):
                return False, "cargo not found"
            need_server = not os.environ.get("TICKETING_SERVER_BIN")
            if need_server:
                self._cargo_build(with_seller=True)
            else:
                self.log("cargo build --release -p ticket-sale")
                if subprocess.run(["cargo", "build", "--release", "-q", "-p", "ticket-sale"], cwd=ROOT).returncode:
                    return False, "cargo build -p ticket-sale failed"
            path = os.path.join(self.target, "release", "ticket-sale-seller")
        if not os.access(path, os.X_OK):
            return False, f"no seller binary at {path}"
        self._rust = path
        return True, ""

    # -- availability ---------------------------------------------------------------------
    def check(self, lang: str) -> Tuple[bool, str]:
        if lang == "rust":
            return self._rust_seller()
        if lang == "python":
            mods = "import ticketing, sqlite3" + ("\ntry:\n import psycopg\nexcept ImportError:\n import psycopg2"
                                                   if self.pg else "")
            return _ok([self.python, "-c", mods])
        if lang == "ruby":
            if not shutil.which("ruby"):
                return False, "ruby not found"
            return _ok(["ruby", "-e", "require 'ticketing'; require '" + ("pg" if self.pg else "sqlite3") + "'"])
        if lang == "node":
            if not shutil.which("node"):
                return False, "node not found"
            return _ok(["node", "-e", "require('ticketing'); require('" + ("pg" if self.pg else "better-sqlite3")
                        + "')"], cwd=self.node_dir)
        return False, "unknown language"

    def select(self, requested: Optional[List[str]]) -> List[str]:
        """The languages to run. Requested and unavailable: a clear error."""
        wanted = requested or ALL_LANGUAGES
        status: Dict[str, Tuple[bool, str]] = {lang: self.check(lang) for lang in wanted}
        missing = [lang for lang in wanted if not status[lang][0]]
        for lang in missing:
            why = status[lang][1]
            self.log(f"{lang} seller unavailable ({why}): {HINTS[lang]}")
        if requested and missing:
            raise SystemExit(f"demo: requested language(s) not available: {','.join(missing)}")
        chosen = [lang for lang in wanted if status[lang][0]]
        if not chosen:
            raise SystemExit("demo: no seller language is available")
        return chosen

    def command(self, lang: str, args: List[str]) -> Tuple[List[str], str]:
        """argv and working directory of one seller."""
        if lang == "rust":
            assert self._rust
            return [self._rust] + args, ROOT
        if lang == "python":
            return [self.python, "-u", os.path.join(HERE, "python", "seller.py")] + args, ROOT
        if lang == "ruby":
            return ["ruby", os.path.join(HERE, "ruby", "seller.rb")] + args, ROOT
        if lang == "node":
            return ["node", os.path.join(self.node_dir, "seller.js")] + args, self.node_dir
        raise ValueError(lang)
