"""The marked carrier of a request body spliced from its stored bytes is the very JSON serialising it gives."""

from __future__ import annotations

from typing import Any

import pytest

from queryloop.handlers.messages import MessageView, compact_json
from queryloop.handlers.request.services.body import _breakpoint_block, _marked_bytes, with_breakpoint

RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok — ünïcode", "is_error": False}

SHAPES: list[dict[str, Any]] = [
    {"role": "user", "content": [RESULT]},  # the usual carrier: spliced
    {"role": "user", "content": [RESULT, dict(RESULT, tool_use_id="toolu_2", content=[{"type": "text", "text": "x"}])]},
    {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "thinking", "thinking": "t"}]},  # not last
    {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": ""}]},  # empty last
    {"content": [RESULT], "role": "user"},  # content not the last key
    {"role": "user", "content": [dict(RESULT, cache_control={"type": "ephemeral"})]},  # already marked
    {"role": "user", "content": [RESULT], "meta": {"k": [1, 2]}},
]


@pytest.mark.parametrize("ttl", ["5m", "1h"])
@pytest.mark.parametrize("message", SHAPES)
def test_the_spliced_carrier_is_the_serialised_one(message: dict[str, Any], ttl: str) -> None:
    view = MessageView.of([{"role": "user", "content": "prompt"}, {"role": "assistant", "content": "a"}, message])
    block = _breakpoint_block(message["content"])
    marked = with_breakpoint(message, ttl)
    assert block is not None and marked is not None
    assert _marked_bytes(view, 2, block, ttl) == compact_json(marked).encode("utf-8")
