"""The bytes of a Messages API request body, built incrementally, with prompt-cache breakpoints.

Each message is serialised once; the instructions and breakpoints go where Claude Code puts them (docs/caching.md).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, cast

from ...messages import Block, Message, MessageView, compact_json, user_message, with_content
from .media import within_media_cap
from .pricing import wire_model

if TYPE_CHECKING:
    from anthropic.types import TextBlockParam

__all__ = [
    "CACHE_CONTROL",
    "CACHE_CONTROL_1H",
    "MAX_BREAKPOINTS",
    "RequestParams",
    "encode_params",
    "encode_request",
    "prompt_caching_disabled",
    "request_messages",
    "with_breakpoint",
]

CACHE_CONTROL: Mapping[str, str] = {"type": "ephemeral"}
"""The breakpoint marker: an ephemeral entry with the default 5-minute ttl, as Claude Code sends it."""

CACHE_CONTROL_1H: Mapping[str, str] = {"type": "ephemeral", "ttl": "1h"}
"""The marker of a 1-hour entry (written at 2x the input price), for a session whose requests come far apart."""

MAX_BREAKPOINTS = 4
"""The most ``cache_control`` markers the API accepts in one request."""

_TRUTHY = frozenset({"1", "true", "yes", "on"})

# Block types the API refuses a cache_control on (they are cached as part of what follows).
_UNMARKABLE = frozenset({"thinking", "redacted_thinking"})

_CARRIER_SEARCH = 4
"""Messages looked at, from the last, for a block to carry the history's breakpoint."""


class RequestParams(Protocol):
    """What a body is built from: a :class:`~queryloop.handlers.request.services.backends.ModelCall` has it all."""

    @property
    def model(self) -> str: ...
    @property
    def messages(self) -> MessageView: ...
    @property
    def system(self) -> str | None: ...
    @property
    def tools(self) -> tuple[Mapping[str, object], ...]: ...
    @property
    def max_tokens(self) -> int: ...
    @property
    def prompt_cache(self) -> bool: ...
    @property
    def instructions(self) -> str | None: ...
    @property
    def cache_ttl(self) -> str: ...


def prompt_caching_disabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``DISABLE_PROMPT_CACHING`` is set to a true value (``1``, ``true``, ``yes``, ``on``).

    Claude Code reads the same variable; ``0`` or an empty value leaves caching on.
    """
    value = (os.environ if environ is None else environ).get("DISABLE_PROMPT_CACHING", "")
    return value.strip().lower() in _TRUTHY


# ---- serialised once ----------------------------------------------------------------------

_ONCE_LIMIT = 256
_once: dict[tuple[int, bool, bool, str], tuple[object, bytes]] = {}


def _json_once(
    value: str | Mapping[str, object], *, breakpoint: bool = False, block: bool = False, ttl: str = "5m"
) -> bytes:
    """The compact JSON of a system prompt, a tool definition or the instructions, remembered by identity.

    With ``breakpoint``, the value as it carries the prefix's breakpoint: a system prompt
    as one marked text block in a list, a tool definition with ``cache_control``. With
    ``block``, a text as one text block (the instructions). An entry keeps ``value``
    alive, so its id cannot be reused while it is remembered; the table is cleared when
    full. Tool definitions are built once and never changed in place (a changed catalog
    is a new tuple of new dicts), so identity is enough.
    """
    key = (id(value), breakpoint, block, ttl)
    hit = _once.get(key)
    if hit is not None and hit[0] is value:
        return hit[1]
    shown: object = value
    if block:
        shown = {"type": "text", "text": value}
    elif breakpoint:
        shown = [_marked({"type": "text", "text": value}, ttl)] if isinstance(value, str) else _marked(value, ttl)
    encoded = compact_json(shown).encode("utf-8")
    if len(_once) >= _ONCE_LIMIT:
        _once.clear()
    _once[key] = (value, encoded)
    return encoded


def _marked(block: Mapping[str, object], ttl: str = "5m") -> dict[str, object]:
    return {**block, "cache_control": dict(CACHE_CONTROL_1H if ttl == "1h" else CACHE_CONTROL)}


def _markable(block: object) -> bool:
    if not isinstance(block, Mapping) or block.get("type") in _UNMARKABLE:
        return False
    return not (block.get("type") == "text" and not block.get("text"))  # an empty text block is refused


def with_breakpoint(message: Message, ttl: str = "5m") -> Message | None:
    """A copy of ``message`` with a breakpoint on its last block that can carry one; None if none can.

    Thinking blocks and empty text blocks cannot carry a breakpoint; the nearest block
    before them does. A message whose content is a string has no block to carry one and
    is not rewritten into one: every message is sent as it is stored.
    """
    content = message.get("content")
    index = _breakpoint_block(content)
    if index is None:
        return None
    assert isinstance(content, list)  # _breakpoint_block found a block in it
    blocks = list(content)
    blocks[index] = cast(Block, _marked(content[index], ttl))  # every markable block type takes a cache_control
    return with_content(message, blocks)


def _breakpoint_block(content: object) -> int | None:
    """The index of the block of a message's ``content`` that carries its breakpoint: the last that can (None: none)."""
    if not isinstance(content, list):
        return None
    for index in range(len(content) - 1, -1, -1):
        if _markable(content[index]):
            return index
    return None


