#!/usr/bin/env bash
# Tests of examples/: the ticket-sale demo end to end (a real 3-node cluster,
# real sellers, a real database), plus mypy --strict on the Python examples.
#
#   examples/run-tests.sh VENV_DIR
#
# VENV_DIR: a virtualenv with the Python package installed (scripts/test
# passes the one bindings-python/run-tests.sh built). Uses
# $TICKETING_SERVER_BIN and $TICKET_SALE_RUST_SELLER if set (scripts/test
# points them at its debug builds); otherwise the demo builds them.
# Ruby and Node: when bindings-ruby / bindings-node are in the checkout, the
# gem and the npm packages are installed into target/examples-gems and
# target/examples-node (reused while unchanged): with TICKETING_DIST=DIR
# (scripts/test: dist/ of scripts/release) the release's platform gem and npm
# tarballs from DIR; otherwise the source gem (bindings-ruby/pkg, `rake gem`
# if missing) and the npm packages staged and packed from bindings-node
# (its native module built first if missing),
# with sqlite3/pg for each; a language that still cannot run is a failure.
# Without those directories the language is reported as skipped.
#
# Prints PASS/FAIL/SKIP per case and, last, `examples: N passed, M failed, K skipped`
# (a case that could not run is skipped, never passed).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
VENV=${1:?usage: run-tests.sh VENV_DIR}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
LOGS=${TICKETING_TEST_LOGS:-$TARGET/test-logs}/examples
mkdir -p "$LOGS"
DEMO="$HERE/ticket-sale/demo"
passed=0
failed=0
skipped=0

