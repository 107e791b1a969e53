"""Running the model's tool calls: registry lookup, input validation, scheduling, results.

Owns :class:`ToolRegistry`, :func:`run_tool_calls` and :func:`unknown_tool_result`. Every call gets exactly one
``tool_result``, in order, under its deadline; every failure is an ``is_error`` result. A :data:`CallRunner` (the
fleet) may run each call.
"""

from __future__ import annotations

import asyncio
import difflib
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:  # jsonschema words the problems of an input jsonschema-rs refused: imported then (base.py)
    import jsonschema

from ...messages import ResultBlock, ToolCall, ToolResultBlock, tool_result_block
from .base import ToolContext, ToolError, ToolInputError, ToolOutput, ToolSpec, truncate_text

__all__ = [
    "CallRunner",
    "OnResult",
    "ToolRegistry",
    "run_tool_calls",
    "unknown_tool_result",
    "validation_problems",
]

OnResult = Callable[[ToolCall, ToolResultBlock], None]
"""Called with each call and its result block as soon as that call completes."""

CallRunner = Callable[[ToolCall, ToolSpec | None, Callable[[], Awaitable[ToolResultBlock]]], Awaitable[ToolResultBlock]]
"""Runs one call given the call, its tool (None: no such tool) and the call's execution, which it awaits (or not)."""

# At most this many schema violations are listed in one error result.
_MAX_LISTED_PROBLEMS = 5


def _to_tools(tools: Iterable[ToolSpec]) -> tuple[ToolSpec, ...]:
    return tuple(tools)


def _index_tools(tools: tuple[ToolSpec, ...]) -> Mapping[str, ToolSpec]:
    by_name: dict[str, ToolSpec] = {}
    for tool in tools:
        if tool.name in by_name:
            raise ValueError(f"two tools are named {tool.name!r}; tool names must be unique in a registry")
        by_name[tool.name] = tool
    return by_name


@attrs.frozen(kw_only=True)
class ToolRegistry:
    """The tools offered to the model, looked up by name; immutable.

    ``ToolRegistry(tools=default_tools())``; ``registry.only({"Read", "Grep"})`` for a
    restricted set. API definitions are built once, at construction.
    """

    tools: tuple[ToolSpec, ...] = attrs.field(converter=_to_tools)
    _by_name: Mapping[str, ToolSpec] = attrs.field(init=False, eq=False, repr=False)
    _definitions: tuple[dict[str, Any], ...] = attrs.field(init=False, eq=False, repr=False)

    @_by_name.default
    def _build_index(self) -> Mapping[str, ToolSpec]:
        return _index_tools(self.tools)

    @_definitions.default
    def _build_definitions(self) -> tuple[dict[str, object], ...]:
        return tuple(tool.api_definition() for tool in self.tools)

    @property
    def names(self) -> tuple[str, ...]:
        """Tool names in registration order."""
        return tuple(self._by_name)

    def get(self, name: str) -> ToolSpec | None:
        """The tool called ``name``, or ``None``."""
        return self._by_name.get(name)

    def __getitem__(self, name: str) -> ToolSpec:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"no tool named {name!r}; registered tools: {', '.join(self._by_name)}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __len__(self) -> int:
        return len(self.tools)

    def api_definitions(self) -> list[dict[str, object]]:
        """``[{"name", "description", "input_schema"}, ...]`` for the API's ``tools`` parameter.

        The list is new on each call; the dicts in it are shared: do not mutate them.
        """
        return list(self._definitions)

    def only(self, allowed: Collection[str]) -> ToolRegistry:
        """A registry with just the ``allowed`` tools, in this registry's order.

        An allowed name that is not registered is a configuration typo: ``ValueError``
        listing close matches.
        """
        unknown = sorted(set(allowed) - set(self._by_name))
        if unknown:
            hints = []
            for name in unknown:
                close = difflib.get_close_matches(name, self._by_name, n=3)
                hints.append(f"{name!r}" + (f" (did you mean {', '.join(map(repr, close))}?)" if close else ""))
            raise ValueError(
                f"allowed tools {', '.join(hints)} are not registered; registered tools: {', '.join(self._by_name)}"
            )
        return ToolRegistry(tools=(tool for tool in self.tools if tool.name in allowed))


