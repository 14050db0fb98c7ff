#!/usr/bin/env bash
# The bench's smoke test (scripts/test runs it): W1-W6 for 2 s on a
# standalone server and on a 3-node cluster (W3: 9 s), with the debug
# binaries `cargo build --workspace` leaves in target/debug. It checks that
# each run produced its line and the invariants (no error, 0 duplicate
# grants in the cross-client check with keys shared between clients, the W2
# fairness numbers present and every client granted, a W3 failover seen, W4
# filled, W5 every slot 0-3 used and at most 4 holders, W6 no stall) --
# never a timing threshold. A deliberately broken lock (the hidden
# `--system test-grant-all`, which grants everyone) must make the same
# check report duplicates (W1, W2, W5, W6), and multi-key locks taken one
# key at a time (the hidden `--system test-multilock`) must make W6 report
# a stall, so the checks are shown able to fail.
# Last line: "bench-smoke: N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/.."
T=${CARGO_TARGET_DIR:-$PWD/target}
BENCH=${TICKETING_BENCH_BIN:-$T/debug/ticketing-bench}
SERVER=${TICKETING_SERVER_BIN:-$T/debug/ticketing-server}
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "PASS $*"; }
bad() { failed=$((failed + 1)); echo "FAIL $*"; }
field() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1; }

for f in "$BENCH" "$SERVER"; do
    [ -x "$f" ] || { echo "missing $f (cargo build --workspace first)"; echo "bench-smoke: 0 passed, 1 failed"; exit 1; }
done

# check SYSTEM WORKLOAD LINE
check() {
    local line=$3 name="$1 $2"
    [ -n "$(field "$3" clients)" ] && name+=" clients=$(field "$3" clients)"
    if [ -z "$line" ]; then bad "$name: no output line"; return; fi
    if [ -n "$(field "$line" error)" ]; then bad "$name: $(field "$line" error)"; return; fi
    for k in ops_s p50_us p99_us; do
        [[ "$(field "$line" $k)" =~ ^[0-9]+$ ]] || { bad "$name: $k missing"; return; }
    done
    local dup fair
    dup=$(field "$line" dup_grants)
    fair='^[0-9]+\.[0-9]+$'

    # The cross-client check ran on holds of the run, and (several clients)
    # on keys more than one client held.
    if [ "$2" != W4 ]; then
        [ "$(field "$line" holds_checked)" -gt 0 ] 2>/dev/null || { bad "$name: no holds checked"; return; }
        if [ "$(field "$line" clients)" -gt 1 ] && ! [ "$(field "$line" shared_keys)" -gt 0 ]; then
            bad "$name: no key held by two clients"; return
        fi
    fi
    case $2 in
        W1)
            [ "$dup" = 0 ] || { bad "$name: dup_grants=$dup"; return; }
            [ "$(field "$line" pairs)" -gt 0 ] || { bad "$name: no pairs"; return; }
            [ "$(field "$line" errors)" = 0 ] || { bad "$name: errors=$(field "$line" errors)"; return; } ;;
        W2)
            [ "$dup" = 0 ] || { bad "$name: dup_grants=$dup"; return; }
            [[ "$(field "$line" fairness)" =~ $fair ]] || { bad "$name: fairness=$(field "$line" fairness)"; return; }
            [ "$(field "$line" min_grants)" -gt 0 ] || { bad "$name: a client was never granted"; return; }
            [ "$(field "$line" max_grants)" -ge "$(field "$line" min_grants)" ] || { bad "$name: max < min"; return; } ;;
        W5)
            [ "$dup" = 0 ] || { bad "$name: dup_grants=$dup (two holders on one slot)"; return; }
            [ "$(field "$line" errors)" = 0 ] || { bad "$name: errors=$(field "$line" errors)"; return; }
            [[ "$(field "$line" fairness)" =~ $fair ]] || { bad "$name: fairness=$(field "$line" fairness)"; return; }
            [ "$(field "$line" min_grants)" -gt 0 ] || { bad "$name: a client was never granted"; return; }
            [ "$(field "$line" slots_used)" = 4 ] || { bad "$name: slots_used=$(field "$line" slots_used) (slot_grants=$(field "$line" slot_grants))"; return; }
            [ "$(field "$line" slot_out_of_range)" = 0 ] || { bad "$name: a slot outside 0-3"; return; }
            [ "$(field "$line" max_holders)" -le 4 ] 2>/dev/null || { bad "$name: max_holders=$(field "$line" max_holders)"; return; } ;;
        W6)
            [ "$dup" = 0 ] || { bad "$name: dup_grants=$dup"; return; }
            [ "$(field "$line" errors)" = 0 ] || { bad "$name: errors=$(field "$line" errors)"; return; }
            [ "$(field "$line" stalls)" = 0 ] || { bad "$name: stalls=$(field "$line" stalls) longest_gap_ms=$(field "$line" longest_gap_ms)"; return; }
            [ "$(field "$line" grants)" -gt 0 ] 2>/dev/null || { bad "$name: no grant"; return; } ;;
        W3)
            [ "$dup" = 0 ] || { bad "$name: dup_grants=$dup"; return; }
            [[ "$(field "$line" leader_s)" =~ ^[0-9.]+$ ]] || { bad "$name: no new leader"; return; }
            [[ "$(field "$line" first_grant_s)" =~ ^[0-9.]+$ ]] || { bad "$name: no grant after the kill"; return; } ;;
        W4)
            [ "$(field "$line" held_keys)" = 2000 ] || { bad "$name: held_keys=$(field "$line" held_keys)"; return; }
            [ "$(field "$line" waiters)" = 1000 ] || { bad "$name: waiters=$(field "$line" waiters)"; return; }
            [[ "$(field "$line" rss_mb_after_fill)" =~ ^[0-9.]+(/[0-9.]+)*$ ]] || { bad "$name: no RSS"; return; } ;;
    esac
    ok "$name: $line"
}

