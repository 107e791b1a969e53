"""The embedded server's prompt cache: what each request reads from it and writes to it, per model.

A simple, deterministic model of Anthropic's prompt caching, so a test can predict it (docs/caching.md).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs

__all__ = [
    "DEFAULT_MIN_TOKENS",
    "LOOKBACK_SEGMENTS",
    "MAX_BREAKPOINTS",
    "MAX_ENTRIES",
    "TTL_SECONDS",
    "CacheUsage",
    "PromptCache",
    "breakpoint_paths",
    "breakpoint_problem",
    "count_breakpoints",
    "has_breakpoints",
    "min_cacheable_tokens",
    "usage_fields",
    "without_breakpoints",
]

DEFAULT_MIN_TOKENS = 1024
"""The shortest prefix (server tokens) written for a model the documentation's table does not list."""
_MIN_TOKENS_BY_FAMILY: tuple[tuple[str, int], ...] = (
    # Anthropic's prompt-caching documentation, "cache limitations": the minimum cacheable
    # prompt length per model, matched here by the model id's start, most specific first.
    ("claude-opus-4-6", 4096),
    ("claude-opus-4-5", 4096),
    ("claude-haiku-4-5", 4096),
    ("claude-sonnet-4-6", 2048),
    ("claude-3-5-haiku", 2048),
    ("claude-3-haiku", 2048),
    ("claude-opus-4", 1024),
    ("claude-sonnet-4", 1024),
    ("claude-3-7-sonnet", 1024),
)
TTL_SECONDS: Mapping[str, float] = {"5m": 300.0, "1h": 3600.0}
"""How long an entry lives after its last use, by ``cache_control.ttl`` (no ttl is ``5m``)."""
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
    """Every token written, whatever its ttl."""
    breakpoints: int = 0
    write_1h: int = 0
    """The part of ``write`` written for an hour (``ttl: "1h"``); the rest is written for 5 minutes."""


def min_cacheable_tokens(model: str) -> int:
    """The documented minimum cacheable prompt length of ``model``; :data:`DEFAULT_MIN_TOKENS` if unlisted."""
    return next((n for family, n in _MIN_TOKENS_BY_FAMILY if model.startswith(family)), DEFAULT_MIN_TOKENS)


def _compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def has_breakpoints(raw_body: bytes) -> bool:
    """Whether a request body mentions ``cache_control`` at all (the cheap test before any work)."""
    return b'"cache_control"' in raw_body


def _bare(block: object) -> object:
    if isinstance(block, dict) and "cache_control" in block:
        return {k: v for k, v in block.items() if k != "cache_control"}
    return block


def _blocks(value: object) -> list[Any]:
    """Content or a system prompt as a list of blocks (a string is one text block)."""
    if isinstance(value, str):
        return [{"type": "text", "text": value}] if value else []
    return list(value) if isinstance(value, list) else []


def without_breakpoints(system: object, messages: object, tools: object) -> tuple[object, object, object]:
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


def _segments(system: object, messages: object, tools: object) -> Iterator[tuple[str, object, object]]:
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


def _is_breakpoint(block: object) -> bool:
    return isinstance(block, dict) and isinstance(block.get("cache_control"), dict)


def breakpoint_paths(system: object, messages: object, tools: object) -> tuple[str, ...]:
    """Where the ``cache_control`` markers are: ``tools[i]``, ``system[i]``, ``messages[i][j]``, in cache order."""
    paths = [f"tools[{i}]" for i, t in enumerate(tools if isinstance(tools, list) else ()) if _is_breakpoint(t)]
    if isinstance(system, list):
        paths += [f"system[{i}]" for i, b in enumerate(system) if _is_breakpoint(b)]
    for i, message in enumerate(messages if isinstance(messages, list) else ()):
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            paths += [f"messages[{i}][{j}]" for j, b in enumerate(content) if _is_breakpoint(b)]
    return tuple(paths)


def count_breakpoints(system: object, messages: object, tools: object) -> int:
    """How many tool definitions, system blocks and message blocks carry ``cache_control``."""
    return sum(1 for _, block, _ in _segments(system, messages, tools) if _is_breakpoint(block))


def _ttl(block: Any) -> str | None:
    """A breakpoint's ttl (``5m`` when unsaid), None for a block that is not one or names an unknown ttl."""
    if not _is_breakpoint(block):
        return None
    ttl = block["cache_control"].get("ttl", "5m")
    return ttl if ttl in TTL_SECONDS else None


