#!/usr/bin/env bash
# The package half of docs/security.md, "Supply chain": the Node package's
# runtime dependencies through `npm audit --omit=dev`, the Node tool trees
# (the binding's build tools, the console test, the docs tools) through
# `npm audit`, and the Python package's build requirement (maturin, the
# version scripts/release installs) through pip-audit. Each check asks the
# registry's advisory service; when that service cannot be reached the check
# is counted as skipped with the reason, never as passed.
# Last line: "audit: N passed, M failed, K skipped".
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
passed=0 failed=0 skipped=0
pass() { passed=$((passed + 1)); echo "ok: $*"; }
fail() { failed=$((failed + 1)); echo "FAILED: $*"; }
skip() { skipped=$((skipped + 1)); echo "skipped: $*"; }

# npm_audit DIR ARGS...: `npm audit --json ARGS` against DIR's package-lock.json.
npm_audit() {
    local dir=$1; shift
    local out
    if ! command -v npm >/dev/null 2>&1; then
        skip "npm audit $* ($dir): npm is not installed"
        return
    fi
    out=$(cd "$dir" && npm audit --json "$@" 2>/dev/null)
    local total
    total=$(printf '%s' "$out" | python3 -c '
import json, sys
try:
    d = json.load(sys.stdin)
except ValueError:
    print("unreadable"); sys.exit()
if "error" in d or "statusCode" in d:
    e = d.get("error") if isinstance(d.get("error"), dict) else {}
    why = d.get("message") or e.get("summary") or e.get("code") or str(d.get("error"))
    print("error:" + str(why).splitlines()[0]); sys.exit()
print(d.get("metadata", {}).get("vulnerabilities", {}).get("total", "unreadable"))
')
    case "$total" in
        0) pass "npm audit${*:+ $*} ($dir): no known vulnerabilities" ;;
        error:*) skip "npm audit${*:+ $*} ($dir): the registry's advisory service answered ${total#error:}" ;;
        unreadable) skip "npm audit $* ($dir): no report (advisory service unreachable?)" ;;
        *) fail "npm audit $* ($dir): $total known vulnerabilities"; (cd "$dir" && npm audit "$@" | tail -n 40) ;;
    esac
}

echo "--- npm: the published package's runtime dependencies"
npm_audit bindings-node --omit=dev
echo "--- npm: tool trees (build, console test, docs)"
for dir in bindings-node ticketing-server/ui-tests scripts/docs-tools; do
    [ -f "$dir/package-lock.json" ] && npm_audit "$dir"
done

echo "--- pip: the Python package's build requirement"
VENV=$ROOT/target/audit-venv
if [ ! -x "$VENV/bin/pip-audit" ]; then
    python3 -m venv "$VENV" && "$VENV/bin/python" -m pip install -q pip-audit 'maturin>=1.9.4,<2' \
        || { rm -rf "$VENV"; skip "pip-audit: could not be installed from PyPI"; }
fi
if [ -x "$VENV/bin/pip-audit" ]; then
    # The version of maturin the build would install today (scripts/release's range).
    version=$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("maturin"))')
    req=$(mktemp); trap 'rm -f "$req"' EXIT
    echo "maturin==$version" >"$req"
    report=$("$VENV/bin/pip-audit" -r "$req" --no-deps --disable-pip -f json 2>/dev/null)
    verdict=$(printf '%s' "$report" | python3 -c '
import json, sys
try:
    d = json.load(sys.stdin)
except ValueError:
    print("skip:no report"); sys.exit()
for dep in d.get("dependencies", []):
    if dep.get("skip_reason"):
        print("skip:" + dep["skip_reason"]); sys.exit()
    if dep.get("vulns"):
        print("fail:" + ", ".join(v["id"] for v in dep["vulns"])); sys.exit()
print("ok")
')
    case "$verdict" in
        ok) pass "pip-audit maturin==$version: no known vulnerabilities" ;;
        skip:*) skip "pip-audit maturin==$version: ${verdict#skip:}" ;;
        *) fail "pip-audit maturin==$version: ${verdict#fail:}" ;;
    esac
fi

echo "audit: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