def _describe(error: jsonschema.ValidationError) -> str:
    where = "".join(f"[{part!r}]" if isinstance(part, int) else f".{part}" for part in error.absolute_path)
    field = f"field '{where.lstrip('.')}'" if where else "input"
    required = error.validator_value
    if error.validator == "required" and isinstance(error.instance, dict) and isinstance(required, list):
        missing = [name for name in required if name not in error.instance]
        names = ", ".join(f"'{name}'" for name in missing)
        return f"{field}: missing required field {names}"
    return f"{field}: {error.message}"


def validation_problems(tool: ToolSpec, tool_input: Any) -> list[str]:
    """Every way ``tool_input`` violates ``tool``'s schema, one sentence each; empty if valid."""
    if tool.is_valid_input(tool_input):
        return []  # the usual call: nothing to collect or sort
    import referencing.exceptions  # with jsonschema, only when an input is refused

    try:
        found = list(tool.schema_validator.iter_errors(tool_input))
    except referencing.exceptions.Unresolvable as exc:  # the tool's schema, not the input, is at fault
        return [f"the tool's schema has a $ref that does not resolve within it ({exc.ref}); no input can pass it"]
    errors = sorted(found, key=lambda e: (list(map(str, e.path)), e.message))
    return [_describe(error) for error in errors]


def _invalid_input_message(tool: ToolSpec, problems: list[str]) -> str:
    listed = problems[:_MAX_LISTED_PROBLEMS]
    more = len(problems) - len(listed)
    tail = f"\n- ... and {more} more" if more else ""
    body = "\n".join(f"- {problem}" for problem in listed)
    # Claude Code's markers (the tags, the error's name), our words inside
    text = f"Invalid input for tool {tool.name}; it was not run:\n{body}{tail}"
    return f"<tool_use_error>InputValidationError: {text}</tool_use_error>"


def unknown_tool_result(call: ToolCall, *, removed_by_deny_rule: bool = False) -> ToolResultBlock:
    """The error result of a call naming a tool this run does not offer — Claude Code's exact text.

    Scripts and models already read it, so the wording is Claude Code's; a tool a bare deny
    rule keeps out of the run says so (in our words) after it.
    """
    why = f". A deny rule keeps {call.name} out of this run's tools" if removed_by_deny_rule else ""
    text = f"<tool_use_error>Error: No such tool available: {call.name}{why}</tool_use_error>"
    return tool_result_block(call.id, text, is_error=True)


async def _run_one(
    call: ToolCall, registry: ToolRegistry, ctx: ToolContext, runner: CallRunner | None
) -> ToolResultBlock:
    """Run one call to completion (through ``runner`` when the run was given one)."""
    if runner is None:
        return await _execute(call, registry, ctx)
    return await runner(call, registry.get(call.name), lambda: _execute(call, registry, ctx))


async def _execute(call: ToolCall, registry: ToolRegistry, ctx: ToolContext) -> ToolResultBlock:
    """Run one call to completion; every failure but cancellation becomes an error block."""
    tool = registry.get(call.name)
    if tool is None:
        return unknown_tool_result(call)
    problems = validation_problems(tool, call.input)
    if problems:
        return tool_result_block(call.id, _invalid_input_message(tool, problems), is_error=True)
    if ctx.sandbox is not None or ctx.background is not None:
        # a sandboxed command's changes are checkpointed under its call's id; a sub-agent is started by it
        ctx = ctx.for_call(call_id=call.id)
    deadline = tool.deadline_s(call.input, ctx)
    limit = asyncio.timeout(None)  # expired at the deadline by the run's one timer (``ctx.deadlines``)
    try:
        async with limit:
            output = await ctx.deadlines.run(limit, deadline, tool.run(call.input, ctx))
    except ToolInputError as exc:  # refused before it changed anything, as Claude Code's input checks refuse
        return tool_result_block(call.id, f"<tool_use_error>{exc}</tool_use_error>", is_error=True)
    except ToolError as exc:
        return tool_result_block(call.id, f"{tool.name} failed: {exc}", is_error=True)
    except TimeoutError as exc:
        if not limit.expired():
            return tool_result_block(call.id, f"{tool.name} failed with TimeoutError: {exc}", is_error=True)
        return tool_result_block(
            call.id, f"{tool.name} did not finish within {deadline:g} s and was stopped", is_error=True
        )
    except Exception as exc:
        return tool_result_block(call.id, f"{tool.name} failed with {type(exc).__name__}: {exc}", is_error=True)
    if not isinstance(output, ToolOutput):
        return tool_result_block(
            call.id,
            f"{tool.name} returned {type(output).__name__} instead of ToolOutput; this is a bug in the tool",
            is_error=True,
        )
    if ctx.responses is not None and output.response is not None:
        ctx.responses[call.id] = output.response  # for the call's PostToolUse hooks (``tool_response``)
    # A safety net for tools that do not bound their own output.
    if isinstance(output.content, str):
        return tool_result_block(call.id, truncate_text(output.content, ctx.max_output_chars), is_error=output.is_error)
    return tool_result_block(call.id, _bounded_blocks(output.content, ctx.max_output_chars), is_error=output.is_error)