def breakpoint_problem(system: object, messages: object, tools: object) -> str | None:
    """The real API's 400 message for a request's breakpoints (too many, an unknown ttl, a longer ttl
    after a shorter), else None."""
    marks = [block for _, block, _ in _segments(system, messages, tools) if _is_breakpoint(block)]
    if len(marks) > MAX_BREAKPOINTS:
        return f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {len(marks)}."
    ttls = [_ttl(block) for block in marks]
    if None in ttls:
        return "cache_control.ttl: Input should be '5m' or '1h'"
    for earlier, later in itertools.pairwise(ttls):
        if TTL_SECONDS[later or "5m"] > TTL_SECONDS[earlier or "5m"]:
            return (
                "a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block "
                "(tools, then system, then messages)"
            )
    return None


@attrs.frozen
class _Prefix:
    digest: bytes
    tokens: int
    ttl: str | None
    """The breakpoint's ttl when the prefix ends at one, else None."""


@attrs.define
class _Entry:
    tokens: int
    lifetime: float
    expires: float


def _prefixes(system: object, messages: object, tools: object) -> list[_Prefix]:
    running = hashlib.sha256()
    chars = 0
    out: list[_Prefix] = []
    for role, block, sent in _segments(system, messages, tools):
        running.update(_compact([role, _bare(block)]).encode("utf-8"))
        chars += len(_compact(_bare(sent)))
        out.append(_Prefix(running.copy().digest(), math.ceil(chars / 4), _ttl(block)))
    return out


class PromptCache:
    """Per model, the live prefixes written so far; :meth:`account` reads and writes one request's.

    ``min_tokens`` None takes each model's documented minimum (:func:`min_cacheable_tokens`);
    ``clock`` gives the time in seconds (default: the monotonic clock).
    """

    def __init__(self, *, min_tokens: int | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        if min_tokens is not None and min_tokens < 0:
            raise ValueError(f"a prompt cache's min_tokens must be >= 0, got {min_tokens}")
        self.min_tokens = min_tokens
        self.clock = clock
        self._seen: dict[str, OrderedDict[bytes, _Entry]] = {}

    def minimum(self, model: str) -> int:
        """The shortest prefix written for ``model``."""
        return min_cacheable_tokens(model) if self.min_tokens is None else self.min_tokens

    def account(self, model: str, system: object, messages: object, tools: object) -> CacheUsage:
        """Read the longest live prefix in reach of a breakpoint, then store every long-enough breakpoint's."""
        prefixes = _prefixes(system, messages, tools)
        marks = [i for i, p in enumerate(prefixes) if p.ttl is not None]
        if not marks:
            return CacheUsage()
        now = self.clock()
        seen = self._seen.setdefault(model, OrderedDict())
        reach = sorted({j for i in marks for j in range(max(0, i - LOOKBACK_SEGMENTS + 1), i + 1)}, reverse=True)
        read = 0
        for j in reach:
            entry = seen.get(prefixes[j].digest)
            if entry is not None and entry.expires > now:
                entry.expires = now + entry.lifetime  # a hit starts the entry's lifetime again
                read = prefixes[j].tokens
                break
        written = write_1h = 0
        minimum = self.minimum(model)
        for i in marks:
            prefix = prefixes[i]
            if prefix.tokens < minimum:
                continue
            lifetime = TTL_SECONDS[prefix.ttl or "5m"]
            old = seen.get(prefix.digest)
            if old is not None and old.expires > now:
                lifetime = max(lifetime, old.lifetime)
            seen[prefix.digest] = _Entry(prefix.tokens, lifetime, now + lifetime)
            seen.move_to_end(prefix.digest)
            if prefix.ttl == "1h":
                write_1h += max(0, prefix.tokens - max(read, written))
            written = max(written, prefix.tokens)
        while len(seen) > MAX_ENTRIES:
            seen.popitem(last=False)
        write = max(0, written - read)
        return CacheUsage(read=read, write=write, breakpoints=len(marks), write_1h=min(write_1h, write))


def usage_fields(total: int, usage: CacheUsage) -> Mapping[str, Any]:
    """A reply's input-side usage: the request's estimate split into uncached, read and written tokens.

    A request that wrote for an hour also gets the API's ``cache_creation`` split
    (``ephemeral_5m_input_tokens``, ``ephemeral_1h_input_tokens``).
    """
    read = min(usage.read, total)
    write = min(usage.write, total - read)
    fields: dict[str, object] = {
        "input_tokens": total - read - write,
        "cache_read_input_tokens": read,
        "cache_creation_input_tokens": write,
    }
    if usage.write_1h:
        hour = min(usage.write_1h, write)
        fields["cache_creation"] = {"ephemeral_5m_input_tokens": write - hour, "ephemeral_1h_input_tokens": hour}
    return fields
