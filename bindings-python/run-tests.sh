#!/usr/bin/env bash
# Tests of the Python package in a (fresh or reused) virtualenv:
#   bindings-python/run-tests.sh VENV_DIR [pytest args..., default: tests]
# Creates VENV_DIR with python3 -m venv, installs pytest, mypy and the
# package, runs mypy --strict on the examples (examples/python) and the
# package, stubtest on the native module, then pytest. The package:
# - with TICKETING_DIST=DIR (scripts/test: dist/ of scripts/release), the
#   release wheel from DIR (pip install --no-index --find-links DIR), so
#   the tests run against what ships;
# - otherwise built from this source tree (pip install ./bindings-python,
#   maturin with cargo; needs a Rust toolchain).
# The tests spawn $TICKETING_SERVER_BIN (default <repo>/target/debug/ticketing-server,
# built here with cargo if missing). Exits non-zero on any failure.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
VENV=${1:?usage: run-tests.sh VENV_DIR [pytest args...]}
shift
PY=${PYTHON:-python3}

command -v "$PY" >/dev/null || { echo "run-tests.sh: $PY not found (apt-get install python3 python3-venv)"; exit 1; }
DIST=${TICKETING_DIST:-}
if [ -z "$DIST" ]; then
    command -v cargo >/dev/null || { echo "run-tests.sh: cargo not found (a Rust toolchain is needed to build the package)"; exit 1; }
fi

echo "== virtualenv $VENV"
"$PY" -m venv "$VENV"
VPY="$VENV/bin/python"
export PATH="$VENV/bin:$PATH"   # the maturin build hook runs `maturin` from PATH
"$VPY" -m pip install -q --upgrade pip
"$VPY" -m pip install -q 'pytest>=7' 'pytest-timeout>=2' 'mypy>=1.0'

if [ -n "$DIST" ]; then
    VERSION=$(python3 "$ROOT/scripts/check-versions.py")
    WHEEL=$(ls "$DIST"/ticketing-"$VERSION"-cp39-abi3-*.whl 2>/dev/null | head -n 1)
    [ -n "$WHEEL" ] || { echo "run-tests.sh: no ticketing-$VERSION abi3 wheel in $DIST (run scripts/release)"; exit 1; }
    echo "== pip install $WHEEL (the release wheel)"
    "$VPY" -m pip install -q --force-reinstall --no-deps --no-index "$WHEEL"
else
    "$VPY" -m pip install -q 'maturin>=1.9.4,<2'
    echo "== pip install ./bindings-python"
    "$VPY" -m pip install -q --no-build-isolation --force-reinstall --no-deps "$HERE"
fi

if [ -z "${TICKETING_SERVER_BIN:-}" ]; then
    export TICKETING_SERVER_BIN="$ROOT/target/debug/ticketing-server"
    if [ ! -x "$TICKETING_SERVER_BIN" ]; then
        echo "== building the server ($TICKETING_SERVER_BIN missing)"
        (cd "$ROOT" && CARGO_TARGET_DIR="$ROOT/target" cargo build -q -p ticketing-server)
    fi
fi

echo "== mypy --strict"
# From a directory outside the source tree, so the installed package (with
# its py.typed and stubs) is what gets checked.
(cd "$ROOT/examples/python" && "$VENV/bin/mypy" --strict --cache-dir "$VENV/mypy-cache-examples" sync_example.py async_example.py)
(cd "$HERE/python" && "$VENV/bin/mypy" --strict --cache-dir "$VENV/mypy-cache-package" -p ticketing)
echo "== stubtest (the .pyi matches the compiled module)"
(cd "$VENV" && "$VPY" -m mypy.stubtest ticketing._native)

echo "== pytest"
cd "$HERE"
exec "$VENV/bin/pytest" -p no:cacheprovider --timeout 300 -ra "${@:-tests}"
