"""End-to-end: a repository's own files that the start reads, made hostile, through the real CLI.

A checked-out repository can put a FIFO, a symlink to ``/dev/zero``, a symlink loop or a file
of megabytes where an instruction, agent, settings or MCP file is expected. Each must give one
clear line and never hang the start or read without end (``queryloop.fsm.read_text_file``):
an instruction file is skipped with a warning (instructions are optional), an agent file or an
``--mcp-config`` file stops the run naming the file, as an unreadable one always did.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from queryloop.fsm.model.textfile import MAX_TEXT_FILE_BYTES

from .harness import MockApi, run_cli
from .test_request_layer import scenario

HELLO = scenario("""  mock-primary:
    - reply: {content: [{text: "hello"}]}
""")

# what the file is made, and the words its line must hold
KINDS = {
    "fifo": "is a FIFO (named pipe), not a regular file",
    "dev-zero": "is a character device, not a regular file",
    "symlink-loop": "is a symlink loop",
    "oversized": "is larger than 1 MiB, the cap on a file read here",
}


def make(path: Path, kind: str, *, head: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "symlink-loop":
        path.with_name("other.loop").symlink_to(path.name)
        path.symlink_to("other.loop")
    else:
        path.write_text(head + "x" * (MAX_TEXT_FILE_BYTES + 1 - len(head)))
    return path


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[-2000:]
    return lines[0]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_claude_md_that_cannot_be_read_is_skipped_with_one_warning_and_the_run_goes_on(
    tmp_path: Path, kind: str
) -> None:
    path = make(tmp_path / "CLAUDE.md", kind)
    with MockApi(HELLO) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.result["result"] == "hello"
    line = one_line(run.stderr)
    assert line.startswith(f"queryloop: warning: instruction file skipped: {path}") and KINDS[kind] in line, line
    assert "project-instructions" not in str(api.requests[0].messages)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_an_agent_file_that_cannot_be_read_stops_the_start_with_one_line_naming_it(tmp_path: Path, kind: str) -> None:
    path = make(tmp_path / ".claude" / "agents" / "reviewer.md", kind, head="---\nname: r\ndescription: d\n---\n")
    with MockApi(HELLO) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path, timeout=120)
    assert run.returncode == 1
    line = one_line(run.stderr)
    assert str(path) in line and KINDS[kind] in line, line
    assert not api.requests


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_an_mcp_config_file_that_cannot_be_read_stops_the_start_with_one_line_naming_it(
    tmp_path: Path, kind: str
) -> None:
    path = make(tmp_path / "servers.json", kind, head='{"mcpServers": {}, "x": "')
    with MockApi(HELLO) as api:
        run = run_cli(
            ["-p", "hi", "--model", "mock-primary", "--mcp-config", str(path)], api=api, cwd=tmp_path, timeout=120
        )
    assert run.returncode == 1
    line = one_line(run.stderr)
    assert f"--mcp-config {path}: " in line and KINDS[kind] in line, line
    assert not api.requests


@pytest.mark.parametrize("name", [".claude/settings.json", ".mcp.json"])
def test_an_oversized_settings_or_mcp_json_file_stops_the_start_naming_the_file_and_the_cap(
    tmp_path: Path, name: str
) -> None:
    make(tmp_path / name, "oversized", head='{"x": "')
    with MockApi(HELLO) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path, timeout=120)
    assert run.returncode == 1
    line = one_line(run.stderr)
    assert name in line and KINDS["oversized"] in line, line
    assert not api.requests


@pytest.mark.parametrize("name", [".claude/settings.json", ".mcp.json"])
@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "symlink-loop"])
def test_a_settings_or_mcp_json_file_that_is_no_regular_file_is_skipped_as_claude_code_skips_it(
    tmp_path: Path, name: str, kind: str
) -> None:
    make(tmp_path / name, kind)
    with MockApi(HELLO) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.result["result"] == "hello"


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_system_prompt_file_that_cannot_be_read_is_one_usage_line_naming_it(tmp_path: Path, kind: str) -> None:
    path = make(tmp_path / "prompt.md", kind)
    with MockApi(HELLO) as api:
        run = run_cli(
            ["-p", "hi", "--model", "mock-primary", "--system-prompt-file", str(path)],
            api=api,
            cwd=tmp_path,
            timeout=120,
        )
    assert run.returncode != 0
    line = one_line(run.stderr)
    assert f"--system-prompt-file {path}: {KINDS[kind]}" in line, line
    assert not api.requests
