"""The embedded server's prompt cache: what each request reads from it and writes to it, per model.

Owns the server's model of Anthropic prompt caching, simple and deterministic so a test
can predict it; it does not answer HTTP (``server`` calls it) and keeps nothing else.

* A request's prompt is a sequence of **segments** in the order the API caches it: each
  tool definition, then each system block (a string system prompt is one text block),
  then each content block of each message (string content is one text block). A
  segment is identified by its role (``tool``, ``system``, ``user``, ``assistant``) and
  the compact JSON of the block without ``cache_control`` (a string and its one text
  block are the same segment, as they are the same prompt). Its size is the characters
  of its compact JSON as sent, so the sizes add up to no more than the request's input
  estimate.
* Prefix *i* (segments 1 … *i*) is identified by a running SHA-256 of the segments and
  counts ``ceil(characters / 4)`` tokens, the server's estimate everywhere.
* A **breakpoint** is a segment carrying ``cache_control``; more than
  :data:`MAX_BREAKPOINTS` is refused with the real API's 400 (:func:`breakpoint_problem`).
* **Read**: the longest prefix this model has stored that ends at a breakpoint or at
  one of the 20 segments before one (the API's lookback) gives
  ``cache_read_input_tokens``.
* **Write**: every breakpoint's prefix of at least ``min_tokens`` tokens is stored
  (the scenario's ``prompt_cache: {min_tokens: N}``, default 1024 as for Sonnet);
  ``cache_creation_input_tokens`` is the last stored prefix's tokens beyond the read.
* ``input_tokens`` is the rest of the request's estimate. Entries never expire (the
  5-minute ttl is not modelled); a model keeps its latest :data:`MAX_ENTRIES` prefixes.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import Any

import attrs

__all__ = [
    "DEFAULT_MIN_TOKENS",
    "LOOKBACK_SEGMENTS",
    "MAX_BREAKPOINTS",
    "MAX_ENTRIES",
    "CacheUsage",
    "PromptCache",
    "breakpoint_paths",
    "breakpoint_problem",
    "count_breakpoints",
    "has_breakpoints",
    "usage_fields",
    "without_breakpoints",
]

DEFAULT_MIN_TOKENS = 1024
"""The shortest prefix (server tokens) that is written to the cache, unless a scenario says otherwise."""
MAX_BREAKPOINTS = 4
"""The most ``cache_control`` markers one request may carry (the API's limit)."""
LOOKBACK_SEGMENTS = 20
"""How many segments before a breakpoint a cache hit is looked for (the API's block lookback)."""
MAX_ENTRIES = 4096
"""Prefixes remembered per model (the oldest are forgotten first)."""


@attrs.frozen(kw_only=True)
class CacheUsage:
    """What one request read from and wrote to the cache, in server tokens."""

    read: int = 0
    write: int = 0
    breakpoints: int = 0


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def has_breakpoints(raw_body: bytes) -> bool:
    """Whether a request body mentions ``cache_control`` at all (the cheap test before any work)."""
    return b'"cache_control"' in raw_body


def _bare(block: Any) -> Any:
    if isinstance(block, dict) and "cache_control" in block:
        return {k: v for k, v in block.items() if k != "cache_control"}
    return block


def _blocks(value: Any) -> list[Any]:
    """Content or a system prompt as a list of blocks (a string is one text block)."""
    if isinstance(value, str):
        return [{"type": "text", "text": value}] if value else []
    return list(value) if isinstance(value, list) else []


def without_breakpoints(system: Any, messages: Any, tools: Any) -> tuple[Any, Any, Any]:
    """``system``, ``messages`` and ``tools`` with every block's ``cache_control`` removed (the estimate's input)."""
    if isinstance(system, list):
        system = [_bare(b) for b in system]
    if isinstance(tools, list):
        tools = [_bare(t) for t in tools]
    if isinstance(messages, list):
        messages = [
            {**m, "content": [_bare(b) for b in m["content"]]}
            if isinstance(m, dict) and isinstance(m.get("content"), list)
            else m
            for m in messages
        ]
    return system, messages, tools


def _segments(system: Any, messages: Any, tools: Any) -> Iterator[tuple[str, Any, Any]]:
    """``(role, block as identified, value as sent)`` in cache order: tools, system, messages."""
    for tool in tools if isinstance(tools, list) else ():
        yield "tool", tool, tool
    if isinstance(system, str):
        yield from (("system", block, system) for block in _blocks(system))
    else:
        yield from (("system", block, block) for block in _blocks(system))
    for message in messages if isinstance(messages, list) else ():
        if not isinstance(message, dict):
            continue
        role, content = str(message.get("role")), message.get("content")
        if isinstance(content, str):
            yield from ((role, block, content) for block in _blocks(content))
        else:
            yield from ((role, block, block) for block in _blocks(content))


def _is_breakpoint(block: Any) -> bool:
    return isinstance(block, dict) and isinstance(block.get("cache_control"), dict)


def breakpoint_paths(system: Any, messages: Any, tools: Any) -> tuple[str, ...]:
    """Where the ``cache_control`` markers are: ``tools[i]``, ``system[i]``, ``messages[i][j]``, in cache order."""
    paths = [f"tools[{i}]" for i, t in enumerate(tools if isinstance(tools, list) else ()) if _is_breakpoint(t)]
    if isinstance(system, list):
        paths += [f"system[{i}]" for i, b in enumerate(system) if _is_breakpoint(b)]
    for i, message in enumerate(messages if isinstance(messages, list) else ()):
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            paths += [f"messages[{i}][{j}]" for j, b in enumerate(content) if _is_breakpoint(b)]
    return tuple(paths)


def count_breakpoints(system: Any, messages: Any, tools: Any) -> int:
    """How many tool definitions, system blocks and message blocks carry ``cache_control``."""
    return sum(1 for _, block, _ in _segments(system, messages, tools) if _is_breakpoint(block))


def breakpoint_problem(system: Any, messages: Any, tools: Any) -> str | None:
    """The real API's 400 message when a request carries too many breakpoints, else None."""
    found = count_breakpoints(system, messages, tools)
    if found <= MAX_BREAKPOINTS:
        return None
    return f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {found}."


@attrs.frozen
class _Prefix:
    digest: bytes
    tokens: int
    breakpoint: bool


def _prefixes(system: Any, messages: Any, tools: Any) -> list[_Prefix]:
    running = hashlib.sha256()
    chars = 0
    out: list[_Prefix] = []
    for role, block, sent in _segments(system, messages, tools):
        running.update(_compact([role, _bare(block)]).encode("utf-8"))
        chars += len(_compact(_bare(sent)))
        out.append(_Prefix(running.copy().digest(), math.ceil(chars / 4), _is_breakpoint(block)))
    return out


class PromptCache:
    """Per model, the prefixes written so far; :meth:`account` reads and writes one request's."""

    def __init__(self, *, min_tokens: int = DEFAULT_MIN_TOKENS) -> None:
        if min_tokens < 0:
            raise ValueError(f"a prompt cache's min_tokens must be >= 0, got {min_tokens}")
        self.min_tokens = min_tokens
        self._seen: dict[str, OrderedDict[bytes, int]] = {}

    def account(self, model: str, system: Any, messages: Any, tools: Any) -> CacheUsage:
        """Read the longest stored prefix in reach of a breakpoint, then store every long-enough breakpoint's."""
        prefixes = _prefixes(system, messages, tools)
        marks = [i for i, p in enumerate(prefixes) if p.breakpoint]
        if not marks:
            return CacheUsage()
        seen = self._seen.setdefault(model, OrderedDict())
        reach = sorted({j for i in marks for j in range(max(0, i - LOOKBACK_SEGMENTS + 1), i + 1)}, reverse=True)
        read = next((prefixes[j].tokens for j in reach if prefixes[j].digest in seen), 0)
        written = 0
        for i in marks:
            prefix = prefixes[i]
            if prefix.tokens < self.min_tokens:
                continue
            seen[prefix.digest] = prefix.tokens
            seen.move_to_end(prefix.digest)
            written = prefix.tokens
        while len(seen) > MAX_ENTRIES:
            seen.popitem(last=False)
        return CacheUsage(read=read, write=max(0, written - read), breakpoints=len(marks))


def usage_fields(total: int, usage: CacheUsage) -> Mapping[str, int]:
    """A reply's input-side usage: the request's estimate split into uncached, read and written tokens."""
    read = min(usage.read, total)
    write = min(usage.write, total - read)
    return {"input_tokens": total - read - write, "cache_read_input_tokens": read, "cache_creation_input_tokens": write}