def _head(system: str | None, tools: Sequence[Mapping[str, object]], cache: bool, ttl: str = "5m") -> list[bytes]:
    """The pieces of ``{"system":…,"tools":[…],"messages":[`` with the prefix breakpoint when ``cache``."""
    parts = [b"{"]
    if system is not None:  # an empty one cannot carry a breakpoint (the API refuses an empty text block)
        parts += (b'"system":', _json_once(system, breakpoint=cache and bool(system), ttl=ttl), b",")
    if tools:
        encoded = [_json_once(tool) for tool in tools]
        if cache and not system:  # no system prompt to carry the prefix's breakpoint: the last tool does
            encoded[-1] = _json_once(tools[-1], breakpoint=True, ttl=ttl)
        parts += (b'"tools":[', b",".join(encoded), b"],")
    parts.append(b'"messages":[')
    return parts


_tails: dict[tuple[str, int | None, bool], bytes] = {}


def _tail(named: str, max_tokens: int | None, stream: bool) -> bytes:
    """The body's end after the messages, remembered by its model, cap and stream flag (its only inputs)."""
    key = (named, max_tokens, stream)
    tail = _tails.get(key) if type(named) is str and type(max_tokens) in (int, type(None)) else None
    if tail is not None:
        return tail
    model = wire_model(named)[0]  # ``[1m]`` is not part of the id: it travels as a beta header
    if max_tokens is None:  # a count_tokens request: no output cap, no stream flag
        tail = b'],"model":' + compact_json(model).encode("utf-8") + b"}"
    else:
        tail = (
            b'],"model":'
            + compact_json(model).encode("utf-8")
            + b',"max_tokens":'
            + str(int(max_tokens)).encode()
            + (b',"stream":true}' if stream else b"}")
        )
    if len(_tails) >= _ONCE_LIMIT:
        _tails.clear()
    _tails[key] = tail
    return tail


def _carrier_at(messages: MessageView, lead: Message | None = None, start: int = 0) -> tuple[int, Message, int] | None:
    """The message that carries the history's breakpoint (unmarked: :func:`with_breakpoint` marks it), and the
    index of its block that carries it: the last user message with a block that can.

    Normally the last message (the newest tool results). When that one is a plain string
    (a prompt, a continuation, hook feedback), the user message before it, the one that
    ended the previous request and carried its breakpoint, so the prefix marked is the
    one already written; the model's own replies are not marked. Looks at the last
    :data:`_CARRIER_SEARCH` messages sent at most. With instructions, the messages sent
    are ``lead`` (index -1 here) and then the stored ones from ``start``.
    """
    count = len(messages)
    for index in range(count - 1, max(start - 1, count - 1 - _CARRIER_SEARCH), -1):
        message = messages.at(index)
        block = _breakpoint_block(message.get("content")) if message.get("role") == "user" else None
        if block is not None:
            return index, message, block
    if lead is not None and count - start + 1 <= _CARRIER_SEARCH:
        block = _breakpoint_block(lead.get("content"))
        if block is not None:
            return -1, lead, block
    return None


