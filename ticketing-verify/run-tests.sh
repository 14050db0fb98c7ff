#!/usr/bin/env bash
# The fault suite's CI run (called by scripts/test):
#   ticketing-verify/run-tests.sh [extra ticketing-verify args]
# Builds the release server and the suite once (scripts/release --cargo-build), then
#   1. the suite's own tests (checker rules, the fence on SQLite and PostgreSQL);
#   2. the `ci` profile on SQLite (fixed seeds, every fault at least once, 3 durable,
#      5 memory-mode nodes, a durable standalone server; every run with the `combined`
#      workload: exclusive, semaphore, read/write and multi-key clients; docs/verification.md);
#   3. the `ci` profile's 3-node run on a throw-away PostgreSQL (initdb + pg_ctl
#      on loopback; PostgreSQL is installed with apt when missing and we are root);
#   4. a rolling upgrade: a durable 3-node cluster started on an earlier release's
#      server ($TICKETING_UPGRADE_FROM, a commit of this repository; built once from
#      `git archive` into the shared target dir, kept in target/upgrade-from/) is
#      moved node by node to this one while the clients write, then its leader is
#      killed. Counted as skipped when the clone lacks that commit (a shallow clone).
# Seed: $TICKETING_VERIFY_SEED (default 1; the PostgreSQL run uses seed + 2).
# Histories: $TICKETING_VERIFY_DIR (default target/verify). Each ticketing-verify
# run ends with the checker's line violations=<n> grants=<n> faults=<n> fence_refusals=<n> indeterminate_held=<n>;
# this script's last line is "verify: <n> passed, <m> failed, <k> skipped"; exits non-zero on any failure.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
SEED=${TICKETING_VERIFY_SEED:-1}
HIST=${TICKETING_VERIFY_DIR:-$TARGET/verify}
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "PASS $*"; }
ko() { failed=$((failed + 1)); echo "FAIL $*"; }
skipped=0
finish() { echo "verify: $passed passed, $failed failed, $skipped skipped"; [ "$failed" -eq 0 ]; exit $?; }

# Every release-profile cargo run here shares target/release with scripts/release's
# build, so it runs with that build's environment (its linker: zig, against glibc
# 2.17, scripts/zig-cc): cargo's fingerprints include the linker, and a run
# without it would compile the whole tree again, and the next release build too.
if ! RELEASE_ENV_LINES=$(bash "$ROOT/scripts/release" --cargo-env); then
    ko "scripts/release --cargo-env (the release build's tools)"
    finish
fi
mapfile -t RELEASE_ENV <<<"$RELEASE_ENV_LINES"

# The earlier release the rolling upgrade starts from: built before the
# release build below, into the same target dir (the dependencies are
# compiled once for both; that build re-links this release's binaries over
# the ones the earlier source's build left in target/release).
UPGRADE_FROM=${TICKETING_UPGRADE_FROM:-16581bc3ae6af37865c6903991a5e41fb7d26045}
OLD_SERVER=$TARGET/upgrade-from/ticketing-server-${UPGRADE_FROM:0:12}
OLD_MISSING=""
if [ -x "$OLD_SERVER" ]; then
    echo "== the earlier release's server: $OLD_SERVER (built before)"
elif ! git -C "$ROOT" cat-file -e "$UPGRADE_FROM^{commit}" 2>/dev/null; then
    OLD_MISSING="this clone has no commit $UPGRADE_FROM (clone with its full history)"
else
    echo "== building the earlier release's server ($UPGRADE_FROM)"
    src=$TARGET/upgrade-from/src
    rm -rf "$src" && mkdir -p "$src"
    if git -C "$ROOT" archive "$UPGRADE_FROM" | tar -x -C "$src" &&
        (cd "$src" && env "${RELEASE_ENV[@]}" cargo build --release --locked -p ticketing-server --target-dir "$TARGET" 2>&1 | tail -n 2) &&
        cp "$TARGET/release/ticketing-server" "$OLD_SERVER.part" && mv "$OLD_SERVER.part" "$OLD_SERVER"; then
        rm -rf "$src"
    else
        ko "building the server of $UPGRADE_FROM"
    fi
fi

# The release build scripts/release makes (one package set, so scripts/test
# compiles the release server once and this finds it fresh).
echo "== scripts/release --cargo-build (the release server, the suite)"
if ! bash "$ROOT/scripts/release" --cargo-build 2>&1 | tail -n 3; then
    ko "build"
    finish
fi