pass() { passed=$((passed + 1)); echo "PASS $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; [ -n "${2:-}" ] && tail -n 40 "$2"; }
skip() { skipped=$((skipped + 1)); echo "SKIP $1"; }
root_do() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
apt_get() { root_do env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null; }

# --- prerequisites ---------------------------------------------------------------------
export TICKET_SALE_PYTHON="$VENV/bin/python"
if ! "$TICKET_SALE_PYTHON" -c 'import ticketing' 2>/dev/null; then
    echo "examples: $VENV has no ticketing package (run bindings-python/run-tests.sh $VENV first)"
fi
if [ -z "${TICKETING_SERVER_BIN:-}" ] || [ -z "${TICKET_SALE_RUST_SELLER:-}" ]; then
    echo "== cargo build -p ticketing-server -p ticket-sale"
    (cd "$ROOT" && cargo build -q -p ticketing-server -p ticket-sale) || fail "build"
    export TICKETING_SERVER_BIN=${TICKETING_SERVER_BIN:-$TARGET/debug/ticketing-server}
    export TICKET_SALE_RUST_SELLER=${TICKET_SALE_RUST_SELLER:-$TARGET/debug/ticket-sale-seller}
fi

# Ruby: the gem (bindings-ruby/pkg, built with `rake gem` if missing) installed into a private
# GEM_HOME, reinstalled when the .gem changes; sqlite3/pg from Debian.
if command -v ruby >/dev/null && [ -d "$ROOT/bindings-ruby" ]; then
    ruby -e 'require "sqlite3"; require "pg"' 2>/dev/null || apt_get ruby-sqlite3 ruby-pg \
        || echo "examples: apt-get install ruby-sqlite3 ruby-pg failed"
    export GEM_HOME="$TARGET/examples-gems"
    GEM_PATH="$GEM_HOME:$(env -u GEM_HOME -u GEM_PATH ruby -e 'print Gem.default_path.join(":")')"
    export GEM_PATH
    version=$(ruby -e 'load ARGV[0]; print Ticketing::VERSION' "$ROOT/bindings-ruby/lib/ticketing/version.rb" 2>/dev/null)
    gem="$ROOT/bindings-ruby/pkg/ticketing-$version.gem"
    [ -n "${TICKETING_DIST:-}" ] && gem="$TICKETING_DIST/ticketing-$version-x86_64-linux.gem"
    if [ -z "${TICKETING_DIST:-}" ] && { [ ! -f "$gem" ] || ! ruby -e 'require "ticketing"' 2>/dev/null; }; then
        # What building the gem's extension needs (as bindings-ruby/run-tests.sh installs it).
        need=()
        command -v rake >/dev/null || need+=(rake)
        [ -f "$(ruby -rrbconfig -e 'print RbConfig::CONFIG["rubyhdrdir"]')/ruby.h" ] || need+=(ruby-dev)
        command -v clang >/dev/null || need+=(clang)
        ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 || ls /usr/lib/*/libclang*.so* >/dev/null 2>&1 \
            || need+=(libclang-dev)
        if [ ${#need[@]} -gt 0 ]; then
            echo "== apt-get install ${need[*]}"
            root_do apt-get update -qq >/dev/null; apt_get "${need[@]}" || echo "examples: apt-get install ${need[*]} failed"
        fi
    fi
    if [ -z "${TICKETING_DIST:-}" ] && [ ! -f "$gem" ] && command -v rake >/dev/null; then
        echo "== rake gem (bindings-ruby)"
        (cd "$ROOT/bindings-ruby" && rake gem) >"$LOGS/rake-gem.log" 2>&1 || fail "rake gem" "$LOGS/rake-gem.log"
    fi
    if [ -f "$gem" ]; then
        # The files it carries (`rake gem` stamps every build anew; the files only change with the sources).
        sum=$(d=$(mktemp -d) && tar -xOf "$gem" data.tar.gz | tar -xz -C "$d" \
              && (cd "$d" && find . -type f | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-64); rm -rf "$d")
        if [ "$(cat "$GEM_HOME/.installed" 2>/dev/null)" != "$sum" ] || ! ruby -e 'require "ticketing"' 2>/dev/null; then
            echo "== gem install --local $gem (GEM_HOME=$GEM_HOME)"
            mkdir -p "$GEM_HOME"
            if (cd "$GEM_HOME" && CARGO_TARGET_DIR="${TICKETING_GEM_TARGET_DIR:-$TARGET/ruby-gem}" \
                    gem install --local --no-document "$gem") >"$LOGS/gem-install.log" 2>&1; then
                echo "$sum" >"$GEM_HOME/.installed"
            else
                fail "gem install $gem" "$LOGS/gem-install.log"
            fi
        fi
    fi
fi
# Node: the package (npm pack of bindings-node, built first if its native module is missing),
# better-sqlite3@12 and pg, installed into a private project found through NODE_PATH.
if command -v node >/dev/null && command -v npm >/dev/null && [ -d "$ROOT/bindings-node" ]; then
    NODEDIR="$TARGET/examples-node"
    mkdir -p "$NODEDIR/pack"
    export NODE_PATH="$NODEDIR/node_modules"
    # better-sqlite3 builds from source when no prebuilt binary can be fetched: headers of the local node.
    [ -f /usr/include/node/node.h ] && export npm_config_nodedir=/usr
    tgzs=()
    if [ -n "${TICKETING_DIST:-}" ]; then
        v=$(node -p 'require(process.argv[1]).version' "$ROOT/bindings-node/package.json")
        tgzs=("$TICKETING_DIST/ticketing-linux-x64-gnu-$v.tgz" "$TICKETING_DIST/ticketing-$v.tgz")
    else
        if [ ! -f "$ROOT/bindings-node/ticketing.node" ]; then
            echo "== npm ci && npm run build:debug (bindings-node)"
            (cd "$ROOT/bindings-node" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error && npm run --silent build:debug) \
                >"$LOGS/node-build.log" 2>&1 || fail "bindings-node build" "$LOGS/node-build.log"
        fi
        if [ -f "$ROOT/bindings-node/ticketing.node" ]; then
            # The package and its platform package, staged and packed as a release does.
            rm -rf "$NODEDIR/pack" && mkdir -p "$NODEDIR/pack"
            if node "$ROOT/bindings-node/scripts/stage-release.js" "$NODEDIR/pack/stage" "$ROOT/bindings-node/ticketing.node" \
                    >"$LOGS/npm-pack.log" 2>&1; then
                for d in linux-x64-gnu ticketing; do
                    t=$(cd "$NODEDIR/pack/stage/$d" && npm pack --silent --pack-destination "$NODEDIR/pack" 2>>"$LOGS/npm-pack.log" | tail -n 1)
                    [ -n "$t" ] && tgzs+=("$NODEDIR/pack/$t")
                done
            fi
        fi
    fi
    if [ ${#tgzs[@]} -gt 0 ]; then
        sum=$(cat "${tgzs[@]}" 2>/dev/null | sha256sum | cut -c1-64)
        ls "${tgzs[@]}" >/dev/null 2>&1 || sum=""
        if [ -z "$sum" ] || [ ${#tgzs[@]} -ne 2 ]; then
            fail "npm packages (bindings-node): ${tgzs[*]}" "$LOGS/npm-pack.log"
        elif [ "$(cat "$NODEDIR/.installed" 2>/dev/null)" != "$sum" ] || \
             ! (cd "$NODEDIR" && node -e "require('ticketing'); require('better-sqlite3'); require('pg')") 2>/dev/null; then
            echo "== npm install ${tgzs[*]} better-sqlite3@12 pg (in $NODEDIR)"
            [ -f "$NODEDIR/package.json" ] || echo '{"private": true}' >"$NODEDIR/package.json"
            if (cd "$NODEDIR" && npm install --no-audit --no-fund --loglevel=error better-sqlite3@12 pg "${tgzs[@]}") \
                    >"$LOGS/npm-install.log" 2>&1; then
                echo "$sum" >"$NODEDIR/.installed"
            else
                fail "npm install (node seller deps)" "$LOGS/npm-install.log"
            fi
        fi
    fi
fi
# PostgreSQL: the Python seller's driver (the server itself is installed by the demo if missing).
"$TICKET_SALE_PYTHON" -c 'import psycopg' 2>/dev/null || "$TICKET_SALE_PYTHON" -m pip install -q 'psycopg[binary]>=3.1' \
    >"$LOGS/pip-psycopg.log" 2>&1 || echo "examples: pip install psycopg failed (PostgreSQL run will skip python)"

# --- mypy on the Python examples --------------------------------------------------------------
if [ -x "$VENV/bin/mypy" ]; then
    if (cd "$HERE" && "$VENV/bin/mypy" --strict --cache-dir "$VENV/mypy-cache-examples" \
            python/sync_example.py python/async_example.py ticket-sale/python/seller.py) >"$LOGS/mypy.log" 2>&1 &&
       (cd "$HERE/ticket-sale" && "$VENV/bin/mypy" --strict --cache-dir "$VENV/mypy-cache-demo" \
            --scripts-are-modules demo cluster.py sale_db.py sellers.py) >>"$LOGS/mypy.log" 2>&1; then
        pass "mypy --strict examples and the demo"
    else
        fail "mypy --strict examples and the demo" "$LOGS/mypy.log"
    fi
fi

# --- the demo -----------------------------------------------------------------------------------
# Which languages can run here (the demo says which are not, and why).
langs=$("$TICKET_SALE_PYTHON" - "$HERE/ticket-sale" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
from sellers import ALL_LANGUAGES, Languages
l = Languages("/tmp", False, lambda m: print(m, file=sys.stderr))
print(",".join(x for x in ALL_LANGUAGES if l.check(x)[0]))
EOF
)
echo "== languages available: ${langs:-none}"
for lang in ruby node; do
    case ",$langs," in
        *",$lang,"*) ;;
        *) if [ -d "$ROOT/bindings-$lang" ]; then
               fail "$lang seller unavailable although bindings-$lang is here (see the install logs in $LOGS)"
           else
               skip "$lang seller: no bindings-$lang in this checkout"
           fi;;
    esac
done

# demo_case NAME EXPECT_RC CHECK DEMO_ARGS...: runs the demo; CHECK is an awk condition on the
# fields of its last line (sold, seats, double_sold, fence_refusals, languages).
demo_case() {
    local name=$1 want_rc=$2 check=$3; shift 3
    local log="$LOGS/demo-$name.log"
    echo "== demo $*"
    timeout 300 "$TICKET_SALE_PYTHON" "$DEMO" "$@" >"$log" 2>&1
    local rc=$?
    local last
    last=$(tail -n 1 "$log")
    echo "   exit $rc: $last"
    if ! echo "$last" | grep -Eq '^sold=[0-9]+ seats=[0-9]+ double_sold=[0-9]+ fence_refusals=[0-9]+ languages=[a-z,]+$'; then
        fail "demo $name: last line format" "$log"; return
    fi
    if [ "$rc" -ne "$want_rc" ]; then
        fail "demo $name: exit $rc, expected $want_rc" "$log"; return
    fi
    if echo "$last" | tr ' ' '\n' | awk -F= '{v[$1]=$2} END {exit !('"$check"')}' ; then
        pass "demo $name"
    else
        fail "demo $name: last line fails ($check)" "$log"
    fi
}

if [ -n "$langs" ]; then
    want_langs="v[\"languages\"] == \"$langs\""
    demo_case sqlite 0 "v[\"sold\"] == 40 && v[\"seats\"] == 40 && v[\"double_sold\"] == 0 && $want_langs" \
        --seats 40 --sellers 2 --languages "$langs"
    demo_case sqlite-chaos 0 "v[\"sold\"] == 40 && v[\"double_sold\"] == 0 && v[\"fence_refusals\"] >= 1 && $want_langs" \
        --seats 40 --sellers 2 --languages "$langs" --chaos
    # Without the fence the same chaos must double-sell, and the audit must see it: the
    # proof that double_sold counts what the database holds and that the fence is what helps.
    first=${langs%%,*}
    demo_case no-fence-chaos 1 "v[\"double_sold\"] >= 1 && v[\"fence_refusals\"] == 0" \
        --seats 20 --sellers 2 --languages "$first" --no-fence --chaos
    # Baskets (acquire_all, fenced per seat) and general admission (acquire_shared, fenced per
    # slot), each with the chaos, in every available language that has the mode; and without
    # the fence, which must double-sell in that mode too.
    for mode in basket general; do
        mlangs=$("$TICKET_SALE_PYTHON" - "$HERE/ticket-sale" "$langs" "$mode" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
from sellers import MODES
print(",".join(x for x in sys.argv[2].split(",") if sys.argv[3] in MODES[x]))
EOF
)
        if [ -z "$mlangs" ]; then
            fail "demo $mode: no available seller language has --$mode"; continue
        fi
        if [ "$mode" = basket ]; then margs=(--seats 48 --basket 2); msold=48; else margs=(--seats 40 --general 3); msold=40; fi
        demo_case "$mode-chaos" 0 "v[\"sold\"] == $msold && v[\"double_sold\"] == 0 && v[\"fence_refusals\"] >= 1 && v[\"languages\"] == \"$mlangs\"" \
            "${margs[@]}" --sellers 2 --languages "$mlangs" --chaos
        if [ "$mode" = basket ]; then margs=(--seats 20 --basket 2); else margs=(--seats 20 --general 2); fi
        demo_case "$mode-no-fence-chaos" 1 "v[\"double_sold\"] >= 1 && v[\"fence_refusals\"] == 0" \
            "${margs[@]}" --sellers 2 --languages "${mlangs%%,*}" --no-fence --chaos
    done
    if [ "${TICKET_SALE_SKIP_POSTGRES:-0}" != 1 ]; then
        demo_case postgres-chaos 0 "v[\"sold\"] == 30 && v[\"double_sold\"] == 0 && v[\"fence_refusals\"] >= 1" \
            --seats 30 --sellers 1 --db temp-postgres --chaos
    else
        skip "demo postgres-chaos: TICKET_SALE_SKIP_POSTGRES=1"
    fi
else
    fail "demo: no seller language available"
fi
# A bad language is a clear usage error.
if "$TICKET_SALE_PYTHON" "$DEMO" --languages cobol >"$LOGS/demo-usage.log" 2>&1; then
    fail "demo --languages cobol: accepted" "$LOGS/demo-usage.log"
elif grep -q 'subset of rust,python,ruby,node' "$LOGS/demo-usage.log"; then
    pass "demo usage error"
else
    fail "demo --languages cobol: unclear error" "$LOGS/demo-usage.log"
fi

echo "examples: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
