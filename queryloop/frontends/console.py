"""Rendering a run for the user: ``text``, ``json`` and ``stream-json`` (Claude Code's shapes), a class each.

Owns the text and json renderers and :func:`renderer_for`; what they share is in ``renderer``, stream-json's lines
in ``stream_json``. Data is never markup nor a terminal command: text is built from plain strings and made inert
(docs/cli.md).
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

from queryloop.fsm import Step, inert, uses
from queryloop.handlers.context import CompactionDone
from queryloop.handlers.messages import ToolResultBlock
from queryloop.handlers.outcome import Notice
from queryloop.handlers.request import ApiRetry, AssistantMessage, RequestLog

from ..run.observe import SubagentEnded, SubagentStarted
from .formats import OUTPUT_FORMATS
from .renderer import Renderer, result_text
from .stream_json import StreamJsonRenderer, VerboseJsonRenderer

__all__ = [
    "RENDERERS",
    "JsonRenderer",
    "Renderer",
    "StreamJsonRenderer",
    "TextRenderer",
    "VerboseJsonRenderer",
    "renderer_for",
]

_ERROR_STATES_STYLE = "bold red"


@uses(states=("calling_model", "completed", "refusal"))
class TextRenderer(Renderer):
    """``--output-format text``: the answer streamed to stdout, a coloured line per transition on stderr."""

    def waiting(self, on: bool) -> None:
        if not self.err.is_terminal:
            return
        if on and self.status is None:
            self.status = self.err.status("waiting on the model…", spinner="dots")
            self.status.start()
        elif not on and self.status is not None:
            self.status.stop()
            self.status = None

    def start(self, **fields: Any) -> None:
        super().start(**fields)
        if self.verbose:
            self.err.print(Text(inert(f"queryloop: model {fields['model']}, cwd {fields['cwd']}"), style="dim"))
        self.waiting(True)

    def show_request(self, log: RequestLog) -> None:
        if self.verbose:
            ttft = f", first token {log.ttft_ms:.0f} ms" if log.ttft_ms is not None else ""
            self.note(
                (
                    f"  request {log.request_id} attempt {log.attempt} {log.model} → {log.status} "
                    f"{log.stop_reason or log.error_kind or ''} in {log.duration_ms:.0f} ms{ttft}",
                    "dim",
                )
            )

    def show_text(self, text: str) -> None:
        self.out.write(inert(text))
        self.out.flush()
        self.streamed_text = True
        self.at_line_start = text.endswith("\n")

    def show_assistant(self, item: AssistantMessage) -> None:
        if not item.log.stream:  # a non-streamed reply (stream fallback): print it whole
            text = "".join(b.get("text", "") for b in item.message["content"] if b.get("type") == "text")
            if text:
                self.waiting(False)
                self.show_text(text)

    def show_step(self, step: Step) -> None:
        counters = " ".join(f"{k}={v}" for k, v in step.counter_dict().items() if v)
        style = (
            "cyan"
            if step.progress
            else ("red" if step.terminal and step.dest not in ("completed", "refusal") else "magenta")
        )
        extra = (f" {counters}", "dim") if counters else ""
        self.note((f"· {step.reason}", style), " ", (f"{step.source} → {step.dest}", "dim"), extra)
        if step.dest == "calling_model" and not step.terminal:
            self.waiting(True)

    def show_subagent_started(self, item: SubagentStarted) -> None:
        how = "in the background" if item.background else "(waited for)"
        self.note(("  ⇢ ", "cyan"), f"agent {item.agent_id} ({item.agent_type}) started {how}: {item.description}")

    def show_subagent_ended(self, item: SubagentEnded) -> None:
        r = item.report
        style = "green" if r.status == "completed" else "red"
        self.note(("  ⇠ ", style), f"agent {r.agent_id} {r.status} after {r.duration_ms} ms, {r.tool_uses} tool use(s)")

    def show_retry(self, item: ApiRetry) -> None:
        self.note(
            (
                f"  retrying in {item.retry_delay_ms} ms (attempt "
                f"{item.attempt}/{item.max_retries}, status {item.error_status})",
                "yellow",
            )
        )

    def show_compaction(self, item: CompactionDone) -> None:
        b = item.boundary
        lossy = f", lossy: {b.dropped_messages} message(s) dropped" if b.lossy else ""
        self.note((f"  compacted ({b.trigger}): {b.pre_tokens} → {b.post_tokens} tokens{lossy}", "blue"))

    def show_notice(self, notice: Notice) -> None:
        if self.verbose:
            self.note((f"  {notice.text}", "dim"))

    def show_tool_result(self, name: str, result: ToolResultBlock) -> None:
        mark = ("✗", "red") if result.get("is_error") else ("✓", "green")
        first = result_text(result.get("content", "")).strip().splitlines()[:1]
        self.note("  ", mark, f" {name}: {first[0][:100] if first else ''}")

    def show_result(self, result: dict[str, Any]) -> None:
        if result["is_error"]:
            if not self.at_line_start:
                self.out.write("\n")
            text = result.get("result") or "; ".join(result.get("errors", []))
            label = f"Error ({result['terminal_reason']}):"
            self.err.print(Text.assemble((label, _ERROR_STATES_STYLE), inert(f" {text}")))
        else:
            answer = result.get("result") or ""
            if not self.streamed_text and answer:
                self.out.write(inert(answer))
                self.at_line_start = answer.endswith("\n")
            if not self.at_line_start:
                self.out.write("\n")
        self.out.flush()
        if self.verbose:
            cost = result["total_cost_usd"]
            self.err.print(
                Text(
                    f"{result['num_turns']} turn(s), {result['duration_ms']} ms, cost "
                    f"{'unknown' if cost is None else f'${cost:.4f}'}",
                    style="dim",
                )
            )


class JsonRenderer(Renderer):
    """``--output-format json``: the result object only (and warnings on stderr); with ``--verbose``,
    :class:`VerboseJsonRenderer`."""


RENDERERS: dict[str, type[Renderer]] = {fmt: globals()[name] for fmt, name in OUTPUT_FORMATS.items()}
"""The renderer of each ``--output-format`` (the formats and their classes: ``queryloop.frontends.formats``)."""


def renderer_for(fmt: str, **options: Any) -> Renderer:
    """The renderer of output format ``fmt`` (``text``, ``json``, ``stream-json``); ``json`` with ``verbose``
    prints every message as one array (:class:`VerboseJsonRenderer`)."""
    if fmt == "json" and options.get("verbose"):
        return VerboseJsonRenderer(**options)
    return RENDERERS[fmt](**options)
