"""End-to-end: the model's Bash commands in the real bubblewrap sandbox, through the real CLI and SDK.

Every test here runs bwrap for real. Where bubblewrap cannot start, they fail — never
skip: a sandbox test that quietly did not run would report containment it never saw.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from queryloop.handlers.tools.services.sandbox import unavailable_reason

from .harness import HANG_GUARD_S, ROOT, MockApi, cli_env, run_cli
from .test_request_layer import scenario

pytestmark = pytest.mark.slow  # ~45 s in all: tools/test.sh --fast leaves the module out


@pytest.fixture(autouse=True)
def _bubblewrap_starts() -> None:
    problem = unavailable_reason()
    assert problem is None, f"the sandbox tests need bubblewrap, and it cannot start here: {problem}"


def _bash(command: str, **extra: object) -> str:
    return "{tool_use: {name: Bash, input: " + json.dumps({"command": command, **extra}) + "}}"


def _script(*commands: str, **extra: object) -> str:
    turns = "".join(f"    - reply: {{content: [{_bash(c, **extra)}]}}\n" for c in commands)
    return scenario(f"""  mock-primary:
{turns}    - reply: {{content: [{{text: "done"}}]}}
""")


def _run(
    tmp_path: Path,
    text: str,
    *flags: str,
    settings: dict[str, object] | None = None,
    permissions: dict[str, object] | None = None,
    env: dict[str, str] | None = None,
) -> tuple[list[str], dict]:
    """Run the script sandboxed in default mode (headless); the tool results' texts and the result line."""
    document = {"sandbox": {"enabled": True, **(settings or {})}, "permissions": permissions or {}}
    args = ["-p", "go", "--model", "mock-primary", "--permission-mode", "default", *flags]
    with MockApi(text) as api:
        run = run_cli([*args, "--settings", json.dumps(document)], api=api, cwd=tmp_path, fmt="json", **(env or {}))
        assert run.returncode == 0, run.stderr
        results = [
            str(block.get("content"))
            for request in api.requests
            for message in request.messages
            if message["role"] == "user" and isinstance(message["content"], list)
            for block in message["content"]
            if block.get("type") == "tool_result"
        ]
    return list(dict.fromkeys(results)), run.result


def test_a_sandboxed_command_writes_in_the_project_and_nowhere_else(tmp_path: Path) -> None:
    project, outside = tmp_path / "project", tmp_path / "outside"
    project.mkdir()
    outside.mkdir()
    (outside / "keep.txt").write_text("precious\n")
    etc = Path("/etc") / f"queryloop-sandbox-test-{os.getpid()}"
    command = f"echo made > inside.txt; echo x > {outside}/new.txt; rm -f {outside}/keep.txt; touch {etc}"
    try:
        results, result = _run(project, _script(command))
        assert not etc.exists()
    finally:
        etc.unlink(missing_ok=True)
    assert (project / "inside.txt").read_text() == "made\n", "writes inside the working directory work"
    assert not (outside / "new.txt").exists() and (outside / "keep.txt").read_text() == "precious\n"
    assert result["permission_denials"] == [], "default mode asks nothing of a sandboxed command"
    assert f"touch: cannot touch '{etc}': Read-only file system" in results[0], "an ordinary error the model sees"


def test_allow_write_opens_a_folder_but_not_what_runs_later_there_and_deny_write_and_deny_read_close_paths(
    tmp_path: Path,
) -> None:
    project, extra, other = tmp_path / "project", tmp_path / "extra", tmp_path / "other"
    for folder in (project / "sub", extra / ".git" / "hooks", other):
        folder.mkdir(parents=True)
    (extra / ".git" / "config").write_text("[core]\n")
    (project / "secret.txt").write_text("S3CRET\n")
    (project / "do.sh").write_text(  # run as a script: the gate does not see these writes, the sandbox must
        f"echo a > {extra}/made.txt; echo b > {other}/no.txt; echo c > sub/no.txt; cat secret.txt\n"
        f"echo '#!/bin/sh' > {extra}/.git/hooks/pre-commit; echo d >> {extra}/.git/config; echo end\n"
    )
    command = "bash do.sh 2>&1"
    filesystem = {
        "allowWrite": [str(extra)],
        "denyWrite": [str(project / "sub")],
        "denyRead": ["~/nothing", str(project / "secret.txt")],
    }
    results, _ = _run(project, _script(command), settings={"filesystem": filesystem})
    assert (extra / "made.txt").read_text() == "a\n", "allowWrite's folder is writable"
    assert not (other / "no.txt").exists() and not (project / "sub" / "no.txt").exists()
    assert "S3CRET" not in results[0] and results[0].rstrip().endswith("end"), results[0]
    assert not (extra / ".git" / "hooks" / "pre-commit").exists(), "no hook planted in a folder allowWrite opens"
    assert (extra / ".git" / "config").read_text() == "[core]\n"


