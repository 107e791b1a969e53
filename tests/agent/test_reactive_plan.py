"""What a reactive compaction summarises and keeps (``queryloop.handlers.context.services.reactive``)."""

from __future__ import annotations

from typing import Any

from queryloop.handlers.context.services.reactive import reactive_plan, shrunk_plan, token_gap


def transcript(rounds: int, chars: int = 4000) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for i in range(rounds):
        call = {"type": "tool_use", "id": f"t{i}", "name": "Bash", "input": {"command": "x"}}
        messages.append({"role": "assistant", "content": [call]})
        result = {"type": "tool_result", "tool_use_id": f"t{i}", "content": "0" * chars}
        messages.append({"role": "user", "content": [result]})
    return messages


def test_the_gap_is_read_from_the_prompt_too_long_message() -> None:
    assert token_gap("prompt is too long: 200251 tokens > 200000 maximum") == 251
    assert token_gap("prompt is too long") is None
    assert token_gap("prompt is too long: 5 tokens > 10 maximum") is None


def test_one_round_has_nothing_older_to_summarise() -> None:
    assert reactive_plan(transcript(0), gap=None) is None
    assert reactive_plan(transcript(1), gap=None) is None


def test_the_newest_round_is_kept_unless_the_gap_is_larger_than_it() -> None:
    messages = transcript(6)
    plan = reactive_plan(messages, gap=10)
    assert plan is not None and list(plan.recent) == messages[-2:] and plan.older_groups == 6
    seeded = reactive_plan(messages, gap=2500)  # over the newest round (~1 000 tokens) by ~1½ rounds
    assert seeded is not None and list(seeded.recent) == messages[-6:]


def test_a_shrink_keeps_the_rounds_covering_the_gap_halves_near_all_and_ends_at_the_prompt() -> None:
    plan = reactive_plan(transcript(6), gap=None)
    assert plan is not None
    by_gap = shrunk_plan(plan, gap=1500)
    assert by_gap is not None and by_gap.older_groups == 4
    halved = shrunk_plan(plan, gap=10**6)
    assert halved is not None and halved.older_groups == 3
    one = shrunk_plan(plan, gap=None)
    assert one is not None and one.older_groups == 5
    last = reactive_plan(transcript(2), gap=None)
    assert last is not None and shrunk_plan(last, gap=None) is None