_CONTROL_JSON = {
    ttl: compact_json(dict(control)).encode("utf-8")
    for ttl, control in (("5m", CACHE_CONTROL), ("1h", CACHE_CONTROL_1H))
}
"""The compact JSON of the ``cache_control`` a breakpoint carries, by ``ttl`` (what :func:`_marked` puts in)."""


def _marked_bytes(messages: MessageView, index: int, block: int, ttl: str) -> bytes:
    """The compact JSON of stored message ``index`` with its breakpoint on block ``block``
    (:func:`with_breakpoint`: the last block that can carry one).

    The usual carrier, a message of tool results whose last block takes the breakpoint and
    whose content is its last key, is spliced from the bytes stored when it was appended: the
    ``cache_control`` key goes at the end of that block, as ``{**block, "cache_control": …}``
    puts it, so the bytes are the same as serialising the marked copy would give. Any other
    shape is marked and serialised.
    """
    message = messages.at(index)
    content = message.get("content")
    if (
        type(message) is dict
        and type(content) is list
        and block == len(content) - 1  # the last block is the one marked
        and next(reversed(message.keys())) == "content"
        and type(content[block]) is dict
        and content[block]
        and "cache_control" not in content[block]
    ):
        stored = messages.encoded(index)
        if stored.endswith(b"}]}"):
            return b"".join((stored[:-3], b',"cache_control":', _CONTROL_JSON["1h" if ttl == "1h" else "5m"], b"}]}"))
    marked = with_breakpoint(message, ttl)
    assert marked is not None  # the block can carry a breakpoint
    return compact_json(marked).encode("utf-8")


# ---- the instructions in front of the first user message ---------------------------------------

_spliced: dict[tuple[int, int], tuple[object, object, bytes]] = {}


def _lead_start(messages: MessageView) -> int:
    """How many stored messages the first message sent stands for: 1 when the history opens with a user message
    (the instructions join it), 0 when they go in a user message of their own in front."""
    return 1 if len(messages) and messages.at(0).get("role") == "user" else 0


def _lead(messages: MessageView, start: int, instructions: str) -> Message:
    """The first message sent, as a value: the first user message with the instructions as its first block
    (a string content becomes a text block after them), or a user message of the instructions alone."""
    context: TextBlockParam = {"type": "text", "text": instructions}
    if not start:
        return user_message([context])
    first = messages.at(0)
    content = first.get("content")
    blocks: list[Block] = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
    return with_content(first, [context, *blocks])


def _lead_bytes(messages: MessageView, start: int, instructions: str) -> bytes:
    """The compact JSON of the first message sent, remembered by the identity of the first message and the text.

    The instructions' block (serialised once, :func:`_json_once`) spliced into the first
    message's stored bytes: neither is serialised again. An entry keeps both alive (a
    message is never changed once appended); the table is cleared when full.
    """
    if not start:
        return b'{"role":"user","content":[' + _json_once(instructions, block=True) + b"]}"
    first = messages.at(0)
    key = (id(first), id(instructions))
    hit = _spliced.get(key)
    if hit is not None and hit[0] is first and hit[1] is instructions:
        return hit[2]
    encoded = _splice(first, messages.encoded(0), _json_once(instructions, block=True))
    if encoded is None:  # a content neither a string nor a list (none the loop writes): serialised whole
        encoded = compact_json(_lead(messages, start, instructions)).encode("utf-8")
    if len(_spliced) >= _ONCE_LIMIT:
        _spliced.clear()
    _spliced[key] = (first, instructions, encoded)
    return encoded


