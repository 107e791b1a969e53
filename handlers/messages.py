"""The message graph every layer appends to: the transcript as a persistent view, and its block shapes.

Owns :class:`MessageView` (append-only, O(1) appends), a message's local token estimate, :class:`ToolCall` and the
``tool_result`` block. Messages and blocks are the anthropic SDK's typed params. Imports no layer.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, TypedDict, TypeGuard, cast

import attrs

__all__ = [
    "AssistantMessage",
    "Block",
    "Message",
    "MessageView",
    "ResultBlock",
    "ResultContent",
    "ToolCall",
    "ToolResultBlock",
    "ToolUseBlock",
    "UserMessage",
    "assistant_message",
    "compact_json",
    "final_text",
    "is_tool_result",
    "is_tool_use",
    "ledger_problem",
    "message_tokens",
    "messages_tokens",
    "synthetic_error_results",
    "tool_calls_of",
    "tool_result_block",
    "user_message",
    "visible_text",
    "with_content",
]

if TYPE_CHECKING:  # importing the SDK loads its client: a run with a scripted model never needs it
    from anthropic.types import ContentBlockParam, ToolResultBlockParam, ToolUseBlockParam
    from anthropic.types.tool_result_block_param import Content as ToolResultContentParam

    Block: TypeAlias = ContentBlockParam
    ToolUseBlock: TypeAlias = ToolUseBlockParam
    ToolResultBlock: TypeAlias = ToolResultBlockParam
    ResultBlock: TypeAlias = ToolResultContentParam
else:  # at run time each is the plain dict it is, which a snapshot's converter reads (it resolves every field's type)
    Block = ToolUseBlock = ToolResultBlock = ResultBlock = dict[str, Any]


class UserMessage(TypedDict):
    """A user message of the transcript (the SDK's ``MessageParam``, its content a list of the SDK's block params)."""

    role: Literal["user"]
    content: str | list[Block]


class AssistantMessage(TypedDict):
    """An assistant message of the transcript: the model's reply as it goes back to the API."""

    role: Literal["assistant"]
    content: str | list[Block]


if TYPE_CHECKING:
    Message: TypeAlias = UserMessage | AssistantMessage
else:  # a plain dict at run time, as the blocks above
    Message = dict[str, Any]
ResultContent: TypeAlias = str | list[ResultBlock]
"""A tool_result's content: text, or blocks (text, images, documents: an MCP server's image, a PDF read)."""


def user_message(content: str | list[Block]) -> UserMessage:
    """A user message holding ``content``."""
    return {"role": "user", "content": content}


def assistant_message(content: str | list[Block]) -> AssistantMessage:
    """An assistant message holding ``content``."""
    return {"role": "assistant", "content": content}


def is_tool_result(block: object) -> TypeGuard[ToolResultBlock]:
    """Whether ``block`` is a ``tool_result`` block (a dict of that type)."""
    return isinstance(block, dict) and block.get("type") == "tool_result"


def is_tool_use(block: object) -> TypeGuard[ToolUseBlock]:
    """Whether ``block`` is a ``tool_use`` block (a dict of that type)."""
    return isinstance(block, dict) and block.get("type") == "tool_use"


def with_content(message: Message, content: str | list[Block]) -> Message:
    """A copy of ``message`` (its other keys kept) holding ``content``."""
    return cast(Message, {**message, "content": content})


_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)  # built once: json.dumps builds one a call


def compact_json(value: object) -> str:
    """``value`` as compact JSON (no spaces, UTF-8 kept): what token estimates measure, and the bytes
    (UTF-8 encoded) a message is stored as in the request body."""
    return _COMPACT.encode(value)


IMAGE_TOKENS = 1600
"""The local estimate of one image block: the API scales an image to about 1.15 megapixels, ~1,600 tokens;
its base64 data, counted as text, would read as a thousand times that."""


def _image_data_chars(content: object) -> tuple[int, int]:
    """How many image blocks ``content`` holds (inside tool results too), and their base64 characters."""
    count = chars = 0
    if isinstance(content, list):
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "image":
                source = block.get("source")
                data = source.get("data") if isinstance(source, dict) else None
                count += 1
                chars += len(data) if isinstance(data, str) else 0
            elif block.get("type") == "tool_result":
                inner = _image_data_chars(block.get("content"))
                count, chars = count + inner[0], chars + inner[1]
    return count, chars