def test_a_relative_filesystem_path_is_left_out_with_one_warning(tmp_path: Path) -> None:
    document = {"sandbox": {"enabled": True, "filesystem": {"allowWrite": ["out"]}}}
    with MockApi(_script("touch out/x 2>&1; echo end")) as api:
        (tmp_path / "out").mkdir()
        run = run_cli(
            ["-p", "go", "--model", "mock-primary", "--settings", json.dumps(document)],
            api=api,
            cwd=tmp_path.parent,
            fmt="json",
        )
    assert run.returncode == 0, run.stderr
    assert "sandbox.filesystem.allowWrite 'out' is not absolute or under ~/; it is left out" in run.stderr
    assert not (tmp_path / "out" / "x").exists()


def test_the_sandbox_has_a_temporary_directory_of_its_own(tmp_path: Path) -> None:
    marker = f"queryloop-sandbox-test-{os.getpid()}"
    results, _ = _run(tmp_path, _script(f"echo hi > /tmp/{marker} && cat /tmp/{marker} && echo $TMPDIR"))
    assert "hi\n/tmp" in results[0]
    assert not Path("/tmp", marker).exists(), "the host's /tmp is not the sandbox's"


class _Origin(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"origin says hello"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def origin() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Origin)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def _fetch(url: str) -> str:
    code = f'import urllib.request as u; print(u.urlopen("{url}", timeout=5).read().decode())'
    return f"python3 -c '{code}' 2>&1 | tail -1"


def test_the_network_is_closed_but_for_the_allowed_domains_through_the_proxy(tmp_path: Path, origin: int) -> None:
    direct = f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {origin}), 3)' 2>&1 | tail -1"
    text = _script(direct, _fetch(f"http://localhost:{origin}/"), _fetch(f"http://127.0.0.1:{origin}/"))
    results, _ = _run(tmp_path, text, settings={"network": {"allowedDomains": ["localhost"]}})
    assert "ConnectionRefusedError" in results[0], "the host's loopback is not the sandbox's"
    assert "origin says hello" in results[1], "an allowed domain answers through the proxy"
    assert "403" in results[2] and "origin says hello" not in results[2], "a host not allowed is refused"


def test_without_allowed_domains_there_is_no_network_at_all(tmp_path: Path, origin: int) -> None:
    results, _ = _run(tmp_path, _script(_fetch(f"http://localhost:{origin}/")))
    assert "origin says hello" not in results[0]
    assert "URLError" in results[0] or "Errno" in results[0], results[0]


def test_a_file_under_a_read_deny_rule_is_not_readable_by_a_sandboxed_program(tmp_path: Path) -> None:
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "key.txt").write_text("TOPSECRET-1\n")
    (tmp_path / "token.txt").write_text("TOPSECRET-2\n")
    (tmp_path / "secrets" / "more").mkdir()
    (tmp_path / "secrets" / "more" / "deeper.txt").write_text("TOPSECRET-3\n")
    (tmp_path / "public.txt").write_text("PUBLIC\n")
    reader = 'python3 -c \'import pathlib; [print(p.read_text()) for p in pathlib.Path(".").rglob("*.txt")]\''
    results, _ = _run(tmp_path, _script(reader), permissions={"deny": ["Read(./secrets/**)", "Read(./token.txt)"]})
    assert "PUBLIC" in results[0], f"the command ran: {results[0]}"
    assert "TOPSECRET" not in results[0], "a program the gate cannot read through still cannot read the file"
    assert (tmp_path / "token.txt").read_text() == "TOPSECRET-2\n", "the real file is untouched"


