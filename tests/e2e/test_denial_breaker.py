"""End-to-end: the repeated-denial breaker — a model that keeps proposing the same denied call is stopped.

A deliberate difference from Claude Code: without ``--max-turns`` a denied call goes back
to the model as an error like any tool turn, so a model that proposes it again and again
would loop, paid, forever. The same denied calls (names and inputs, in any order)
proposed again ``max_denied_call_repeats`` (3) times in a row end the run in
``denial_repeated``. The real CLI runs against the embedded server, headless in the
default permission mode, so a Write or a writing Bash command asks and is denied.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .harness import MockApi, assert_ledger_closed, run_cli
from .test_request_layer import scenario

pytestmark = pytest.mark.slow  # ~20 s in all: tools/test.sh --fast leaves the module out

WRITE = '{tool_use: {name: Write, input: {file_path: x.txt, content: "hi"}}}'
TOUCH = '{tool_use: {name: Bash, input: {command: "touch y.txt"}}}'
OTHER = '{tool_use: {name: Bash, input: {command: "touch z.txt"}}}'
ALLOWED = '{tool_use: {name: Bash, input: {command: "ls"}}}'
BOTH = f"{{content: [{WRITE}, {TOUCH}]}}"
SWAPPED = f"{{content: [{TOUCH}, {WRITE}]}}"  # the same calls in another order: the same proposal
ARGS = ["-p", "go", "--model", "mock-primary", "--permission-mode", "default"]


def _replies(*replies: str) -> str:
    return scenario("  mock-primary:\n" + "".join(f"    - reply: {r}\n" for r in replies))


def test_the_same_denied_calls_proposed_again_three_times_in_a_row_end_the_run(tmp_path: Path) -> None:
    with MockApi(_replies(BOTH, SWAPPED, BOTH, SWAPPED, BOTH, '{content: [{text: "never"}]}')) as api:
        run = run_cli(ARGS, api=api, cwd=tmp_path)
    assert run.returncode == 1, run.stderr
    assert len(api.requests) == 4, "the denial, then repeats 1 and 2 sent back as errors, repeat 3 ends it"
    turn = ["tools_requested", "permission_denied", "next_turn"]
    again = ["tools_requested", "repeated_denial_accepted", "next_turn"]
    assert run.reasons == [*turn, *again, *again, "tools_requested", "repeated_denial_breaker"]
    streak = [t["counters"]["denied_call_repeats"] for t in run.of("system", "transition")]
    assert max(streak) == 2 and streak[-1] == 2
    result = run.result
    assert (result["subtype"], result["is_error"], result["terminal_reason"]) == (
        "success",
        True,
        "repeated_denial_breaker",
    )
    assert result["result"] == "Stopped: the model proposed the same denied tool call 3 times in a row"
    assert len(result["permission_denials"]) == 8, "every denied call is recorded, the last turn's too"
    assert not (tmp_path / "x.txt").exists() and not (tmp_path / "y.txt").exists()
    assert_ledger_closed(api.requests)
    answered = {r["message"]["content"][0]["tool_use_id"] for r in run.of("user")}
    proposed = {b["id"] for a in run.of("assistant") for b in a["message"]["content"] if b["type"] == "tool_use"}
    assert proposed == answered, "the last turn's dangling tool_uses got their error results too"


@pytest.mark.parametrize("between", [OTHER, ALLOWED], ids=["another-denied-call", "a-permitted-call"])
def test_another_outcome_of_the_gate_in_between_resets_the_streak(tmp_path: Path, between: str) -> None:
    repeated = f"{{content: [{TOUCH}]}}"
    replies = [repeated] * 3 + [f"{{content: [{between}]}}"] + [repeated] * 3 + ['{content: [{text: "ok"}]}']
    with MockApi(_replies(*replies)) as api:
        run = run_cli(ARGS, api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert len(api.requests) == 8 and run.result["terminal_reason"] == "completed"
    gates = [r for r in run.all_reasons if r.startswith(("permission_", "repeated_denial_"))]
    middle = "permission_denied" if between == OTHER else "permission_granted"
    assert gates == [
        "permission_denied",
        "repeated_denial_accepted",
        "repeated_denial_accepted",
        middle,
        "permission_denied",
        "repeated_denial_accepted",
        "repeated_denial_accepted",
    ]
    assert_ledger_closed(api.requests)


def test_max_turns_still_ends_a_run_of_repeated_denials_first(tmp_path: Path) -> None:
    with MockApi(_replies(*[f"{{content: [{TOUCH}]}}"] * 5)) as api:
        run = run_cli([*ARGS, "--max-turns", "2"], api=api, cwd=tmp_path)
    assert run.returncode == 1, run.stderr
    assert len(api.requests) == 2
    assert run.reasons[-2:] == ["repeated_denial_accepted", "max_turns_reached"]
    assert run.result["terminal_reason"] == "max_turns" and run.result["subtype"] == "error_max_turns"


def test_a_denied_call_is_shown_as_it_is_decided_before_the_next_request(tmp_path: Path) -> None:
    """A refusal is complete at the gate: its `user` line comes before the next request, not at the end."""
    with MockApi(_replies(f"{{content: [{TOUCH}, {ALLOWED}]}}", '{content: [{text: "done"}]}')) as api:
        run = run_cli(ARGS, api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    kinds = [(line["type"], line.get("subtype")) for line in run.lines]
    users = [i for i, k in enumerate(kinds) if k == ("user", None)]
    requests = [i for i, k in enumerate(kinds) if k == ("system", "api_request")]
    assert len(users) == 2 and len(requests) == 2
    assert max(users) < requests[1], "both tool results, the refusal included, precede the second request"
    assert not any("(synthetic)" in str(line) for line in run.lines)
