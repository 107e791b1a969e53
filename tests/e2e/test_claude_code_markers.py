"""End-to-end: the markers Claude Code 2.1.235 puts in what a program or the model reads (issue 27: 1, 3, 5, 6).

Each expectation was observed by running the real Claude Code against the embedded
server with the same scenario (2026-12-02). The sentences are our own; what is
asserted is what a program could key on: a prefix (``API Error: <status>``,
``Output redirection to '<absolute path>'``, ``Permission to use Bash with command
<command>``, ``PreToolUse:<tool> hook``), a tag (``<tool_use_error>``,
``<system-reminder>``), a name, and which refusals ``permission_denials`` lists. Read's
output is compared byte for byte.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from .harness import CliRun, MockApi, run_cli
from .test_hooks_and_permissions import script, settings
from .test_request_layer import scenario

pytestmark = pytest.mark.slow  # ~40 s in all: tools/test.sh --fast leaves the module out

DONE = '    - reply: {content: [{text: "done"}]}\n'
ROOT = Path(__file__).resolve().parent.parent.parent
FLAKY = ROOT / "tests" / "fixtures" / "mcp" / "flaky_server.py"


def _calls(*inputs: str) -> str:
    """One reply per tool_use (``{name: ..., input: ...}``), then "done"."""
    return "".join(f"    - reply: {{content: [{{tool_use: {i}}}]}}\n" for i in inputs) + DONE


def _results(run: CliRun) -> list[dict[str, Any]]:
    """The tool_result blocks of the stream-json user lines, in the order they were shown."""
    return [b for line in run.of("user") for b in line["message"]["content"] if b.get("type") == "tool_result"]


def _sent_results(api: MockApi) -> list[dict[str, Any]]:
    """The tool_result blocks the last request sent, in the order it sent them."""
    return [b for b in api.requests[-1].messages[-1]["content"] if b.get("type") == "tool_result"]


def _run(tmp_path: Path, steps: str, *args: str) -> tuple[CliRun, MockApi]:
    with MockApi(scenario(f"  mock-primary:\n{steps}")) as api:
        run = run_cli(["-p", "go", "--model", "mock-primary", *args], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    return run, api


# ---- item 6: Read's output, byte for byte ---------------------------------------------------------


def test_read_numbers_lines_as_claude_code_does_with_the_empty_line_after_the_last_newline(tmp_path: Path) -> None:
    (tmp_path / "small.txt").write_text("alpha\nbeta\n")
    (tmp_path / "three.txt").write_text("one\ntwo\nthree\n")
    (tmp_path / "crlf.txt").write_bytes(b"a\r\nb\r\n")
    (tmp_path / "nonl.txt").write_text("no newline")
    steps = _calls(
        "{name: Read, input: {file_path: small.txt}}",
        "{name: Read, input: {file_path: three.txt, offset: 2, limit: 1}}",
        "{name: Read, input: {file_path: crlf.txt}}",
        "{name: Read, input: {file_path: nonl.txt}}",
    )
    run, _ = _run(tmp_path, steps, "--permission-mode", "default")
    # Claude Code 2.1.235: "1\talpha\n2\tbeta\n3\t", "2\ttwo" (no note for the model's own limit), …
    assert [r["content"] for r in _results(run)] == [
        "1\talpha\n2\tbeta\n3\t",
        "2\ttwo",
        "1\ta\n2\tb\n3\t",
        "1\tno newline",
    ]
    assert not any(r["is_error"] for r in _results(run))


def test_reading_an_empty_file_or_past_the_end_is_a_system_reminder_not_an_error(tmp_path: Path) -> None:
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "three.txt").write_text("one\ntwo\nthree\n")
    steps = _calls(
        "{name: Read, input: {file_path: empty.txt}}", "{name: Read, input: {file_path: three.txt, offset: 9}}"
    )
    run, _ = _run(tmp_path, steps)
    empty, past = _results(run)
    for result in (empty, past):  # Claude Code: <system-reminder>Warning: …</system-reminder>, no is_error
        assert result["is_error"] is False
        assert result["content"].startswith("<system-reminder>") and result["content"].endswith("</system-reminder>")
    assert "(9)" not in past["content"] and "offset 9" in past["content"] and "4 lines" in past["content"], (
        "the file is split on newlines as Claude Code splits it: three lines and the empty one after them"
    )


def test_parallel_reads_are_sent_back_in_the_models_order_each_shown_once(tmp_path: Path) -> None:
    for name in "abc":
        (tmp_path / f"{name}.txt").write_text(name.upper() + "\n")
    reads = ", ".join(f"{{tool_use: {{name: Read, input: {{file_path: {n}.txt}}}}}}" for n in "abc")
    run, api = _run(tmp_path, f"    - reply: {{content: [{reads}]}}\n{DONE}")
    ids = [b["id"] for b in api.requests[1].messages[-2]["content"] if b["type"] == "tool_use"]
    # Claude Code sends the results in the model's order; its stream-json shows them as they complete.
    assert [r["tool_use_id"] for r in _sent_results(api)] == ids
    assert [r["content"] for r in _sent_results(api)] == ["1\tA\n2\t", "1\tB\n2\t", "1\tC\n2\t"]
    assert sorted(r["tool_use_id"] for r in _results(run)) == sorted(ids)


# ---- items 1 and 3: refusals, their markers and permission_denials ---------------------------------


def test_a_refused_redirection_names_the_absolute_file_and_is_listed(tmp_path: Path) -> None:
    steps = _calls('{name: Bash, input: {command: "echo hi > out.txt"}}')
    run, _ = _run(tmp_path, steps, "--permission-mode", "default", "--allowed-tools", "Bash(echo:*)", "Write")
    (result,) = _results(run)
    # Claude Code: "Output redirection to '<cwd>/out.txt' was blocked. …", listed in permission_denials
    assert result["is_error"] is True
    assert result["content"].startswith(f"Output redirection to '{tmp_path.resolve() / 'out.txt'}'")
    assert run.result["permission_denials"] == [
        {"tool_name": "Bash", "tool_use_id": result["tool_use_id"], "tool_input": {"command": "echo hi > out.txt"}}
    ]
    assert not (tmp_path / "out.txt").exists()


def test_a_bare_bash_allow_rule_runs_a_redirection_as_claude_code_does(tmp_path: Path) -> None:
    run, _ = _run(tmp_path, _calls('{name: Bash, input: {command: "echo hi > out.txt"}}'), "--allowed-tools", "Bash")
    assert (tmp_path / "out.txt").read_text() == "hi\n"
    assert run.result["permission_denials"] == []


def test_a_read_deny_rule_refuses_read_as_an_input_error_and_bash_cat_as_a_listed_denial(tmp_path: Path) -> None:
    (tmp_path / "data.txt").write_text("secret\n")
    deny = json.dumps({"permissions": {"deny": ["Read(./data.txt)"]}})
    steps = _calls("{name: Read, input: {file_path: data.txt}}", '{name: Bash, input: {command: "cat data.txt"}}')
    run, _ = _run(tmp_path, steps, "--permission-mode", "default", "--allowed-tools", "Bash", "--settings", deny)
    read, cat = _results(run)
    # Claude Code: "<tool_use_error>File is in a directory that is denied …</tool_use_error>", not listed;
    # "Permission to use Bash with command cat data.txt has been denied.", listed.
    assert read["is_error"] is True and read["content"].startswith("<tool_use_error>")
    assert read["content"].endswith("</tool_use_error>")
    assert cat["is_error"] is True and cat["content"].startswith("Permission to use Bash with command cat data.txt ")
    assert [d["tool_use_id"] for d in run.result["permission_denials"]] == [cat["tool_use_id"]]
    assert "secret" not in json.dumps(_results(run))


# ---- item 5: markers in refusals and errors ---------------------------------------------------------


def test_a_pretooluse_hook_block_names_the_hook_event_and_tool_and_is_listed(tmp_path: Path) -> None:
    hook = script(
        tmp_path,
        "pre.sh",
        'case "$(cat)" in *one*) echo "policy says no" >&2; exit 2;; esac\n'
        'echo \'{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", '
        '"permissionDecisionReason": "json says no"}}\'\n',
    )
    hooks = settings(PreToolUse=[{"matcher": "Bash", "hooks": [{"type": "command", "command": hook}]}])
    steps = _calls('{name: Bash, input: {command: "echo one"}}', '{name: Bash, input: {command: "echo two"}}')
    run, _ = _run(tmp_path, steps, "--allowed-tools", "Bash", "--settings", hooks)
    one, two = _results(run)
    # Claude Code: "PreToolUse:Bash hook error: [<command>]: policy says no" and "json says no"; both listed
    assert one["content"].startswith("PreToolUse:Bash hook") and one["content"].rstrip().endswith("policy says no")
    assert two["content"].rstrip().endswith("json says no")
    assert [d["tool_use_id"] for d in run.result["permission_denials"]] == [one["tool_use_id"], two["tool_use_id"]]


def test_a_headless_denial_names_the_tool_and_a_file_tools_absolute_path(tmp_path: Path) -> None:
    steps = _calls('{name: Write, input: {file_path: w.txt, content: "x"}}')
    run, _ = _run(tmp_path, steps, "--permission-mode", "default")
    (result,) = _results(run)
    # Claude Code: "… permissions to write to <cwd>/w.txt, but you haven't granted it yet.", listed
    assert result["is_error"] is True and "Write" in result["content"]
    assert str(tmp_path.resolve() / "w.txt") in result["content"]
    assert [d["tool_name"] for d in run.result["permission_denials"]] == ["Write"]


def test_an_mcp_tool_denied_headless_names_the_tool_and_is_listed(tmp_path: Path) -> None:
    folder = tmp_path / "mcp"
    folder.mkdir()
    (folder / "plan.json").write_text(json.dumps({"tools": ["echo"]}))
    config = json.dumps({"mcpServers": {"flaky": {"command": sys.executable, "args": [str(FLAKY), str(folder)]}}})
    steps = _calls("{name: mcp__flaky__echo, input: {text: hi}}")
    run, _ = _run(tmp_path, steps, "--permission-mode", "default", "--mcp-config", config)
    (result,) = _results(run)
    assert result["is_error"] is True and "mcp__flaky__echo" in result["content"]
    assert [d["tool_name"] for d in run.result["permission_denials"]] == ["mcp__flaky__echo"]


def test_a_disallowed_tool_is_no_such_tool_in_a_tool_use_error_tag_and_no_denial(tmp_path: Path) -> None:
    run, _ = _run(tmp_path, _calls('{name: Bash, input: {command: "echo hi"}}'), "--disallowed-tools", "Bash")
    (result,) = _results(run)
    # Claude Code: "<tool_use_error>Error: No such tool available: Bash. …</tool_use_error>", not listed
    assert result["content"].startswith("<tool_use_error>Error: No such tool available: Bash. ")
    assert result["content"].endswith("</tool_use_error>")
    assert run.result["permission_denials"] == []


def test_overloaded_and_server_errors_after_retries_read_api_error_and_the_status(tmp_path: Path) -> None:
    for status, words in ((529, "Overloaded"), (500, "Internal server error")):
        with MockApi(scenario(f"  mock-primary:\n    - error: {{status: {status}}}\n      repeat: 3\n")) as api:
            run = run_cli(["-p", "go", "--model", "mock-primary", "--max-retries", "1"], api=api, cwd=tmp_path)
        # Claude Code: "API Error: 529 Overloaded. …" / "API Error: 500 Internal server error. …"
        assert run.returncode == 1
        assert run.result["result"].startswith(f"API Error: {status} {words}")
        assert run.result["api_error_status"] == status and run.result["is_error"] is True
