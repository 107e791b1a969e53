"""The model requests the web tools make besides the loop's, and what they cost.

Owns :class:`WebRequests`: WebFetch asks the small model, WebSearch the run's model with the search server tool.
Each is sent once and billed apart, as in Claude Code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from queryloop.handlers.messages import MessageView
from queryloop.handlers.request import ModelBackend, ModelCall, ModelFailure, UsageTotals, max_output_tokens
from queryloop.handlers.tools import SearchAnswer, ToolError, search_tool_definition

__all__ = ["SEARCH_PRICE_USD", "WebRequests", "small_model"]

SEARCH_PRICE_USD: Final = 0.01
"""What one search of the server tool costs ($10 per thousand)."""

_PAGE_SYSTEM: Final = "You answer a question about one web page from its content alone."
_SEARCH_SYSTEM: Final = "You run web searches with the web_search tool and summarise what they find."


def small_model(env: Mapping[str, str], model: str) -> str:
    """The model a WebFetch question goes to: the small-model variables', else the run's own."""
    return env.get("ANTHROPIC_SMALL_FAST_MODEL") or env.get("ANTHROPIC_DEFAULT_HAIKU_MODEL") or model


@attrs.define(kw_only=True)
class WebRequests:
    """The web tools' own model requests for one run, and their usage by model."""

    backend: ModelBackend
    model: str  # the run's model (a search goes to it)
    env: Mapping[str, str]  # the process's environment with the settings' env above it
    idle_timeout_s: float  # the run's (queryloop.run.defaults), for each wait of a request
    deadline_s: float | None  # the run's per-request deadline
    named_hosts: frozenset[str] = frozenset()
    totals: UsageTotals = attrs.field(factory=UsageTotals)
    searches: dict[str, int] = attrs.field(factory=dict)  # server-tool searches run, by model

    async def ask_about_page(self, text: str) -> str:
        content = await self._send(small_model(self.env, self.model), _PAGE_SYSTEM, text, ())
        return "".join(str(b.get("text", "")) for b in content if b.get("type") == "text").strip()

    async def search(self, query: str, allowed: Sequence[str], blocked: Sequence[str]) -> SearchAnswer:
        prompt = f"Search the web for: {query}"
        tool = search_tool_definition(allowed, blocked)
        before = self.searches.get(self.model, 0)
        content = await self._send(self.model, _SEARCH_SYSTEM, prompt, (tool,))
        return SearchAnswer(content=content, searches=self.searches.get(self.model, 0) - before)

    async def _send(
        self, model: str, system: str, text: str, tools: tuple[dict[str, Any], ...]
    ) -> tuple[Mapping[str, object], ...]:
        call = ModelCall(
            model=model,
            messages=MessageView.of([{"role": "user", "content": [{"type": "text", "text": text}]}]),
            system=system,
            tools=tools,
            max_tokens=max_output_tokens(model, self.env),
            stream=True,
            attempt=1,
            idle_timeout_s=self.idle_timeout_s,
            deadline_s=self.deadline_s,
            prompt_cache=False,
        )
        reply = await self.backend.send(call, None)
        if isinstance(reply, ModelFailure):
            raise ToolError(f"the model request for this call failed: {reply.message}")
        self._count(model, reply.usage, reply.content)
        return reply.content

    def _count(self, model: str, usage: Mapping[str, object], content: Sequence[Mapping[str, object]]) -> None:
        """Add one reply's usage, and its searches at their price, to the totals."""
        server = usage.get("server_tool_use")
        ran = server.get("web_search_requests") if isinstance(server, Mapping) else None
        if not isinstance(ran, int):  # a server that reports none: the searches its answer shows
            ran = sum(1 for b in content if b.get("type") == "server_tool_use" and b.get("name") == "web_search")
        totals = self.totals.add(model, usage)
        entry = totals.by_model[model]
        if ran and entry.cost_usd is not None:
            entry = attrs.evolve(entry, cost_usd=entry.cost_usd + ran * SEARCH_PRICE_USD)
        self.totals = UsageTotals(by_model={**totals.by_model, model: entry})
        self.searches[model] = self.searches.get(model, 0) + ran
