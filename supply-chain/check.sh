#!/usr/bin/env bash
# The supply-chain check of docs/security.md, "Supply chain": installs
# cargo-deny if it is missing, lays out the committed RustSec snapshot where
# deny.toml's db-path points, and runs `cargo deny --offline check` on the
# workspace and on the separate fuzz/ workspace. No network needed except
# crates.io for the one-time install.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo-deny >/dev/null 2>&1; then
    [ -x "$HOME/.cargo/bin/cargo-deny" ] && export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo-deny >/dev/null 2>&1; then
    echo "installing cargo-deny (cargo install cargo-deny --locked)"
    # Its own target dir, so the workspace's build cache is not touched.
    CARGO_TARGET_DIR="${TMPDIR:-/tmp}/cargo-deny-build" cargo install cargo-deny --locked
    rm -rf "${TMPDIR:-/tmp}/cargo-deny-build"
fi
# deny.toml: db-path = "target/advisory-db" (relative to deny.toml).
db=$(bash supply-chain/advisory-db target/advisory-db)
echo "advisory db: $db"
# cargo deny reads `cargo metadata`, which needs every crate's manifest:
# fetch them (crates.io) first; a no-op when they are already there. Not
# --locked: fuzz/Cargo.lock may lag behind a dependency change of the server.
cargo fetch -q
cargo fetch -q --manifest-path fuzz/Cargo.toml
status=0
echo "--- workspace"
cargo deny --offline check || status=1
echo "--- fuzz/"
cargo deny --offline --manifest-path fuzz/Cargo.toml --config deny.toml check || status=1
exit $status