def _bounded_blocks(blocks: Sequence[ResultBlock], limit: int) -> list[ResultBlock]:
    """Content blocks with their text cut to ``limit`` characters in all (images are bounded where they are made)."""
    out: list[ResultBlock] = []
    left = limit
    for block in blocks:
        if block.get("type") == "text":
            text = str(block.get("text", ""))
            fitted = truncate_text(text, max(left, 1000)) if len(text) > left else text
            left = max(left - len(fitted), 0)
            out.append({"type": "text", "text": fitted})
        else:
            out.append(block.copy())
    return out


def _batches(calls: Sequence[ToolCall], registry: ToolRegistry) -> Iterable[tuple[bool, range]]:
    """Split calls into maximal runs of concurrency-safe calls and single other calls.

    An unknown tool is not concurrency safe: it gets its own (instant) batch.
    """
    start = 0
    while start < len(calls):
        tool = registry.get(calls[start].name)
        if tool is None or not tool.concurrency_safe:
            yield False, range(start, start + 1)
            start += 1
            continue
        end = start + 1
        while end < len(calls):
            nxt = registry.get(calls[end].name)
            if nxt is None or not nxt.concurrency_safe:
                break
            end += 1
        yield True, range(start, end)
        start = end


async def _run_parallel(
    calls: Sequence[ToolCall],
    indices: range,
    registry: ToolRegistry,
    ctx: ToolContext,
    results: list[ToolResultBlock | None],
    on_result: OnResult | None,
    runner: CallRunner | None,
) -> None:
    tasks = {asyncio.create_task(_run_one(calls[index], registry, ctx, runner)): index for index in indices}
    pending = set(tasks)
    try:
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            # Report in model order among calls that finished together.
            for task in sorted(done, key=tasks.__getitem__):
                index = tasks[task]
                block = task.result()
                results[index] = block
                if on_result is not None:
                    on_result(calls[index], block)
    finally:
        # Cancelled (or on_result raised): stop the rest and let them clean up first.
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)


async def run_tool_calls(
    calls: Sequence[ToolCall],
    registry: ToolRegistry,
    ctx: ToolContext,
    *,
    on_result: OnResult | None = None,
    runner: CallRunner | None = None,
) -> list[ToolResultBlock]:
    """Run the model's tool calls and return one ``tool_result`` block per call, in order.

    Consecutive concurrency-safe calls run in parallel; any other call runs alone,
    after everything before it finished and before anything after it starts. Inputs
    are validated against each tool's schema first (an invalid call does not run).
    ``on_result`` is called as each call completes (completion order); ``runner``, when
    given, runs each call (it awaits the call's execution, or answers it from a record). Failures
    become ``is_error`` blocks; ``asyncio.CancelledError`` propagates after running
    calls were cancelled and cleaned up (a Bash command's process group is killed).
    An exception raised by ``on_result`` itself propagates too.
    """
    results: list[ToolResultBlock | None] = [None] * len(calls)
    # one call (the usual turn) is one batch of one, run alone whatever the tool: no batching to work out
    batches = ((False, range(1)),) if len(calls) == 1 else _batches(calls, registry)
    for parallel, indices in batches:
        if parallel and len(indices) > 1:
            await _run_parallel(calls, indices, registry, ctx, results, on_result, runner)
            continue
        index = indices[0]
        block = await _run_one(calls[index], registry, ctx, runner)
        results[index] = block
        if on_result is not None:
            on_result(calls[index], block)
    complete: list[ToolResultBlock] = []
    for result in results:
        assert result is not None, "run_tool_calls left a call without a result; this is a bug"
        complete.append(result)
    return complete