# --- a throw-away PostgreSQL -------------------------------------------------------
PG_DIR=""
PG_CTL=""
RUNAS=()
pg_bin() { ls -d /usr/lib/postgresql/*/bin/"$1" 2>/dev/null | sort -V | tail -n 1; }
pg_stop() {
    if [ -n "$PG_DIR" ] && [ -n "$PG_CTL" ]; then
        "${RUNAS[@]}" "$PG_CTL" -D "$PG_DIR/data" -m immediate -w stop >/dev/null 2>&1
        rm -rf "$PG_DIR"
    fi
}
trap pg_stop EXIT
pg_start() {
    if [ -z "$(pg_bin initdb)" ]; then
        [ "$(id -u)" -eq 0 ] || { echo "PostgreSQL is not installed (apt-get install postgresql)"; return 1; }
        echo "== installing PostgreSQL with apt"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null 2>&1 ||
            { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null 2>&1; } ||
            { echo "apt-get install postgresql failed"; return 1; }
    fi
    local initdb port
    initdb=$(pg_bin initdb)
    PG_CTL=$(pg_bin pg_ctl)
    PG_DIR=$(mktemp -d /tmp/ticketing-verify-pg.XXXXXX)
    chmod 755 "$PG_DIR"
    if [ "$(id -u)" -eq 0 ]; then
        # PostgreSQL refuses to run as root: the cluster belongs to `postgres`.
        chown postgres:postgres "$PG_DIR"
        RUNAS=(runuser -u postgres --)
    fi
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    "${RUNAS[@]}" "$initdb" -D "$PG_DIR/data" -U verify --auth=trust -E UTF8 --no-sync >"$HIST-pg-initdb.log" 2>&1 ||
        { tail -n 20 "$HIST-pg-initdb.log"; return 1; }
    "${RUNAS[@]}" "$PG_CTL" -D "$PG_DIR/data" -l "$PG_DIR/data/server.log" \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $PG_DIR/data -c fsync=off" -w -t 60 start >/dev/null ||
        { "${RUNAS[@]}" tail -n 20 "$PG_DIR/data/server.log"; return 1; }
    PG_URL="postgres://verify@127.0.0.1:$port/postgres"
}
mkdir -p "$(dirname "$HIST")"
PG_URL=""
if pg_start; then
    echo "== PostgreSQL at $PG_URL"
else
    ko "a throw-away PostgreSQL could not be started"
fi

# --- 1. the suite's own tests ---------------------------------------------------------
echo "== cargo test --release -p ticketing-verify --lib --test checker"
log=$(mktemp)
# The PostgreSQL fence test is #[ignore]d without a database: run it when there is one.
include=()
if [ -n "$PG_URL" ]; then export TICKETING_VERIFY_PG_URL=$PG_URL; include=(-- --include-ignored); fi
env "${RELEASE_ENV[@]}" cargo test --release -p ticketing-verify --lib --test checker "${include[@]}" 2>&1 | tee "$log" | grep -E '^(test |test result)'
rc=${PIPESTATUS[0]}
p=$(grep -Eo '[0-9]+ passed' "$log" | awk '{s+=$1} END {print s+0}')
f=$(grep -Eo '[0-9]+ failed' "$log" | awk '{s+=$1} END {print s+0}')
k=$(grep -Eo '[0-9]+ ignored' "$log" | awk '{s+=$1} END {print s+0}')
passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + k))
[ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && ko "cargo test ticketing-verify"
rm -f "$log"

# --- 2. the ci profile on SQLite --------------------------------------------------------
verify() {
    "$TARGET/release/ticketing-verify" --server "$TARGET/release/ticketing-server" "$@"
}
if verify --profile ci --seed "$SEED" --dir "$HIST" "$@"; then
    ok "ci profile, SQLite, 3 durable + 5 memory-mode nodes + durable standalone, seed $SEED"
else
    ko "ci profile, SQLite, 3 durable + 5 memory-mode nodes + durable standalone, seed $SEED"
fi

# --- 3. the ci profile's 3-node run on PostgreSQL ------------------------------------------
if [ -n "$PG_URL" ]; then
    if verify --profile ci --nodes 3 --seed $((SEED + 2)) --db "$PG_URL" --dir "$HIST-pg" "$@"; then
        ok "ci profile, PostgreSQL, 3 nodes, seed $((SEED + 2))"
    else
        ko "ci profile, PostgreSQL, 3 nodes, seed $((SEED + 2))"
    fi
fi

# --- 4. a rolling upgrade from the earlier release -------------------------------------------
if [ -n "$OLD_MISSING" ]; then
    skipped=$((skipped + 1))
    echo "SKIP rolling upgrade: $OLD_MISSING"
elif [ ! -x "$OLD_SERVER" ]; then
    ko "rolling upgrade: no server of $UPGRADE_FROM"
elif cmp -s "$OLD_SERVER" "$TARGET/release/ticketing-server"; then
    ko "rolling upgrade: target/release/ticketing-server is still the earlier release's"
elif verify --nodes 3 --durable --upgrade-from "$OLD_SERVER" --seed "$SEED" --dir "$HIST-upgrade"; then
    ok "rolling upgrade of 3 durable nodes from ${UPGRADE_FROM:0:12}, seed $SEED"
else
    ko "rolling upgrade of 3 durable nodes from ${UPGRADE_FROM:0:12}, seed $SEED"
fi
finish
