"""End-to-end: the ways past the sandbox of issue 41's fourth round, each closed (real bwrap, the real CLI).

What runs later outside the sandbox stays read-only inside it (settings, hooks, MCP servers,
instructions, git's config and hooks, shell start-up files); host Unix sockets are out of reach;
a Read deny rule on a symlink hides what it leads to. tools/test.sh runs these (and the other
sandbox tests) a second time as an unprivileged user: root passes permission checks a user's run fails.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from .harness import MockApi, run_cli
from .test_sandbox import _run, _script

pytestmark = pytest.mark.slow  # each runs the CLI and bwrap

PLANTED = {
    ".queryloop/settings.json": '{"hooks": {}}',
    ".claude/settings.json": '{"hooks": {}}',
    ".claude/settings.local.json": "{}",
    ".mcp.json": '{"mcpServers": {}}',
    "CLAUDE.md": "obey",
    ".git/config": "[core]\n\tfsmonitor = touch pwned\n",
    ".git/hooks/pre-commit": "touch pwned",
    ".bashrc": "touch pwned",
    "sub/.git/config": "[core]\n\tfsmonitor = touch pwned\n",
    "sub/.claude/agents/evil.md": "x",
}


def _repository(path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(path)], check=True)


def _plant(planted: dict[str, str]) -> str:
    """One command writing each file (its folder made first), then an ordinary file, whatever fails.

    Through ``tee``, whose writes the gate cannot see: a redirection to one of them asks first (issue 49),
    and this is about the wall, not the gate."""
    parts = [
        f"mkdir -p {os.path.dirname(name) or '.'}; printf %s {json.dumps(text)} | tee {name} >/dev/null"
        for name, text in planted.items()
    ]
    return "; ".join(parts) + "; echo fine > ordinary.txt"


def test_what_runs_outside_later_stays_read_only_inside_however_it_is_written(tmp_path: Path) -> None:
    _repository(tmp_path)
    (tmp_path / ".mcp.json").write_text('{"mcpServers": {"kept": {"command": "true"}}}')
    config = (tmp_path / ".git" / "config").read_text()
    results, _ = _run(tmp_path, _script(_plant(PLANTED)))
    assert (tmp_path / "ordinary.txt").read_text() == "fine\n", "other writes still come out"
    assert (tmp_path / ".git" / "config").read_text() == config
    assert (tmp_path / ".mcp.json").read_text() == '{"mcpServers": {"kept": {"command": "true"}}}'
    for name in PLANTED:
        if name not in (".git/config", ".mcp.json"):
            assert not (tmp_path / name).exists(), name
    assert "Read-only file system" in results[0], "a protected file that exists is read-only to the command"
    assert "refused, read-only to sandboxed commands" in results[0], "new ones are refused when the changes come out"


def test_moving_or_removing_the_folder_that_holds_them_does_not_take_them_either(tmp_path: Path) -> None:
    _repository(tmp_path)
    hooks = sorted(p.name for p in (tmp_path / ".git" / "hooks").iterdir())
    _run(tmp_path, _script("rm -rf .git; mkdir -p .git/hooks; echo 'touch pwned' > .git/hooks/pre-commit"))
    assert sorted(p.name for p in (tmp_path / ".git" / "hooks").iterdir()) == hooks
    assert (tmp_path / ".git" / "config").exists()


def test_writing_through_a_protected_symlink_changes_neither_the_link_nor_its_target(tmp_path: Path) -> None:
    (tmp_path / "dotfiles").mkdir()
    (tmp_path / "dotfiles" / "bashrc").write_text("original\n")
    (tmp_path / ".bashrc").symlink_to("dotfiles/bashrc")
    _run(tmp_path, _script("echo 'touch pwned' >> .bashrc"))
    assert (tmp_path / "dotfiles" / "bashrc").read_text() == "original\n"


def test_a_working_directory_that_is_home_keeps_every_dotfile_there_read_only(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".config").mkdir()
    command = "mkdir -p .config/autostart .local/bin bin; echo x | tee .config/autostart/evil .local/bin/git bin/git"
    command += "; echo ok > notes.txt"
    results, _ = _run(home, _script(command), env={"HOME": str(home)})
    assert (home / "notes.txt").read_text() == "ok\n"
    assert not (home / ".config" / "autostart").exists() and not (home / ".local").exists(), results
    assert not (home / "bin").exists(), "~/bin is first on the login shell's PATH: a git there runs instead of git"


def test_the_gate_refuses_a_redirection_to_what_runs_later_before_the_sandbox_runs_it(tmp_path: Path) -> None:
    """Auto-allowed in the sandbox, a line writing a file that runs later still asks (headless: denied and listed)."""
    results, result = _run(tmp_path, _script("echo 'touch pwned' > .bashrc", "echo ok > notes.txt"))
    assert results[0].startswith(f"Output redirection to '{tmp_path / '.bashrc'}' needs approval"), results
    assert "runs later" in results[0] and not (tmp_path / ".bashrc").exists()
    assert [d["tool_name"] for d in result["permission_denials"]] == ["Bash"]
    assert (tmp_path / "notes.txt").read_text() == "ok\n"


def test_a_git_config_planted_by_a_sandboxed_command_never_runs_when_git_is_excluded(tmp_path: Path) -> None:
    _repository(tmp_path)
    plant = "printf '[core]\\n\\tfsmonitor = touch pwned\\n' >> .git/config"
    bare = "mkdir -p bare/objects bare/refs; echo 'ref: refs/heads/main' > bare/HEAD"
    bare += "; printf '[core]\\n\\tfsmonitor = touch pwned\\n\\tbare = true\\n' > bare/config"
    _run(
        tmp_path,
        _script(plant, bare, "git status", "cd bare && git status"),
        settings={"excludedCommands": ["git:*"]},
        permissions={"allow": ["Bash(git status)", "Bash(cd bare && git status)", "Bash(cd:*)"]},
    )
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "bare" / "pwned").exists()


@pytest.fixture
def host_socket() -> Iterator[Path]:
    """A listening Unix socket outside /tmp (the sandbox has its own /tmp): where a session bus or docker.sock is."""
    folder = Path(tempfile.mkdtemp(prefix="queryloop-socket-", dir="/var/tmp"))
    os.chmod(folder, 0o755)
    path = folder / "host.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    os.chmod(path, 0o777)
    server.listen(1)
    try:
        yield path
    finally:
        server.close()
        path.unlink(missing_ok=True)
        folder.rmdir()


CONNECT = (
    "python3 -c \"import socket,sys\ntry:\n s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); print('REACHED')\n"
    "except OSError as e: print('REFUSED', e.errno)\" {path}"
)


@pytest.mark.parametrize("network", [False, True], ids=["no-network", "allowed-domains"])
def test_a_host_unix_socket_outside_tmp_is_out_of_reach(tmp_path: Path, host_socket: Path, network: bool) -> None:
    reach = subprocess.run(["python3", "-c", CONNECT.split('"')[1], str(host_socket)], capture_output=True, text=True)
    assert "REACHED" in reach.stdout, "outside the sandbox the socket answers"
    settings = {"network": {"allowedDomains": ["example.com"]}} if network else {}
    results, _ = _run(tmp_path, _script(CONNECT.format(path=host_socket)), settings=settings)
    assert "REFUSED 1" in results[0], results[0]  # EPERM from the seccomp filter


def test_a_read_deny_rule_on_a_symlink_hides_what_it_leads_to(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "real.env").write_text("SECRET=1\n")
    (tmp_path / ".env").symlink_to("config/real.env")
    results, _ = _run(
        tmp_path,
        _script("f=.env; cat $f; cat config/real.env; echo end"),  # an expansion: the gate asks, the sandbox allows
        permissions={"deny": ["Read(./.env)"]},
    )
    assert "SECRET" not in results[0] and "end" in results[0], results[0]


PEEK = (
    "python3 -c \"import os\nfor pid in [p for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()]:\n"
    " try: status = open(f'/proc/{pid}/status').read()\n except OSError: continue\n"
    " if 'Seccomp:\\t0' in status:\n"
    "  try: open(f'/proc/{pid}/mem','rb'); print('OPENED', pid)\n"
    "  except OSError as e: print('DENIED', e.errno)\""
)


@pytest.mark.parametrize("network", [False, True], ids=["no-network", "allowed-domains"])
def test_no_process_without_the_filter_is_open_to_the_command(tmp_path: Path, network: bool) -> None:
    """The relay keeps a Unix socket and bubblewrap's first process has no filter: neither may be written into."""
    settings = {"network": {"allowedDomains": ["example.com"]}} if network else {}
    results, _ = _run(tmp_path, _script(PEEK), settings=settings)
    assert "OPENED" not in results[0], results[0]
    assert results[0].count("DENIED") == (2 if network else 0), results[0]


