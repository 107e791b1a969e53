"""End-to-end: slash commands in a ``-p`` prompt are run or refused, never sent to the model as text."""

from __future__ import annotations

from pathlib import Path

import pytest

from .harness import MockApi, run_cli
from .test_request_layer import scenario

ANSWERS = scenario("""  mock-primary:
    - reply: {content: [{text: "first answer"}]}
    - reply: {content: [{text: "SUMMARY"}]}
    - reply: {content: [{text: "after"}]}
""")
SESSION = "11111111-2222-3333-4444-555555555555"


@pytest.mark.parametrize("prompt", ["/foo", "/foo bar baz", "/clear", "/clear now"])
def test_an_unknown_command_or_clear_in_print_mode_sends_nothing_and_succeeds(tmp_path: Path, prompt: str) -> None:
    with MockApi(ANSWERS) as api:
        run = run_cli(["-p", prompt, "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert api.requests == []
    assert (run.result["subtype"], run.result["is_error"], run.result["num_turns"]) == ("success", False, 0)
    assert ("/foo is not a command" in run.result["result"]) == prompt.startswith("/foo")


@pytest.mark.parametrize("prompt", ["/usr/bin", "/notes.md", "/foo/bar", "/ foo"])
def test_a_prompt_that_only_looks_like_a_command_is_sent_as_it_is(tmp_path: Path, prompt: str) -> None:
    with MockApi(ANSWERS) as api:
        run = run_cli(["-p", prompt, "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert [r.messages[-1]["content"] for r in api.requests] == [prompt]


def test_compact_in_print_mode_summarises_the_resumed_session_instead_of_sending_the_text(tmp_path: Path) -> None:
    with MockApi(ANSWERS) as api:
        first = run_cli(["-p", "hello", "--session-id", SESSION, "--model", "mock-primary"], api=api, cwd=tmp_path)
        compact = run_cli(
            ["-p", "/compact keep names", "--resume", SESSION, "--model", "mock-primary"], api=api, cwd=tmp_path
        )
        after = run_cli(["-p", "go on", "--resume", SESSION, "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert (first.returncode, compact.returncode, after.returncode) == (0, 0, 0), compact.stderr
    assert [line.get("subtype") for line in compact.lines if line.get("subtype") == "compact_boundary"] == [
        "compact_boundary"
    ]
    sent = [str(r.messages) for r in api.requests]
    assert len(sent) == 3 and "keep names" in sent[1] and "/compact" not in sent[1]
    assert "SUMMARY" in sent[2] and "first answer" not in sent[2]


def test_stream_json_output_without_verbose_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    with MockApi(ANSWERS) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path, verbose=False)
    assert run.returncode == 1
    assert (run.stdout, api.requests) == ("", [])
    assert run.stderr == "queryloop: --output-format stream-json needs --verbose (as in Claude Code)\n"
