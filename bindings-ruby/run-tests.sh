#!/usr/bin/env bash
# Tests of the Ruby gem, against the gem INSTALLED from the built .gem:
#   bindings-ruby/run-tests.sh [test files..., default: test/test_*.rb]
# 1. installs what is missing with apt (ruby, ruby-dev, rake, libclang-dev,
#    clang), idempotently;
# 2. the gem: with TICKETING_DIST=DIR (scripts/test: dist/ of
#    scripts/release), the release's platform gem
#    DIR/ticketing-<version>-x86_64-linux.gem (the extension precompiled), so
#    the tests run against what ships; otherwise built from this source tree
#    with `rake gem` -> pkg/ticketing-<version>.gem (the crates vendored);
# 3. `gem install --local` of that file into a temporary GEM_HOME (for the
#    source gem, cargo's target dir: $TICKETING_GEM_TARGET_DIR, default
#    <repo>/target/ruby-gem, so compiled dependencies are reused between runs);
# 4. `rbs validate` of sig/ticketing.rbs, then the minitest suite, run from a
#    directory outside the source tree with only the installed gem loadable.
# `run-tests.sh --install-prereqs` does step 1 only (scripts/test calls it
# before clippy, which compiles the extension crate against Ruby's headers).
# The tests spawn $TICKETING_SERVER_BIN (default <repo>/target/debug/ticketing-server,
# built here with cargo if missing). The last line is minitest's summary
# ("N runs, M assertions, F failures, E errors, S skips"); exits non-zero on
# any failure.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)

missing=()
command -v ruby >/dev/null 2>&1 || missing+=(ruby)
command -v rake >/dev/null 2>&1 || missing+=(rake)
if ! command -v ruby >/dev/null 2>&1 || \
   [ ! -f "$(ruby -rrbconfig -e 'print RbConfig::CONFIG["rubyhdrdir"]')/ruby.h" ]; then
    missing+=(ruby-dev)
fi
command -v clang >/dev/null 2>&1 || missing+=(clang)
command -v make >/dev/null 2>&1 || missing+=(make)
ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 || ls /usr/lib/*/libclang*.so* >/dev/null 2>&1 || missing+=(libclang-dev)
if [ ${#missing[@]} -gt 0 ]; then
    echo "== installing with apt: ${missing[*]}"
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
[ "${1:-}" = "--install-prereqs" ] && exit 0
DIST=${TICKETING_DIST:-}
if [ -z "$DIST" ]; then
    command -v cargo >/dev/null || { echo "run-tests.sh: cargo not found (a Rust toolchain builds the extension)"; exit 1; }
fi

if [ -z "${TICKETING_SERVER_BIN:-}" ]; then
    export TICKETING_SERVER_BIN="$ROOT/target/debug/ticketing-server"
    if [ ! -x "$TICKETING_SERVER_BIN" ]; then
        echo "== building the server ($TICKETING_SERVER_BIN missing)"
        (cd "$ROOT" && CARGO_TARGET_DIR="$ROOT/target" cargo build -q -p ticketing-server)
    fi
fi

VERSION=$(ruby -e 'load ARGV[0]; print Ticketing::VERSION' "$HERE/lib/ticketing/version.rb")
if [ -n "$DIST" ]; then
    GEM="$DIST/ticketing-$VERSION-x86_64-linux.gem"
    [ -f "$GEM" ] || { echo "run-tests.sh: $GEM is missing (run scripts/release)"; exit 1; }
else
    echo "== rake gem"
    (cd "$HERE" && rake gem)
    GEM="$HERE/pkg/ticketing-$VERSION.gem"
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/ticketing-ruby-tests.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export GEM_HOME="$WORK/gems"
export GEM_PATH="$GEM_HOME:$(env -u GEM_HOME -u GEM_PATH ruby -e 'print Gem.default_path.join(":")')"
echo "== gem install --local $GEM (GEM_HOME=$GEM_HOME)"
(cd "$WORK" && CARGO_TARGET_DIR="${TICKETING_GEM_TARGET_DIR:-$ROOT/target/ruby-gem}" \
    gem install --local --no-document "$GEM")

echo "== rbs validate (sig/ticketing.rbs)"
(cd "$HERE" && ruby -e 'gem "rbs"; load Gem.bin_path("rbs", "rbs")' -- -I sig validate --silent)

echo "== minitest"
if [ $# -gt 0 ]; then
    files=("$@")
else
    files=("$HERE"/test/test_*.rb)
fi
abs=()
for f in "${files[@]}"; do abs+=("$(cd "$(dirname "$f")" && pwd)/$(basename "$f")"); done
cd "$WORK"
rc=0
ruby -e 'ARGV.each { |f| require f }; ARGV.clear' "${abs[@]}" || rc=$?
exit "$rc"
