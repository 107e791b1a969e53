"""The query loop's run data and services: what the machine's handlers read and return.

Owns :class:`LoopData` (the frozen application record carried in ``RunState.data``),
:class:`MessageView` (the transcript as a persistent, append-only view: appending is
O(1) and never copies the history), :class:`LoopConfig` and :class:`LoopServices`
(the mutable side: model backend, usage totals, request log), and the items effects
publish for output (:class:`TextDelta`, :class:`AssistantMessage`, …). Does not
decide transitions (``machines/query_loop.yaml`` does) and does not talk HTTP
(``fsm.agent.model_client`` does).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import attrs

from fsm.runtime import RunState

from .context import (
    CompactBoundary,
    CompactionPlan,
    StagedCollapse,
    message_tokens,
    request_overhead_tokens,
)
from .hooks import HookConfig
from .model_client import ModelFailure, ModelReply, RequestLog, UsageTotals
from .permissions import PermissionMode, PermissionRules
from .tools import ToolCall, ToolContext, ToolRegistry

__all__ = [
    "ApiRetry",
    "AssistantMessage",
    "CompactionDone",
    "LoopConfig",
    "LoopData",
    "LoopServices",
    "MessageView",
    "ModelBackend",
    "ModelCall",
    "Notice",
    "RequestFailed",
    "RequestLogged",
    "TextDelta",
    "ToolResultPublished",
    "tool_calls_of",
    "updated",
    "visible_text",
]


class MessageView:
    """An immutable view of the first ``len(self)`` entries of a shared, append-only store.

    ``append`` extends the store in place when this view is its newest prefix (the
    common, linear case: O(1)); a view that is not the newest (a branch taken after a
    tombstone or an abort) copies its prefix first, so no earlier view ever changes.
    Each entry is ``(message, meta, tokens)``: meta messages are sent to the model but
    hidden from the user's output; ``tokens`` is the running total of the local token
    estimate up to and including the entry, so :attr:`tokens` is O(1).
    """

    __slots__ = ("_length", "_store")

    def __init__(self, store: list[tuple[dict[str, Any], bool, int]] | None = None, length: int | None = None) -> None:
        self._store = store if store is not None else []
        self._length = len(self._store) if length is None else length

    @classmethod
    def of(cls, messages: Sequence[dict[str, Any]]) -> MessageView:
        """A fresh view holding ``messages`` (none of them meta)."""
        view = cls()
        for message in messages:
            view = view.append(message)
        return view

    def append(self, message: dict[str, Any], *, meta: bool = False) -> MessageView:
        store = self._store
        if len(store) != self._length:
            store = store[: self._length]
        store.append((message, meta, self.tokens + message_tokens(message)))
        return MessageView(store, self._length + 1)

    @property
    def tokens(self) -> int:
        """The local token estimate of all messages in the view."""
        return self._store[self._length - 1][2] if self._length else 0

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[dict[str, Any]]:
        store = self._store
        return (store[i][0] for i in range(self._length))

    def is_meta(self, index: int) -> bool:
        return self._store[index][1]

    def to_list(self) -> list[dict[str, Any]]:
        """The messages as the API expects them (one O(N) pass, only when a request is built)."""
        return [entry[0] for entry in self._store[: self._length]]

    def last(self) -> dict[str, Any] | None:
        return self._store[self._length - 1][0] if self._length else None

    def __repr__(self) -> str:
        return f"MessageView({self._length} messages, ~{self.tokens} tokens)"


@attrs.frozen(kw_only=True, slots=True)
class LoopData:
    """The query loop's own run record, replaced whole (``attrs.evolve``) by edge handlers."""

    messages: MessageView
    model: str
    fallback_models: tuple[str, ...] = ()
    max_tokens: int = 32_000
    escalated_max_tokens: int | None = None
    pending: tuple[ToolCall, ...] = ()  # tool_use blocks of the last assistant message still without results
    reply: ModelReply | None = None  # the last complete reply
    failure: ModelFailure | None = None  # the last failed attempt
    partial_text: str = ""  # visible text kept across max_tokens continuations of this turn
    result_text: str = ""
    error: str | None = None  # the surfaced (previously withheld) error, when the run ends in one
    api_error_status: int | None = None
    notices: tuple[str, ...] = ()  # tombstones and switches, for the transcript and verbose output
    turn: int = 0  # tool turns completed
    # ---- context layer ----
    auto_compact: bool = True
    estimate: int = 0  # the last measured request estimate (tokens)
    overhead: int = 0  # the estimate of the system prompt and tool definitions (fixed for a run)
    staged: tuple[StagedCollapse, ...] = ()  # large old tool results that can be collapsed at no API cost
    plan: CompactionPlan | None = None  # the compaction in progress (older part shrinks on head truncation)
    dropped_messages: int = 0  # messages dropped unsummarised by head truncation in this compaction
    compaction_turns: tuple[int, ...] = ()  # the turn of every successful compaction
    boundaries: tuple[CompactBoundary, ...] = ()
    compact_error: str | None = None  # why the last compaction failed
    # ---- hook and permission layer ----
    denied: tuple[dict[str, Any], ...] = ()  # error results of the calls the gate refused this turn
    order: tuple[str, ...] = ()  # tool_use ids of this turn in the model's order
    permission_denials: tuple[dict[str, Any], ...] = ()  # {tool_name, tool_use_id, tool_input}
    stop_hook_active: bool = False
    stop_reason_from_hook: str | None = None