run() {
    local system=$1 workloads=$2 out
    # 8 clients on 4 shared keys: they contend, so the check compares holds
    # of different clients back to back.
    out=$(timeout 300 "$BENCH" --system "$system" --smoke --workload "$workloads" --clients 1,8 --key-space 4 \
        --server-bin "$SERVER" 2>&1)
    echo "$out" | grep -v '^system=' | tail -n 20
    for w in ${workloads//,/ }; do
        local W=${w^^}
        local lines
        lines=$(echo "$out" | grep "^system=$system workload=$W ")
        if [ -z "$lines" ]; then bad "$system $W: no output line"; continue; fi
        while IFS= read -r l; do check "$system" "$W" "$l"; done <<<"$lines"
    done
}

run ticketing-standalone w1,w2,w4,w5,w6
run ticketing w1,w2,w3,w4,w5,w6

# The check can fail: a lock that grants everyone shows duplicates in W1
# (8 clients on 2 keys), W2, W5 (holders share slots) and W6.
out=$(timeout 60 "$BENCH" --system test-grant-all --smoke --workload w1,w2,w5,w6 --clients 8 --key-space 2 2>&1)
for W in W1 W2 W5 W6; do
    l=$(echo "$out" | grep "^system=test-grant-all workload=$W ")
    if [ -n "$l" ] && [ "$(field "$l" dup_grants)" -gt 0 ] 2>/dev/null; then
        ok "broken lock $W: duplicates reported (dup_grants=$(field "$l" dup_grants) overlaps=$(field "$l" overlaps))"
    else
        bad "broken lock $W: no duplicate reported: ${l:-$out}"
    fi
done

# The stall detector can fail: baskets in random key order on locks taken
# one key at a time deadlock until their 10 s wait ends.
out=$(timeout 60 "$BENCH" --system test-multilock --smoke --workload w6 2>&1)
l=$(echo "$out" | grep "^system=test-multilock workload=W6 ")
if [ -n "$l" ] && [ "$(field "$l" stalls)" -gt 0 ] 2>/dev/null; then
    ok "deadlocking multi-key lock W6: stall reported (stalls=$(field "$l" stalls) longest_gap_ms=$(field "$l" longest_gap_ms))"
else
    bad "deadlocking multi-key lock W6: no stall reported: ${l:-$out}"
fi

# Bad input: a clear error and exit 2, never a panic.
if out=$("$BENCH" --duration=-1 2>&1); then bad "bad --duration accepted"
elif echo "$out" | grep -q "must be seconds"; then ok "bad --duration refused"
else bad "bad --duration: $out"; fi

echo "bench-smoke: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