def _estimate(message: Mapping[str, object], text: str) -> int:
    """``ceil(len(text) / 4)`` for ``message``'s compact JSON ``text``, an image counted as :data:`IMAGE_TOKENS`."""
    if '"image"' not in text:  # the usual message: no walk
        return math.ceil(len(text) / 4)
    images, chars = _image_data_chars(message.get("content"))
    return math.ceil((len(text) - chars) / 4) + images * IMAGE_TOKENS


def message_tokens(message: Mapping[str, object]) -> int:
    """The local token estimate of one message: ``ceil(len(compact JSON) / 4)``, an image counted as
    :data:`IMAGE_TOKENS` instead of its base64 data."""
    return _estimate(message, compact_json(message))


def messages_tokens(messages: Sequence[Mapping[str, object]]) -> int:
    """The sum of :func:`message_tokens` over ``messages`` (computed from scratch)."""
    return sum(message_tokens(m) for m in messages)


class _BlockIndex:
    """Where the tool blocks of one append-only store are, extended as it is asked: the
    position of every tool_result, every tool_use in order ``(position, id, name)``, and, per
    set of tool names asked about, how many of the calls up to each one are of those tools."""

    __slots__ = ("_calls", "_counts", "_indexed", "_positions")

    def __init__(self) -> None:
        self._positions: dict[str, int] = {}
        self._calls: list[tuple[int, str, str]] = []
        self._counts: dict[frozenset[str], list[int]] = {}
        self._indexed = 0  # store entries looked at so far

    def _extend(self, store: list[tuple[Message, bool, int, int]]) -> None:
        positions, calls = self._positions, self._calls
        for index in range(self._indexed, len(store)):
            message = store[index][0]
            content = message.get("content")
            if not isinstance(content, list):
                continue
            role = message.get("role")
            for block in content:
                if not isinstance(block, dict):
                    continue
                kind = block.get("type")
                if kind == "tool_result" and role == "user":
                    positions.setdefault(str(block.get("tool_use_id")), index)
                elif kind == "tool_use" and role == "assistant":
                    calls.append((index, str(block.get("id")), str(block.get("name"))))
        self._indexed = len(store)

    def position(self, store: list[tuple[Message, bool, int, int]], tool_use_id: str) -> int | None:
        self._extend(store)
        return self._positions.get(tool_use_id)

    def calls(self, store: list[tuple[Message, bool, int, int]]) -> list[tuple[int, str, str]]:
        self._extend(store)
        return self._calls

    def counts(self, store: list[tuple[Message, bool, int, int]], names: frozenset[str]) -> list[int]:
        """``counts[k]``: how many of the first ``k + 1`` calls are of ``names``."""
        calls = self.calls(store)
        counts = self._counts.setdefault(names, [])
        total = counts[-1] if counts else 0
        for _, _, name in calls[len(counts) :]:
            total += name in names
            counts.append(total)
        return counts


class _Store:
    """The shared, append-only storage behind views: entries, and every message's compact JSON.

    ``entries[i]`` is ``(message, meta, tokens, end)``: ``tokens`` the running total of the
    local estimate up to and including the message, ``end`` where its bytes end in
    ``encoded`` — the messages' compact JSON (UTF-8) joined by commas, written once when a
    message is appended (the estimate measures the same JSON), so a request body is built
    from it without serialising the history again.
    """

    __slots__ = ("blocks", "encoded", "entries", "memos")

    def __init__(self, entries: list[tuple[Message, bool, int, int]], encoded: bytearray) -> None:
        self.entries = entries
        self.encoded = encoded
        self.blocks = _BlockIndex()  # where each tool_use and tool_result sits (built as it is asked)
        self.memos: dict[object, Any] = {}  # the layers' facts about this history (MessageView.memos)

    def prefix(self, length: int) -> _Store:
        """A new store holding the first ``length`` entries (a branch starts from it)."""
        end = self.entries[length - 1][3] if length else 0
        return _Store(self.entries[:length], self.encoded[:end])


