#!/usr/bin/env bash
# Install everything queryloop's tests need on a fresh machine, lint, then run the tests:
#   tools/test.sh          the documentation site (mkdocs build --strict, about 5 s), the whole suite
#                          (about 18 minutes on a quiet 2-core machine), then the transition-coverage gate,
#                          then, as root, the sandbox's tests again as an unprivileged user
#   tools/test.sh --fast   what to run before a commit (under 5 minutes): every test not marked
#                          `slow` (pyproject.toml registers the marker; the slow tests carry it)
#   tools/test.sh ARGS...  pytest ARGS, e.g. tools/test.sh tests/engine -k spin (also after --fast)
# pytest runs on every core (pytest-xdist) and prints the slowest tests at the end.
# Debian packages: graphviz (`dot`, diagrams), spin (model checking), postgresql (the fleet test starts
# its own cluster: tests/e2e/test_fleet.py), bubblewrap (the sandbox tests run commands in it for real:
# tests/e2e/test_sandbox.py), chromium and chromium-driver (tests/e2e/test_ui.py drives the inspector in
# Debian's browser), npm (the reference MCP servers and Claude Code, below) and openssl (the web tools' tests make
# their loopback HTTPS server's certificate with it), only when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
fast=()
if [ "${1:-}" = "--fast" ]; then
  fast=(-m "not slow")
  shift
fi