def _splice(first: Message, stored: bytes, block: bytes) -> bytes | None:
    """``stored`` (the compact JSON of ``first``) with ``block`` in front of its content; None if it cannot be.

    The keys before and after the content are serialised (a role: a few bytes) to find
    where the content's value sits in ``stored``.
    """
    content = first.get("content")
    if not isinstance(content, (str, list)):
        return None
    items = list(first.items())
    keys = [key for key, _ in items]
    at = keys.index("content")
    opening = compact_json(dict(items[:at])).encode("utf-8")[:-1]
    opening += b',"content":' if at else b'"content":'
    closing = compact_json(dict(items[at + 1 :])).encode("utf-8")
    closing = b"," + closing[1:] if at + 1 < len(keys) else b"}"
    if not (stored.startswith(opening) and stored.endswith(closing)):
        return None
    value = stored[len(opening) : len(stored) - len(closing)]
    if isinstance(content, str):
        return b"".join((opening, b"[", block, b',{"type":"text","text":', value, b"}]", closing))
    return b"".join((opening, b"[", block, b"," + value[1:] if len(value) > 2 else b"]", closing))


def request_messages(call: RequestParams) -> list[Message]:
    """The messages ``call`` sends, as values (for the SDK's own serialisation: ``count_tokens``).

    The stored messages, with the instructions in front of the first user message as
    :func:`encode_request` puts them.
    """
    view = within_media_cap(call.messages)
    messages = view.to_list()
    if call.instructions is None:
        return messages
    start = _lead_start(view)
    return [_lead(view, start, call.instructions), *messages[start:]]


def encode_request(
    call: RequestParams, *, stream: bool, prompt_cache: bool | None = None, counting: bool = False
) -> bytes:
    """The JSON body of ``call`` as the SDK would send it (``"stream": true`` when ``stream``), with breakpoints.

    With ``counting``, the body of its ``/v1/messages/count_tokens`` request: the same bytes up
    to the model, without ``max_tokens`` and ``stream`` (that endpoint refuses them).
    ``prompt_cache`` None follows ``call.prompt_cache``. The messages' bytes are the ones
    written when they were appended, the instructions' the ones written once; only the
    message carrying the breakpoint is serialised again (a marked copy).
    """
    cache = call.prompt_cache if prompt_cache is None else prompt_cache
    messages = within_media_cap(call.messages)  # a transcript heavy with images: its oldest left out (media.py)
    count = len(messages)
    ttl = call.cache_ttl
    head = _head(call.system, call.tools, cache, ttl)
    instructions = call.instructions
    start, lead = 0, None
    if instructions is not None:
        start = _lead_start(messages)
        if cache and count - start < _CARRIER_SEARCH:  # the search for the carrier reaches the first message sent
            lead = _lead(messages, start, instructions)
    carrier = _carrier_at(messages, lead, start) if cache else None
    if instructions is not None:
        if carrier is not None and carrier[0] < 0:  # the first message sent carries the breakpoint
            marked = with_breakpoint(carrier[1], ttl)
            first, carrier = compact_json(marked).encode("utf-8"), None
        else:
            first = _lead_bytes(messages, start, instructions)
        head += (first, b"," if count > start else b"")  # the stored messages sent follow it
    tail = _tail(call.model, None if counting else call.max_tokens, stream and not counting)
    if carrier is None:
        return messages.encode_between(head, count, tail, start=start)
    index, _, block = carrier
    after = [_marked_bytes(messages, index, block, ttl), *(messages.encoded(i) for i in range(index + 1, count))]
    return messages.encode_between(head, index, (b"," if index > start else b"") + b",".join(after) + tail, start=start)


def encode_params(
    *,
    model: str,
    messages: Sequence[Mapping[str, object]],
    system: str | None,
    tools: Sequence[Mapping[str, object]],
    max_tokens: int,
    stream: bool,
) -> bytes:
    """The body for plain parameters, serialised in one pass and with no breakpoints (direct callers, tests)."""
    params: dict[str, object] = {}
    if system is not None:
        params["system"] = system
    if tools:
        params["tools"] = list(tools)
    params |= {"messages": list(messages), "model": wire_model(model)[0], "max_tokens": int(max_tokens)}
    if stream:
        params["stream"] = True
    return json.dumps(params, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
