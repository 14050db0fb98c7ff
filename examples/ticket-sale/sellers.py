"""Where each language's seller comes from, whether it can run here, and how
to start it. Every seller takes the same arguments (see README.md):

    --addrs A,B,C --db URL --event KEY --name NAME --lease SECS --deadline SECS
    [--wait-start] [--pause-after-sales K] [--no-fence] [--basket K | --general N]
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
# The sale modes beyond one lock per event that each language's seller has.
MODES: Dict[str, Tuple[str, ...]] = {
    "rust": ("basket", "general"),
    "python": ("basket", "general"),
    "ruby": ("basket", "general"),
    "node": ("basket", "general"),
}

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


def _ok(argv: List[str], cwd: Optional[str] = None, env: Optional[Dict[str, str]] = None) -> Tuple[bool, str]:
    try:
        r = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
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
        # Release builds if there are any (the README's `cargo build --release`), else the
        # debug builds `scripts/test` leaves behind, else release.
        have_release = os.path.exists(os.path.join(self.target, "release", "ticketing-server"))
        have_debug = os.path.exists(os.path.join(self.target, "debug", "ticketing-server"))
        self.profile = "debug" if have_debug and not have_release else "release"
        self.python = os.environ.get("TICKET_SALE_PYTHON") or sys.executable
        self.node_dir = os.path.join(HERE, "node")
        # What the sellers' environment adds (GEM_HOME, NODE_PATH) when found in the fallbacks.
        self.env: Dict[str, str] = dict(os.environ)
        self._server: Optional[str] = None
        self._rust: Optional[str] = None
        self.built = False

    # -- the Rust parts: the server and the Rust seller ------------------------------------
    def _cargo_build(self, pkgs: List[str]) -> bool:
        if not shutil.which("cargo"):
            return False
        if self.profile == "release":
            args = ["--release"] + [x for p in pkgs for x in ("-p", p)]
        else:
            # Exactly what scripts/test builds, so that its debug builds are reused as they are
            # (other package sets unify features differently and rebuild much of the tree).
            args = ["--workspace", "--exclude", "ticketing-python", "--all-targets"]
        self.log(f"cargo build {' '.join(args)} (a no-op when up to date; the first time takes minutes)")
        return subprocess.run(["cargo", "build", "-q"] + args, cwd=ROOT).returncode == 0

    def _built(self, name: str) -> str:
        return os.path.join(self.target, self.profile, name)

    def server_bin(self) -> str:
        if self._server:
            return self._server
        path = os.environ.get("TICKETING_SERVER_BIN")
        if not path:
            if not self.built:
                self.built = True
                self._cargo_build(["ticketing-server"])
            path = self._built("ticketing-server")
        if not os.access(path, os.X_OK):
            raise SystemExit(f"demo: no ticketing-server at {path} (set TICKETING_SERVER_BIN or install cargo)")
        self._server = path
        return path

    def _rust_seller(self) -> Tuple[bool, str]:
        path = os.environ.get("TICKET_SALE_RUST_SELLER")
        if not path:
            if not shutil.which("cargo"):
                return False, "cargo not found"
            pkgs = ["ticket-sale"] + ([] if os.environ.get("TICKETING_SERVER_BIN") else ["ticketing-server"])
            self.built = True
            if not self._cargo_build(pkgs):
                return False, "cargo build failed"
            path = self._built("ticket-sale-seller")
        if not os.access(path, os.X_OK):
            return False, f"no seller binary at {path}"
        self._rust = path
        return True, ""

    # -- availability ---------------------------------------------------------------------
    def check(self, lang: str) -> Tuple[bool, str]:
        if lang == "rust":
            return self._rust_seller()
        if lang == "python":
            return self._python()
        if lang == "ruby":
            return self._ruby()
        if lang == "node":
            return self._node()
        return False, "unknown language"

    def _python(self) -> Tuple[bool, str]:
        mods = "import ticketing, sqlite3" + ("\ntry:\n import psycopg\nexcept ImportError:\n import psycopg2"
                                               if self.pg else "")
        ok, why = _ok([self.python, "-c", mods])
        if ok or os.environ.get("TICKET_SALE_PYTHON"):
            return ok, why
        # The README's virtualenv, then the one scripts/test builds.
        for venv in (os.path.join(ROOT, ".venv"), os.path.join(self.target, "py-venv")):
            py = os.path.join(venv, "bin", "python")
            if os.access(py, os.X_OK) and _ok([py, "-c", mods])[0]:
                self.python = py
                return True, ""
        return ok, why

    def _ruby(self) -> Tuple[bool, str]:
        if not shutil.which("ruby"):
            return False, "ruby not found"
        probe = ["ruby", "-e", "require 'ticketing'; require '" + ("pg" if self.pg else "sqlite3") + "'"]
        ok, why = _ok(probe, env=self.env)
        gems = os.path.join(self.target, "examples-gems")  # where examples/run-tests.sh installs the gem
        if ok or "GEM_HOME" in os.environ or not os.path.isdir(gems):
            return ok, why
        default = subprocess.run(["ruby", "-e", "print Gem.default_path.join(':')"], capture_output=True, text=True)
        env = dict(self.env, GEM_HOME=gems, GEM_PATH=gems + ":" + default.stdout)
        if _ok(probe, env=env)[0]:
            self.env = env
            return True, ""
        return ok, why

    def _node(self) -> Tuple[bool, str]:
        if not shutil.which("node"):
            return False, "node not found"
        probe = ["node", "-e", "require('ticketing'); require('" + ("pg" if self.pg else "better-sqlite3") + "')"]
        ok, why = _ok(probe, cwd=self.node_dir, env=self.env)
        mods = os.path.join(self.target, "examples-node", "node_modules")  # examples/run-tests.sh installs there
        if ok or "NODE_PATH" in os.environ or not os.path.isdir(mods):
            return ok, why
        env = dict(self.env, NODE_PATH=mods)
        if _ok(probe, cwd=self.node_dir, env=env)[0]:
            self.env = env
            return True, ""
        return ok, why

    def select(self, requested: Optional[List[str]], mode: Optional[str] = None) -> List[str]:
        """The languages to run (with `mode`: those whose seller has it).
        Requested and unavailable, or without the mode: a clear error."""
        wanted = requested or ALL_LANGUAGES
        if mode is not None:
            lacking = [lang for lang in wanted if mode not in MODES[lang]]
            if requested and lacking:
                raise SystemExit(f"demo: the {','.join(lacking)} seller(s) have no --{mode} mode")
            for lang in lacking:
                self.log(f"{lang} seller: no --{mode} mode; not run")
            wanted = [lang for lang in wanted if mode in MODES[lang]]
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