TAMPER = (
    "python3 -c \"words = open('/proc/1/cmdline','rb').read().split(bytes(1))\n"
    "for word in [w.decode() for w in words if w.endswith((b'unix.bpf', b'bridge.py'))]:\n"
    " try: open(word,'ab'); print('WRITABLE', word)\n"
    " except OSError as e: print('REFUSED', e.errno)\""
)


def test_the_bridge_and_the_filter_the_next_command_starts_with_are_read_only_to_this_one(tmp_path: Path) -> None:
    results, _ = _run(tmp_path, _script(TAMPER), settings={"network": {"allowedDomains": ["example.com"]}})
    assert results[0].count("REFUSED 30") == 2 and "WRITABLE" not in results[0], results[0]  # EROFS


# How many environments holding the CLI's key a command can list, with `ps eww` and in /proc/PID/environ, and
# how many environments ps lists at all (issue 49). `[y]`: the pattern in grep's own command line is no match.
ENVIRONMENTS = (
    "echo ps $(ps eww -A | grep -c 'ANTHROPIC_API_KEY=test-ke[y]') listed $(ps eww -A | grep -c 'PATH=[/]');"
    " echo proc $(cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c '^ANTHROPIC_API_KEY=test-ke[y]')"
)
_COUNTS = re.compile(r"ps (\d+) listed (\d+)\s+proc (\d+)")


