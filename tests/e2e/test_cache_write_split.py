"""End-to-end: the result's ``usage.cache_creation`` splits the run's cache writes by lifetime.

Claude Code 2.1.235's result ``usage`` (json, stream-json, the Agent SDK's ``ResultMessage``)
carries ``cache_creation: {ephemeral_1h_input_tokens, ephemeral_5m_input_tokens}``, the sums of
what its replies reported under that key (observed against this embedded server with
``ENABLE_PROMPT_CACHING_1H=1``; a reply without the split adds to neither). queryloop asks for
the 1-hour cache once the 5-minute one expired (docs/caching.md); these runs cross a pause so
its later replies carry 1-hour writes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from queryloop.handlers.request import UsageTotals
from queryloop.mockapi.server import RecordedRequest

from .harness import MockApi, run_cli
from .test_prompt_caching import CACHING_ON, PAUSED

pytestmark = pytest.mark.slow  # one CLI run: ~5 s quiet, ~16 s at load 4


def split(requests: list[RecordedRequest]) -> dict[str, int]:
    """The sums of the replies' ``cache_creation`` split (the server reports it for a 1-hour write)."""
    hour = [r for r in requests if r.cache_creation_1h_input_tokens]
    return {
        "ephemeral_1h_input_tokens": sum(r.cache_creation_1h_input_tokens for r in hour),
        "ephemeral_5m_input_tokens": sum(r.cache_creation_input_tokens for r in hour)
        - sum(r.cache_creation_1h_input_tokens for r in hour),
    }


def test_a_run_that_writes_for_an_hour_reports_the_one_hour_part_in_the_result_usage(tmp_path: Path) -> None:
    with MockApi(PAUSED) as api:
        run = run_cli(["-p", "go", "--model", "mock-primary", "--verbose"], api=api, cwd=tmp_path, **CACHING_ON)
        requests = api.requests
    assert run.returncode == 0, run.stderr
    usage = run.result["usage"]
    assert usage["cache_creation"] == split(requests)
    assert usage["cache_creation"]["ephemeral_1h_input_tokens"] > 0, "the pause switched the ttl"
    assert usage["cache_creation_input_tokens"] == sum(r.cache_creation_input_tokens for r in requests)
    unsplit = [r for r in requests if r.cache_creation_input_tokens and not r.cache_creation_1h_input_tokens]
    assert unsplit, "the 5-minute writes before the pause came without a split: they add to neither part"
    replies = {line["message"]["id"]: line["message"]["usage"] for line in run.of("assistant")}
    hourly = sum(u.get("cache_creation", {}).get("ephemeral_1h_input_tokens", 0) for u in replies.values())
    assert hourly == usage["cache_creation"]["ephemeral_1h_input_tokens"], "assistant lines carry each reply's split"


def test_the_split_of_a_parent_and_its_sub_agent_is_summed() -> None:
    def reply(hour: int, five: int) -> dict[str, object]:
        split = {"ephemeral_1h_input_tokens": hour, "ephemeral_5m_input_tokens": five}
        return {"input_tokens": 3, "cache_creation_input_tokens": hour + five, "cache_creation": split}

    parent = UsageTotals().add("mock-primary", reply(100, 0)).add("mock-primary", {"input_tokens": 5})
    child = UsageTotals().add("mock-primary", reply(0, 40)).add("mock-secondary", reply(7, 1))
    usage = (parent + child).usage()
    assert usage["cache_creation"] == {"ephemeral_1h_input_tokens": 107, "ephemeral_5m_input_tokens": 41}
    assert usage["cache_creation_input_tokens"] == 148