def test_a_sandboxed_change_is_checkpointed_and_rewound(tmp_path: Path) -> None:
    (tmp_path / "config.txt").write_text("original\n")
    (tmp_path / "doomed.txt").write_text("keep me\n")
    text = _script("echo edited > config.txt && rm doomed.txt && mkdir -p out && echo new > out/made.txt")
    results, result = _run(tmp_path, text)
    assert (tmp_path / "config.txt").read_text() == "edited\n" and not (tmp_path / "doomed.txt").exists()
    assert results[0].startswith(
        "(Bash completed with no output)\n3 files changed and 1 file removed in the working directory"
    ), results
    rewind = subprocess.run(
        [sys.executable, "-m", "queryloop", "rewind", result["session_id"]],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=cli_env(None),
        timeout=HANG_GUARD_S,
    )
    assert rewind.returncode == 0, rewind.stderr
    assert (tmp_path / "config.txt").read_text() == "original\n"
    assert (tmp_path / "doomed.txt").read_text() == "keep me\n"
    assert not (tmp_path / "out" / "made.txt").exists()
    assert "cannot undo" not in rewind.stdout, "a captured Bash call is covered by its checkpoints"


def test_processes_a_command_leaves_behind_die_with_the_sandbox(tmp_path: Path) -> None:
    marker = f"{os.getpid()}.{len(str(tmp_path))}"
    _run(tmp_path, _script(f"(sleep 1{marker} &) ; echo started"))
    survivors = subprocess.run(["pgrep", "-f", f"sleep 1{marker}"], capture_output=True, text=True)
    assert survivors.stdout.strip() == "", "a background job outlived its sandbox"


def test_default_mode_allows_what_runs_sandboxed_but_not_when_auto_allow_is_off(tmp_path: Path) -> None:
    _, result = _run(tmp_path, _script("touch made.txt"), settings={"autoAllowBashIfSandboxed": False})
    assert not (tmp_path / "made.txt").exists()
    assert [d["tool_name"] for d in result["permission_denials"]] == ["Bash"]


def test_plan_mode_and_deny_rules_still_hold_inside_the_sandbox(tmp_path: Path) -> None:
    _, planned = _run(tmp_path, _script("touch planned.txt"), "--permission-mode", "plan")
    assert not (tmp_path / "planned.txt").exists() and planned["permission_denials"]
    _, denied = _run(tmp_path, _script("touch denied.txt"), "--disallowedTools", "Bash(touch:*)")
    assert not (tmp_path / "denied.txt").exists() and denied["permission_denials"]


def test_leaving_the_sandbox_goes_back_through_the_gate_and_only_where_allowed(tmp_path: Path) -> None:
    outside = Path("/etc") / f"queryloop-sandbox-test-{os.getpid()}"
    text = _script(f"touch {outside}", dangerouslyDisableSandbox=True)
    try:
        _, asked = _run(tmp_path, text)
        assert not outside.exists(), "headless, the request to leave is denied"
        assert [d["tool_name"] for d in asked["permission_denials"]] == ["Bash"]
        results, kept = _run(tmp_path, text, settings={"allowUnsandboxedCommands": False})
        assert not outside.exists() and kept["permission_denials"] == []
        assert "Read-only file system" in results[0], "the request is ignored: the command ran inside"
    finally:
        outside.unlink(missing_ok=True)


def test_an_excluded_command_runs_outside_through_the_ordinary_gate(tmp_path: Path) -> None:
    _, result = _run(tmp_path, _script("touch excluded.txt"), settings={"excludedCommands": ["touch:*"]})
    assert not (tmp_path / "excluded.txt").exists(), "outside the sandbox, touch needs approval: denied headless"
    assert [d["tool_name"] for d in result["permission_denials"]] == ["Bash"]