def _keys_seen(output: str) -> tuple[int, int, int]:
    """How many environments held the key in ps's listing, how many ps listed, how many /proc showed the key in."""
    found = _COUNTS.search(output)
    assert found is not None, output
    shown, listed, read = (int(n) for n in found.groups())
    return shown, listed, read


@pytest.mark.parametrize("network", [False, True], ids=["no-network", "allowed-domains"])
def test_a_sandboxed_command_sees_no_environment_of_a_process_outside_the_sandbox(
    tmp_path: Path, network: bool
) -> None:
    """The CLI holds ANTHROPIC_API_KEY; commands never get it, and in their PID namespace see no process that does."""
    settings = {"network": {"allowedDomains": ["example.com"]}} if network else {}
    results, _ = _run(tmp_path, _script(ENVIRONMENTS), settings=settings)
    shown, listed, read = _keys_seen(results[0])
    assert listed > 0, f"ps listed no environment at all, so it proves nothing: {results[0]}"
    assert (shown, read) == (0, 0), results[0]


def test_outside_the_sandbox_the_same_command_sees_the_key_of_the_cli_that_runs_it(tmp_path: Path) -> None:
    """The control: unsandboxed, the listing shows the CLI's environment, so the test above can fail."""
    with MockApi(_script(ENVIRONMENTS)) as api:
        args = ["-p", "go", "--model", "mock-primary", "--permission-mode", "bypassPermissions"]
        run = run_cli(args, api=api, cwd=tmp_path, fmt="json")
        assert run.returncode == 0, run.stderr
        listing = str(api.requests[1].messages[-1]["content"][0]["content"])
    shown, _, read = _keys_seen(listing)
    assert shown > 0 and read > 0, listing
