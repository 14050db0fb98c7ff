#!/usr/bin/env bash
# Browser tests of the console (/ui/): installs Debian's chromium and the
# pinned playwright-core (npm ci, cached under target/) when missing, builds
# nothing (uses target/debug/ticketing-server, or $TICKETING_SERVER_BIN), and
# runs console.test.cjs against a real 3-node cluster on loopback.
# Last line: "console: N passed, M failed[, K skipped]". A missing browser or
# package is counted as skipped, never as passed.
set -uo pipefail
cd "$(dirname "$0")"
HERE=$PWD
ROOT=$(cd ../.. && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
BIN=${TICKETING_SERVER_BIN:-$TARGET/debug/ticketing-server}
NODE_DIR=$TARGET/ui-tests-node

skip() { echo "SKIP console: $*"; echo "console: 0 passed, 0 failed, 1 skipped"; exit 0; }

if [ ! -x /usr/bin/chromium ] || ! command -v node >/dev/null 2>&1; then
    missing=()
    [ -x /usr/bin/chromium ] || missing+=(chromium)
    command -v node >/dev/null 2>&1 || missing+=(nodejs npm)
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO=sudo
    { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >/dev/null 2>&1 \
        || skip "cannot install ${missing[*]} with apt"
fi
[ -x /usr/bin/chromium ] || skip "no /usr/bin/chromium"
[ -x "$BIN" ] || { echo "FAIL console: no server binary at $BIN (cargo build first)"; echo "console: 0 passed, 1 failed"; exit 1; }

# node_modules cached under target/, reinstalled when the lock file changes.
mkdir -p "$NODE_DIR"
if ! cmp -s package-lock.json "$NODE_DIR/package-lock.json" || [ ! -d "$NODE_DIR/node_modules/playwright-core" ]; then
    cp package.json package-lock.json "$NODE_DIR/"
    (cd "$NODE_DIR" && npm ci --no-audit --no-fund --ignore-scripts >/dev/null 2>&1) || skip "npm ci of playwright-core failed"
fi
# The installed package is the pinned one (npm ci checked its integrity against the lock).
want=$(node -p "require('./package.json').devDependencies['playwright-core']")
have=$(node -p "require('$NODE_DIR/node_modules/playwright-core/package.json').version" 2>/dev/null || echo none)
[ "$want" = "$have" ] || { echo "FAIL console: playwright-core $have installed, $want pinned"; echo "console: 0 passed, 1 failed"; exit 1; }

exec node "$HERE/console.test.cjs" "$NODE_DIR/node_modules" "$BIN" "$TARGET"