class MessageView:
    """An immutable view of the first ``len(self)`` entries of a shared, append-only store.

    ``append`` extends the store in place when this view is its newest prefix (the
    common, linear case: O(1)); a view that is not the newest (a branch taken after a
    tombstone or an abort) copies its prefix first, so no earlier view ever changes.
    Each entry keeps the message, whether it is meta (sent to the model but hidden from
    the user's output), the running total of the local token estimate (so :attr:`tokens`
    is O(1)) and the message's compact JSON, serialised once on append
    (:meth:`encode_between` builds a request body from it). A message must not be
    changed once appended: its JSON is not written again.
    """

    __slots__ = ("_length", "_store")

    def __init__(self, store: _Store | None = None, length: int | None = None) -> None:
        self._store = store if store is not None else _Store([], bytearray())
        self._length = len(self._store.entries) if length is None else length

    @classmethod
    def of(cls, messages: Iterable[Message], meta: Iterable[bool] = ()) -> MessageView:
        """A fresh view holding ``messages``; ``meta`` flags them (none meta when omitted)."""
        flags = iter(meta)
        view = cls()
        for message in messages:
            view = view.append(message, meta=next(flags, False))
        return view

    def append(self, message: Message, *, meta: bool = False) -> MessageView:
        store = self._store
        if len(store.entries) != self._length:
            store = store.prefix(self._length)
        text = compact_json(message)
        encoded = store.encoded
        if encoded:
            encoded += b","
        encoded += text.encode("utf-8")
        store.entries.append((message, meta, self.tokens + _estimate(message, text), len(encoded)))
        return MessageView(store, self._length + 1)

    @property
    def tokens(self) -> int:
        """The local token estimate of all messages in the view."""
        return self._store.entries[self._length - 1][2] if self._length else 0

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[Message]:
        entries = self._store.entries
        return (entries[i][0] for i in range(self._length))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageView):
            return NotImplemented
        return self.entries() == other.entries()

    __hash__ = None  # type: ignore[assignment]

    def is_meta(self, index: int) -> bool:
        return self._store.entries[index][1]

    def entries(self) -> list[tuple[Message, bool]]:
        """``(message, meta)`` for every message in the view (what a snapshot keeps)."""
        return [(entry[0], entry[1]) for entry in self._store.entries[: self._length]]

    def to_list(self) -> list[Message]:
        """The messages as the API expects them (one O(N) pass, only when a request is built)."""
        return [entry[0] for entry in self._store.entries[: self._length]]

    @property
    def memos(self) -> dict[object, Any]:
        """Facts a layer keeps about this history, under a key of its own: one dict per store.

        The views of one store share it, and a view at least as long as another extends it, so a
        fact that only grows with the history is worked out once. It lives as long as a view of
        the store (the run's history), never in the process: a branch starts with an empty one.
        """
        return self._store.memos

    def holds_result(self, tool_use_id: str) -> bool:
        """Whether a message of this view holds the tool_result of ``tool_use_id`` (O(1) amortised)."""
        return self.result_position(tool_use_id) is not None

    def tool_calls(self) -> list[tuple[int, str, str]]:
        """Every tool_use of the view, oldest first: ``(message index, id, tool name)`` (O(1)
        amortised per message appended, and a copy of the list)."""
        store = self._store
        calls = store.blocks.calls(store.entries)
        return calls[: bisect.bisect_left(calls, (self._length,))]

    def count_calls(self, names: frozenset[str]) -> int:
        """How many tool_use blocks of the view call one of ``names`` (O(log n) once indexed)."""
        store = self._store
        counts = store.blocks.counts(store.entries, names)
        within = bisect.bisect_left(store.blocks.calls(store.entries), (self._length,))
        return counts[within - 1] if within else 0

    def result_position(self, tool_use_id: str) -> int | None:
        """The index of the message holding the tool_result of ``tool_use_id``, if the view holds it."""
        store = self._store
        position = store.blocks.position(store.entries, tool_use_id)
        return position if position is not None and position < self._length else None

    def tokens_before(self, index: int) -> int:
        """The local token estimate of the messages before ``index``, in O(1)."""
        if not 0 <= index <= self._length:
            raise IndexError(f"message index {index} out of range for a view of {self._length} messages")
        return self._store.entries[index - 1][2] if index else 0

    def last(self) -> Message | None:
        return self._store.entries[self._length - 1][0] if self._length else None

    def at(self, index: int) -> Message:
        """Message ``index`` (0-based, negative from the end), in O(1)."""
        position = index + self._length if index < 0 else index
        if not 0 <= position < self._length:
            raise IndexError(f"message index {index} out of range for a view of {self._length} messages")
        return self._store.entries[position][0]

    def encoded(self, index: int) -> bytes:
        """The compact JSON (UTF-8) of message ``index``, as it was serialised on append."""
        entries = self._store.entries
        if not 0 <= index < self._length:
            raise IndexError(f"message index {index} out of range for a view of {self._length} messages")
        start = entries[index - 1][3] + 1 if index else 0
        return bytes(self._store.encoded[start : entries[index][3]])

    def encode_between(self, head: Sequence[bytes], count: int, tail: bytes, *, start: int = 0) -> bytes:
        """The pieces of ``head``, the JSON of messages ``start`` to ``count`` (excluded) joined by commas,
        then ``tail``, in one copy.

        The messages' bytes are the ones written on append: building a request body this
        way costs a copy of the bytes, never a serialisation of the history.
        """
        if not 0 <= start <= count <= self._length:
            raise IndexError(f"cannot encode messages {start} to {count} of a view of {self._length}")
        entries = self._store.entries
        begin = entries[start - 1][3] + 1 if start else 0
        end = entries[count - 1][3] if count > start else begin
        with memoryview(self._store.encoded) as encoded:  # released before any later append resizes it
            return b"".join((*head, encoded[begin:end], tail))

    def added_since(self, earlier: MessageView) -> list[tuple[Message, bool]] | None:
        """``(message, meta)`` appended after ``earlier`` when this view extends it, else None.

        O(appended): a view extends ``earlier`` when it shares its store and is at least as
        long (a branch copies its prefix, and a rebuilt view — a compaction — has its own store).
        """
        if self._store is not earlier._store or self._length < earlier._length:
            return None
        return [(entry[0], entry[1]) for entry in self._store.entries[earlier._length : self._length]]

    def __repr__(self) -> str:
        return f"MessageView({self._length} messages, ~{self.tokens} tokens)"


