#!/usr/bin/env bash
# Tests of the npm package `ticketing`, against the PACKED tarball installed
# into a temporary project (as a user gets it):
#   bindings-node/run-tests.sh [node --test args...]
# Installs node and npm with apt if they are missing, runs `npm ci`, builds
# the native module (`npm run build:debug`; TICKETING_NODE_BUILD=build for a
# release build), `npm pack`s, installs the tarball with `npm i` into a
# fresh project under a temporary directory, copies tests/ and examples/
# there and runs `node --test`. The tests spawn $TICKETING_SERVER_BIN
# (default <repo>/target/debug/ticketing-server, built here if missing).
# Exits non-zero on any failure; the runner's summary (ℹ pass N / ℹ fail N)
# is the last thing printed.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "== installing nodejs and npm with apt"
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nodejs npm
fi
command -v cargo >/dev/null || { echo "run-tests.sh: cargo not found (a Rust toolchain builds the native module)"; exit 1; }
echo "== node $(node --version), npm $(npm --version)"

if [ -z "${TICKETING_SERVER_BIN:-}" ]; then
    export TICKETING_SERVER_BIN="$ROOT/target/debug/ticketing-server"
    if [ ! -x "$TICKETING_SERVER_BIN" ]; then
        echo "== building the server ($TICKETING_SERVER_BIN missing)"
        (cd "$ROOT" && cargo build -q -p ticketing-server)
    fi
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/ticketing-node-tests.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

cd "$HERE"
echo "== npm ci"
npm ci --no-audit --no-fund --loglevel=error
echo "== npm run ${TICKETING_NODE_BUILD:-build:debug}"
npm run --silent "${TICKETING_NODE_BUILD:-build:debug}"
echo "== npm pack"
TGZ=$(npm pack --silent --pack-destination "$WORK" | tail -n 1)
echo "$TGZ"

echo "== npm i $TGZ (in a fresh project)"
mkdir "$WORK/project"
cd "$WORK/project"
npm init -y >/dev/null
npm i --no-audit --no-fund --loglevel=error "$WORK/$TGZ"
cp -r "$HERE/tests" "$HERE/examples" .

echo "== node --test"
export TICKETING_REPO="$ROOT"
export TICKETING_TSC="$HERE/node_modules/.bin/tsc"
export TICKETING_TYPE_ROOTS="$HERE/node_modules/@types"
node --test --test-reporter=spec --test-timeout=180000 "${@:-tests/}"
