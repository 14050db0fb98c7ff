#!/usr/bin/env bash
# Tests of the npm package `ticketing`, against the PACKED tarballs installed
# into a temporary project (as a user gets them):
#   bindings-node/run-tests.sh [node --test args...]
# Installs node and npm with apt if they are missing, runs `npm ci` (the
# type checker the tests use). The tarballs: with TICKETING_DIST=DIR
# (scripts/test: dist/ of scripts/release) the release's
# DIR/ticketing-<version>.tgz and DIR/ticketing-linux-x64-gnu-<version>.tgz,
# so the tests run against what ships; otherwise built from this source tree:
# the native module (`npm run build:debug`; TICKETING_NODE_BUILD=build for a
# release build), staged as the release does (scripts/stage-release.js) and
# `npm pack`ed. Installs both with `npm i` into a fresh project under a
# temporary directory, copies tests/ and examples/ there and runs `node --test`. The tests spawn $TICKETING_SERVER_BIN
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
DIST=${TICKETING_DIST:-}
if [ -z "$DIST" ]; then
    command -v cargo >/dev/null || { echo "run-tests.sh: cargo not found (a Rust toolchain builds the native module)"; exit 1; }
fi
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
npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
VERSION=$(node -p 'require("./package.json").version')
if [ -n "$DIST" ]; then
    TGZS=("$DIST/ticketing-linux-x64-gnu-$VERSION.tgz" "$DIST/ticketing-$VERSION.tgz")
    for t in "${TGZS[@]}"; do
        [ -f "$t" ] || { echo "run-tests.sh: $t is missing (run scripts/release)"; exit 1; }
    done
else
    echo "== npm run ${TICKETING_NODE_BUILD:-build:debug}"
    npm run --silent "${TICKETING_NODE_BUILD:-build:debug}"
    echo "== npm pack (the package and its platform package, staged as a release)"
    node scripts/stage-release.js "$WORK/stage" "$HERE/ticketing.node"
    (cd "$WORK/stage/linux-x64-gnu" && npm pack --silent --pack-destination "$WORK" >/dev/null)
    (cd "$WORK/stage/ticketing" && npm pack --silent --pack-destination "$WORK" >/dev/null)
    TGZS=("$WORK/ticketing-linux-x64-gnu-$VERSION.tgz" "$WORK/ticketing-$VERSION.tgz")
fi

echo "== npm i ${TGZS[*]} (in a fresh project)"
mkdir "$WORK/project"
cd "$WORK/project"
npm init -y >/dev/null
npm i --no-audit --no-fund --loglevel=error "${TGZS[@]}"
cp -r "$HERE/tests" "$HERE/examples" .

echo "== node --test"
export TICKETING_REPO="$ROOT"
export TICKETING_TSC="$HERE/node_modules/.bin/tsc"
export TICKETING_TYPE_ROOTS="$HERE/node_modules/@types"
node --test --test-reporter=spec --test-timeout=180000 "${@:-tests/}"