# ---- block shapes ---------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ToolCall:
    """One complete, parsed ``tool_use`` block: the model asked to run ``name`` on ``input``."""

    id: str
    name: str
    input: dict[str, object]

    @classmethod
    def from_block(cls, block: Mapping[str, object]) -> ToolCall:
        """Build a call from an API ``tool_use`` block (``{"type", "id", "name", "input"}``)."""
        if block.get("type") != "tool_use":
            raise ValueError(f"expected a 'tool_use' block, got type {block.get('type')!r}")
        return cls(id=str(block["id"]), name=str(block["name"]), input=cast("dict[str, object]", block["input"]))


def tool_result_block(tool_use_id: str, content: ResultContent, *, is_error: bool = False) -> ToolResultBlock:
    """Build a ``tool_result`` block.

    ``is_error`` is always included (``False`` on success) so consumers can read
    ``block["is_error"]`` without a default; the API accepts an explicit ``false``.
    """
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": content, "is_error": is_error}


def synthetic_error_results(calls: Iterable[ToolCall], message: str) -> list[ToolResultBlock]:
    """``is_error`` results carrying ``message`` for calls that never completed, in order.

    Used on abort, a budget stop or a hook stop, so that every ``tool_use`` still has
    its ``tool_result`` (the ledger stays closed).
    """
    if not message:
        raise ValueError("synthetic_error_results needs a non-empty message to show the model")
    return [tool_result_block(call.id, message, is_error=True) for call in calls]


def ledger_problem(messages: Iterable[Mapping[str, object]]) -> str | None:
    """What breaks the ledger invariant in ``messages``, or None: every tool_use is answered by
    its tool_result, in order, in the next user message, before anything else is sent."""
    open_ids: list[str] = []
    for message in messages:
        content = message.get("content")
        blocks = content if isinstance(content, list) else []
        if message.get("role") == "user":
            answered = [b.get("tool_use_id") for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
            if answered != open_ids:
                return f"tool_results {answered} do not answer {open_ids} in order"
            open_ids = []
        elif open_ids:
            return f"tool_use {open_ids} left without results"
        else:
            open_ids = [b["id"] for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"]
    return f"the messages end with unanswered tool_use {open_ids}" if open_ids else None


def tool_calls_of(content: Sequence[Mapping[str, object]]) -> tuple[ToolCall, ...]:
    """The complete tool_use blocks of an assistant message, as tool calls, in order."""
    return tuple([ToolCall.from_block(b) for b in content if b.get("type") == "tool_use"])


def visible_text(content: Sequence[Mapping[str, object]]) -> str:
    """The text a user sees in an assistant message's content (text blocks only)."""
    return "".join([str(b.get("text", "")) for b in content if b.get("type") == "text"])


def final_text(content: Sequence[Mapping[str, object]]) -> str:
    """The text of an assistant message's last block when that block is text, else ``""``.

    What Claude Code reports as a run's ``result`` and a Stop hook's
    ``last_assistant_message``: it keeps one content block per message, so its "last
    message" is the reply's last block (text, then thinking, gives ``""``).
    """
    last = content[-1] if content else None
    return str(last.get("text", "")) if last is not None and last.get("type") == "text" else ""
