"""The headless program beside Claude Code 2.1.235: slash commands in ``-p``, stream-json's flags, Bash's text, 401s.

Each row runs one probe in both programs and compares a few values a program reads
(the requests sent, the exit code, the result's flags, the tool result the model got,
the retry lines, the SessionEnd hook's ``reason``): ``same``, or by design with the
reason (docs/differences.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .reference import Observed, Probe, Row, held_to_its_row, observe

pytestmark = pytest.mark.slow  # two programs per probe

HOOK = {"type": "command", "command": "cat >> ended.json"}
ENDING = {".claude/settings.json": {"hooks": {"SessionEnd": [{"hooks": [HOOK]}]}}}


def _script(*steps: dict[str, Any]) -> str:
    return json.dumps({"schema_version": 1, "scenario": "probe", "model": "mock-primary", "default": list(steps)})


def _prompts(seen: Observed) -> tuple[str, ...]:
    """The text of each request's last user message (Claude Code puts reminders before it: its last block)."""
    texts = []
    for request in seen.requests:
        content = request.messages[-1]["content"] if request.messages[-1]["role"] == "user" else ""
        if isinstance(content, list):
            content = [b["text"] for b in content if b.get("type") == "text"][-1:] or [""]
            content = content[0]
        texts.append(str(content).strip())
    return tuple(texts)


def _tool_results(seen: Observed) -> tuple[str, ...]:
    """What the model was told of each tool call, in the last request."""
    last = seen.requests[-1].messages if seen.requests else ()
    blocks = [b for m in last if isinstance(m.get("content"), list) for b in m["content"]]
    return tuple(str(b.get("content")) for b in blocks if b.get("type") == "tool_result")


READERS: dict[str, Callable[[Observed], object]] = {
    "returncode": lambda seen: seen.returncode,
    "requests": lambda seen: len(seen.requests),
    "prompts": _prompts,
    "is_error": lambda seen: seen.result.get("is_error"),
    "num_turns": lambda seen: seen.result.get("num_turns"),
    "stdout_lines": lambda seen: len(seen.lines),
    "statuses": lambda seen: tuple(r.response_status for r in seen.requests),
    "retries": lambda seen: tuple(line["error_status"] for line in seen.lines if line.get("subtype") == "api_retry"),
    "tool_results": _tool_results,
}


def _command(prompt: str) -> Probe:
    return Probe(calls=(), prompt=prompt)


NOTHING_SENT = {"requests": 0, "returncode": 0, "is_error": False, "num_turns": 0}
ROWS: dict[str, Row] = {
    "an unknown command": Row(probe=_command("/foo"), queryloop=NOTHING_SENT),
    "an unknown command with words after it": Row(probe=_command("/foo bar"), queryloop=NOTHING_SENT),
    "an unknown command in capitals": Row(probe=_command("/FOO"), queryloop=NOTHING_SENT),
    "/clear": Row(probe=_command("/clear"), queryloop=NOTHING_SENT),
    # Claude Code prints the session's cost; here /cost is an unknown name: answered alike, no request
    "/cost": Row(probe=_command("/cost"), queryloop=NOTHING_SENT),
    "/compact with nothing to compact": Row(
        probe=_command("/compact"),
        queryloop={"requests": 0, "returncode": 1, "is_error": True},
        reference={"requests": 0, "returncode": 0, "is_error": False},
        design="a /compact that compacted nothing is an error result, so a script sees it "
        "([the program](cli.md#a-headless-run))",
    ),
    "a path that exists": Row(probe=_command("/usr/bin"), queryloop={"requests": 1, "prompts": ("/usr/bin",)}),
    "a path that exists, with words after it": Row(
        probe=_command("/tmp is where"), queryloop={"requests": 1, "prompts": ("/tmp is where",)}
    ),
    "a name with a dot": Row(probe=_command("/foo.bar"), queryloop={"requests": 1, "prompts": ("/foo.bar",)}),
    "a name with a slash": Row(probe=_command("/foo/bar"), queryloop={"requests": 1, "prompts": ("/foo/bar",)}),
    "a space after the slash": Row(probe=_command("/ foo"), queryloop={"requests": 1, "prompts": ("/ foo",)}),
    "stream-json without --verbose": Row(
        probe=Probe(calls=(), args=("--no-verbose",)),
        queryloop={"returncode": 1, "requests": 0, "stdout_lines": 0},
    ),
    "Bash echo hi": Row(
        probe=Probe(calls=(("Bash", {"command": "echo hi"}),), args=("--allowedTools", "Bash")),
        queryloop={"tool_results": ("hi",)},
    ),
    "Bash output between blank lines": Row(
        probe=Probe(calls=(("Bash", {"command": "printf '\\n\\n  x  \\n\\n'"}),), args=("--allowedTools", "Bash")),
        queryloop={"tool_results": ("  x",)},
    ),
    "a 401 that persists": Row(
        probe=Probe(
            calls=(),
            scenario=_script({"error": {"status": 401}, "repeat": 3}),
            env={"CLAUDE_CODE_MAX_RETRIES": "2"},
        ),
        queryloop={"statuses": (401, 401, 401), "retries": (401, 401), "returncode": 1, "is_error": True},
    ),
    "a 401 once": Row(
        probe=Probe(
            calls=(),
            scenario=_script({"error": {"status": 401}}, {"reply": {"content": [{"text": "ok"}]}}),
            env={"CLAUDE_CODE_MAX_RETRIES": "2"},
        ),
        queryloop={"statuses": (401, 200), "retries": (401,), "returncode": 0, "is_error": False},
    ),
}


def _read(observed: Observed, key: str) -> object:
    return READERS[key](observed)


@pytest.mark.parametrize("name", list(ROWS))
def test_each_cli_probe_is_the_same_in_both_programs_or_differs_by_design(name: str, tmp_path: Path) -> None:
    held_to_its_row(ROWS[name], _read, tmp_path)


@pytest.mark.parametrize(
    "scenario",
    [_script({"reply": {"content": [{"text": "done"}]}}), _script({"error": {"status": 400}})],
    ids=["answered", "failed"],
)
def test_the_session_end_hook_is_told_reason_other_in_both_programs(scenario: str, tmp_path: Path) -> None:
    probe = Probe(calls=(), scenario=scenario, home_files=ENDING)
    reasons = []
    for program in ("queryloop", "claude"):
        (tmp_path / program).mkdir()
        observe(program, probe, tmp_path / program)
        reasons.append(json.loads((tmp_path / program / "project" / "ended.json").read_text())["reason"])
    assert reasons == ["other", "other"]