def _without_bwrap(tmp_path: Path) -> str:
    """A PATH with bash and python but no bwrap: the sandbox cannot start there."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for program in ("bash", "python3", "touch", "sh"):
        found = subprocess.run(["which", program], capture_output=True, text=True, check=True).stdout.strip()
        (bin_dir / program).symlink_to(found)
    return str(bin_dir)


def test_where_bubblewrap_cannot_start_the_run_says_so_once_and_falls_back_to_the_gate(tmp_path: Path) -> None:
    path = _without_bwrap(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    with MockApi(_script("touch a.txt", "touch b.txt")) as api:
        run = run_cli(
            ["-p", "go", "--model", "mock-primary", "--permission-mode", "default", "--sandbox"],
            api=api,
            cwd=work,
            fmt="json",
            PATH=path,
        )
    assert run.stderr.count("sandbox unavailable") == 1, run.stderr
    assert "bubblewrap is not installed" in run.stderr
    assert not (work / "a.txt").exists() and len(run.result["permission_denials"]) == 2


def test_fail_if_unavailable_refuses_to_start_without_a_sandbox(tmp_path: Path) -> None:
    path = _without_bwrap(tmp_path)
    with MockApi(_script("touch a.txt")) as api:
        settings = json.dumps({"sandbox": {"enabled": True, "failIfUnavailable": True}})
        run = run_cli(["-p", "go", "--model", "mock-primary", "--settings", settings], api=api, cwd=tmp_path, PATH=path)
        assert list(api.requests) == [], "no model request is sent"
    assert run.returncode == 1
    assert "sandbox is required" in run.stderr and "Traceback" not in run.stderr


def test_a_malformed_sandbox_setting_is_one_clear_error(tmp_path: Path) -> None:
    settings = json.dumps({"sandbox": {"enabled": "yes"}})
    with MockApi(_script("touch a.txt")) as api:
        run = run_cli(["-p", "go", "--model", "mock-primary", "--settings", settings], api=api, cwd=tmp_path)
    assert run.returncode == 1 and "sandbox.enabled" in run.stderr.replace("/", ".")
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr


def test_the_python_api_runs_bash_in_the_sandbox_from_its_settings(tmp_path: Path) -> None:
    code = f"""
import asyncio, json, queryloop
async def main():
    options = queryloop.QueryOptions(cwd={str(tmp_path)!r}, model="mock-primary", permission_mode="default",
                                     settings=json.dumps({{"sandbox": {{"enabled": True}}}}))
    async for message in queryloop.query(prompt="go", options=options):
        pass
asyncio.run(main())
"""
    outside = tmp_path.parent / f"{tmp_path.name}-outside.txt"
    with MockApi(_script(f"echo in > in.txt; echo out > {outside}")) as api:
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            env=cli_env(api),
            cwd=ROOT,
            timeout=HANG_GUARD_S,
        )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "in.txt").exists() and not outside.exists()


def test_a_sandboxed_command_that_times_out_leaves_no_process(tmp_path: Path) -> None:
    marker = f"2{os.getpid()}"
    text = _script(f"sleep {marker}", timeout=1500)
    with MockApi(text) as api:
        args = ["-p", "go", "--model", "mock-primary", "--permission-mode", "default", "--sandbox"]
        run = run_cli(args, api=api, cwd=tmp_path, fmt="json")
    assert run.result["is_error"] is False
    assert live_members_of(marker) == []


def live_members_of(marker: str) -> list[str]:
    found = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True)
    return found.stdout.split()


def test_the_bridge_runs_from_a_folder_the_sandbox_sees_wherever_queryloop_is_installed(tmp_path: Path) -> None:
    from queryloop.handlers.tools.services.sandbox import Sandbox, SandboxPolicy

    sandbox = Sandbox(SandboxPolicy(enabled=True, allowed_domains=("localhost",)), cwd=tmp_path, capture=False)
    try:
        argv = sandbox.prepare("true", {}).argv
        script = Path(argv[argv.index("-S") + 1])
        assert script.parent == sandbox.scratch / "net" and script.read_bytes(), "a copy in the folder bound read-only"
        assert ["--ro-bind", str(script.parent), str(script.parent)] == list(
            argv[argv.index(str(script.parent)) - 1 :][:3]
        )
    finally:
        sandbox.close()