@attrs.frozen(kw_only=True, slots=True)
class ModelCall:
    """One attempt as the loop asks for it; backends turn it into HTTP (or script it)."""

    model: str
    messages: MessageView
    system: str | None
    tools: tuple[dict[str, Any], ...]
    max_tokens: int
    stream: bool
    attempt: int
    idle_timeout_s: float


class ModelBackend(Protocol):
    """Sends one attempt; returns a typed reply or failure, never raises for API problems."""

    async def send(self, call: ModelCall, on_text: Callable[[str], None] | None) -> ModelReply | ModelFailure: ...

    async def count_tokens(self, call: ModelCall) -> int | None:
        """The server's count of the request's input tokens, or None when it does not offer one."""
        ...


@attrs.frozen(kw_only=True)
class LoopConfig:
    """Settings of one run that handlers read but the machine does not decide on."""

    system_prompt: str | None
    tools: ToolRegistry
    tool_context: ToolContext
    max_budget_usd: float | None = None
    auto_compact_threshold: float = 0.8  # of the effective window (context window − output reserve)
    retry_base_delay_s: float = 0.5
    retry_max_delay_s: float = 32.0
    idle_timeout_s: float = 90.0
    permission_mode: PermissionMode = "default"
    rules: PermissionRules = attrs.field(factory=PermissionRules)
    hooks: HookConfig = attrs.field(factory=HookConfig)
    interactive: bool = False  # ask the user (y/n/always) instead of denying what would ask
    session_id: str = ""
    transcript_path: str = ""
    hook_timeout_s: float = 600.0


class LoopServices:
    """The mutable side of a run: the model backend, usage totals and the request log."""

    def __init__(self, config: LoopConfig, backend: ModelBackend, *, rng: random.Random | None = None) -> None:
        self.config = config
        self.backend = backend
        self.tool_definitions = tuple(config.tools.api_definitions())
        self.overhead_tokens = request_overhead_tokens(config.system_prompt, self.tool_definitions)
        self.usage = UsageTotals()
        self.request_logs: list[RequestLog] = []
        self.token_correction = 0  # real input tokens − local estimate, from the last successful reply
        self.always_allowed: set[str] = set()  # tools the user allowed "always" at a permission prompt
        self.rng = rng or random.Random()

    def record(self, log: RequestLog) -> None:
        self.request_logs.append(log)
        if log.usage:
            self.usage = self.usage.add(log.model, log.usage)

    @property
    def api_duration_ms(self) -> float:
        return sum(log.duration_ms for log in self.request_logs)


# ---- what effects publish (rendered by fsm.agent.output) ----------------------------------


@attrs.frozen(slots=True)
class TextDelta:
    """A piece of visible answer text as it streams in."""

    text: str


@attrs.frozen(kw_only=True, slots=True)
class AssistantMessage:
    """A complete assistant reply as the model sent it."""

    message: dict[str, Any]
    model: str
    log: RequestLog


@attrs.frozen(kw_only=True, slots=True)
class ToolResultPublished:
    """One tool's result, as soon as it completes."""

    call: ToolCall
    result: dict[str, Any]


@attrs.frozen(kw_only=True, slots=True)
class ApiRetry:
    """A retry is about to be sent after ``retry_delay_ms`` (Claude Code's system/api_retry)."""

    attempt: int
    max_retries: int | None
    retry_delay_ms: int
    error_status: int | None
    error: str


@attrs.frozen(kw_only=True, slots=True)
class RequestFailed:
    """An attempt failed (logged; whether it is shown depends on the recovery that follows)."""

    failure: ModelFailure


@attrs.frozen(slots=True)
class RequestLogged:
    """An attempt that is not an answer of the conversation (a summary request): logged only."""

    log: RequestLog


@attrs.frozen(kw_only=True, slots=True)
class CompactionDone:
    """A compaction replaced older messages with a summary (Claude Code's system/compact_boundary)."""

    boundary: CompactBoundary


@attrs.frozen(slots=True)
class Notice:
    """A line for verbose output: a fallback switch, a tombstone, a skipped sleep."""

    text: str


def updated(run: RunState, **changes: Any) -> RunState:
    """``run`` with its :class:`LoopData` changed as given — the one-line body of most edge handlers."""
    return run.with_data(attrs.evolve(run.data, **changes))


def tool_calls_of(content: Sequence[dict[str, Any]]) -> tuple[ToolCall, ...]:
    """The complete tool_use blocks of an assistant message, as tool calls, in order."""
    return tuple(ToolCall.from_block(b) for b in content if b.get("type") == "tool_use")


def visible_text(content: Sequence[dict[str, Any]]) -> str:
    return "".join(b.get("text", "") for b in content if b.get("type") == "text")

