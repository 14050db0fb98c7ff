#!/usr/bin/env bash
# The fault suite's CI run (called by scripts/test):
#   ticketing-verify/run-tests.sh [extra ticketing-verify args]
# Builds the release server and the suite once, then runs the `ci` profile
# (fixed seeds, every fault at least once, 3 and 5 nodes; docs/verification.md).
# Its last line is the checker's: violations=<n> grants=<n> faults=<n> fence_refusals=<n>.
# Seed: $TICKETING_VERIFY_SEED (default 1). Histories: $TICKETING_VERIFY_DIR
# (default target/verify). Exits non-zero on a violation or a failed run.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
echo "== cargo build --release -p ticketing-server -p ticketing-verify"
if ! cargo build --release -p ticketing-server -p ticketing-verify 2>&1 | tail -n 3; then
    echo "build failed"
    exit 1
fi
exec "$TARGET/release/ticketing-verify" --profile ci --seed "${TICKETING_VERIFY_SEED:-1}" \
    --server "$TARGET/release/ticketing-server" --dir "${TICKETING_VERIFY_DIR:-$TARGET/verify}" "$@"
