#!/usr/bin/env bash
# Install everything queryloop's tests need on a fresh machine, lint, then run the whole suite.
# Debian packages: graphviz (`dot`, diagrams), spin (model checking), postgresql (the fleet test starts
# its own cluster: tests/e2e/test_fleet.py) and bubblewrap (the sandbox tests run commands in it for real:
# tests/e2e/test_sandbox.py), only when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
command -v dot >/dev/null 2>&1 || missing+=(graphviz)
command -v spin >/dev/null 2>&1 || missing+=(spin)
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || command -v initdb >/dev/null 2>&1 || missing+=(postgresql)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore -e '.[test]'
python3 -m ruff check .
python3 -m ruff format --check .
# Every end-to-end run records its path here; with no pytest arguments (the whole suite),
# every transition of the shipped query loop must have been taken by one of them.
trace_dir="$(mktemp -d "${TMPDIR:-/tmp}/queryloop-traces.XXXXXX")"
trap 'rm -rf "$trace_dir"' EXIT
export QUERYLOOP_TRACE_DIR="$trace_dir"
python3 -m pytest "$@"
if [ "$#" -eq 0 ]; then
  python3 -m queryloop check --coverage "$trace_dir" --machine machines/query_loop.yaml --fail-under 100
fi