# Wait (up to 10 minutes) while another apt holds one of its locks: DPkg::Lock::Timeout covers dpkg's
# lock only, and `apt-get update` fails at once when the package lists' lock is taken.
wait_for_apt() {
  python3 - /var/lib/apt/lists/lock /var/cache/apt/archives/lock <<'PY'
import fcntl, sys, time
deadline, said = time.monotonic() + 600, False
for path in sys.argv[1:]:
    try:
        lock = open(path, "a")
    except OSError:
        continue  # not root, or no apt here: apt-get itself will say so
    with lock:
        while True:
            try:
                fcntl.lockf(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if time.monotonic() > deadline:
                    sys.exit(f"another apt still holds {path} after 10 minutes")
                if not said:
                    print(f"waiting for another apt to release {path}", file=sys.stderr, flush=True)
                    said = True
                time.sleep(2)
PY
}

missing=()
command -v dot >/dev/null 2>&1 || missing+=(graphviz)
command -v spin >/dev/null 2>&1 || missing+=(spin)
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
[ -x /usr/bin/chromium ] || missing+=(chromium)
[ -x /usr/bin/chromedriver ] || missing+=(chromium-driver)
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || command -v initdb >/dev/null 2>&1 || missing+=(postgresql)
command -v npm >/dev/null 2>&1 || missing+=(npm)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  wait_for_apt
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  wait_for_apt
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The reference MCP servers tests/e2e/test_mcp_servers.py starts (npm server-everything and server-filesystem,
# at the versions package-lock.json pins), installed into tests/fixtures/mcp/npm/node_modules when missing.
mcp_servers=tests/fixtures/mcp/npm
if [ ! -x "$mcp_servers/node_modules/.bin/mcp-server-everything" ] || [ ! -x "$mcp_servers/node_modules/.bin/mcp-server-filesystem" ]; then
  echo "installing the reference MCP servers with npm ci in $mcp_servers" >&2
  npm ci --prefix "$mcp_servers" --no-audit --no-fund --loglevel=error
fi
# Claude Code 2.1.235 (the package-lock.json pins it), which tests/conformance runs beside queryloop offline against the
# embedded server, installed into tests/conformance/npm/node_modules when missing (npm warns that it wants Node 22: the
# package is a native program, and runs).
reference=tests/conformance/npm
if [ ! -x "$reference/node_modules/.bin/claude" ]; then
  echo "installing Claude Code 2.1.235 with npm ci in $reference" >&2
  npm ci --prefix "$reference" --no-audit --no-fund --loglevel=error
fi
full=0  # the whole suite: no --fast, no pytest arguments
if [ "$#" -eq 0 ] && [ "${#fast[@]}" -eq 0 ]; then
  full=1
fi
extras=test
if [ "$full" -eq 1 ]; then
  extras=test,docs
fi
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore -e ".[$extras]"
python3 -m ruff check .
python3 -m ruff format --check .
scratch="$(mktemp -d "${TMPDIR:-/tmp}/queryloop-test.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
if [ "$full" -eq 1 ]; then
  # The site (mkdocs.yml): a broken link or anchor, a stale generated page or a bad docstring fails here.
  # NO_MKDOCS_2_WARNING: Material prints a banner about its successor on every build.
  NO_MKDOCS_2_WARNING=1 python3 -m mkdocs build --strict --quiet -d "$scratch/site"
  # The site reads the same offline: no page loads a script, a font or a picture from another host.
  if grep -rlE '(src|href)="https?://[^"]*\.(js|css|woff2?|svg|png)|fonts\.googleapis' "$scratch/site" --include='*.html'; then
    echo "the site above loads something from another host" >&2; exit 1
  fi
fi
# Every end-to-end run records its path here; with no pytest arguments (the whole suite),
# every transition of the shipped query loop must have been taken by one of them.
trace_dir="$scratch/traces"
mkdir "$trace_dir"
export QUERYLOOP_TRACE_DIR="$trace_dir"
# -n: one pytest worker per core (QUERYLOOP_TEST_WORKERS overrides; 0 runs in this process); loadgroup keeps the
# tests sharing the session's exploration on one worker (tests/conftest.py), so it is made once.
workers="${QUERYLOOP_TEST_WORKERS:-auto}"
python3 -m pytest -n "$workers" --dist loadgroup --verbosity=0 --durations=25 ${fast[@]+"${fast[@]}"} "$@"
if [ "$full" -eq 1 ]; then
  python3 -m queryloop check --coverage "$trace_dir" --machine machines/query_loop.yaml --fail-under 100
fi
# The sandbox's tests again as an unprivileged user (about 40 s): root passes permission checks an ordinary
# user's run fails (issue 41: every sandboxed command of a non-root user once failed). As root, with the whole
# suite, a throwaway system user runs them; the interpreter's folders are made reachable for it if they are not.
if [ "$full" -eq 1 ] && [ "$(id -u)" -eq 0 ]; then
  user=queryloop-sandbox
  id -u "$user" >/dev/null 2>&1 || useradd --system --no-create-home --home-dir /nonexistent "$user"
  interpreter="$(python3 -c 'import sys; print(sys.executable)')"  # a virtual environment's, if one is active
  for path in "$interpreter" "$(realpath "$interpreter")" "$PWD/tools/test.sh"; do
    folder="$(dirname "$path")"
    while [ "$folder" != / ]; do
      if ! runuser -u "$user" -- test -x "$folder"; then
        echo "making $folder searchable for $user (o+x) to run the sandbox tests as an ordinary user" >&2
        chmod o+x "$folder"
      fi
      folder="$(dirname "$folder")"
    done
  done
  as_user="$(mktemp -d "${TMPDIR:-/tmp}/queryloop-as-user.XXXXXX")"
  trap 'rm -rf "$scratch" "$as_user"' EXIT
  mkdir "$as_user/home"
  chown -R "$user" "$as_user"
  runuser -u "$user" -- env -u QUERYLOOP_TRACE_DIR HOME="$as_user/home" TMPDIR="$as_user" \
    PYTHONDONTWRITEBYTECODE=1 "$interpreter" -m pytest -p no:cacheprovider -p no:xdist --basetemp="$as_user/pytest" \
    tests/e2e/test_sandbox.py tests/e2e/test_sandbox_containment.py tests/agent/test_sandbox_network.py \
    tests/agent/test_sandbox_overlay.py tests/agent/test_sandbox_policy.py tests/agent/test_sandbox_protect.py
fi
