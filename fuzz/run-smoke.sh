#!/usr/bin/env bash
# A short bounded run of every fuzz target (called by scripts/test):
#   fuzz/run-smoke.sh [SECONDS per target, default 10]
# Needs a nightly toolchain (rustup toolchain install nightly) and cargo-fuzz
# (installed here with `cargo install cargo-fuzz` when missing). Without
# nightly every target is reported skipped and it exits 0. Prints one line
# per target: "fuzz <target>: ok (<execs> execs)", "fuzz <target>: FAILED"
# or "fuzz <target>: SKIPPED (<why>)", and last "fuzz: N passed, M failed,
# K skipped" (scripts/test adds it up); exits non-zero if any target failed.
# Long runs: docs/verification.md.
# The smoke builds without a sanitizer (`-s none`: the ASan build of the
# server's dependencies alone takes ~10 min on 2 cores; the code under test
# is safe Rust, where libFuzzer's panics and assertions do the checking);
# TICKETING_FUZZ_SANITIZER=address brings ASan back.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SECS=${1:-10}
SAN=${TICKETING_FUZZ_SANITIZER:-none}
TARGETS="decode_client decode_server session server_conn peer_handshake peer_frame leader"
# skip_all WHY: every target skipped (never counted as passed).
skip_all() {
    local n=0
    for t in $TARGETS; do echo "fuzz $t: SKIPPED ($1)"; n=$((n + 1)); done
    echo "fuzz: 0 passed, 0 failed, $n skipped"
    exit 0
}
if ! cargo +nightly --version >/dev/null 2>&1; then
    skip_all "no nightly toolchain: rustup toolchain install nightly"
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz (cargo install cargo-fuzz)"
    start=$(date +%s)
    cargo install cargo-fuzz --locked >/dev/null 2>&1 || cargo install cargo-fuzz >/dev/null 2>&1 || {
        skip_all "cargo install cargo-fuzz failed"; }
    echo "fuzz: cargo-fuzz installed in $(( $(date +%s) - start )) s"
fi
cd "$HERE"
echo "fuzz: building the targets"
if ! cargo +nightly fuzz build -O -s "$SAN" >build.log 2>&1; then
    tail -n 30 build.log
    n=0
    for t in $TARGETS; do echo "fuzz $t: FAILED (build)"; n=$((n + 1)); done
    echo "fuzz: 0 passed, $n failed, 0 skipped"
    exit 1
fi
rc=0
ok=0
bad=0
for t in $TARGETS; do
    mkdir -p "corpus/$t"
    log="run-$t.log"
    if cargo +nightly fuzz run -O -s "$SAN" "$t" "corpus/$t" "seeds/$t" -- -max_total_time="$SECS" -rss_limit_mb=2048 >"$log" 2>&1; then
        execs=$(grep -Eo 'Done [0-9]+ runs' "$log" | grep -Eo '[0-9]+' | tail -n 1)
        echo "fuzz $t: ok (${execs:-?} execs in ${SECS} s)"
        ok=$((ok + 1))
    else
        rc=1
        bad=$((bad + 1))
        echo "fuzz $t: FAILED"
        grep -E -A 20 'panicked|ERROR|SUMMARY' "$log" | head -n 40
    fi
done
echo "fuzz: $ok passed, $bad failed, 0 skipped"
exit $rc
