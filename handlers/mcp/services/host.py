"""MCP layer, what servers ask of the host: its roots, the user's input (elicitation), and what they report (progress).

Owns :class:`Elicitation`, :class:`ElicitAnswer`, :class:`McpProgress` and the ``mcp`` SDK callbacks made from them.
Who answers an elicitation is decided in ``queryloop.run.services``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import attrs

if TYPE_CHECKING:
    import mcp.types
    from mcp.client.session import ElicitationFnT, ListRootsFnT

__all__ = ["ElicitAnswer", "Elicit", "Elicitation", "McpProgress", "elicitation_callback", "roots_callback"]


@attrs.frozen(kw_only=True)
class Elicitation:
    """A server's request for the user's input: a form (``schema``) or a URL to open (``url``)."""

    server: str
    message: str
    mode: Literal["form", "url"] = "form"
    schema: Mapping[str, Any] = attrs.field(factory=dict)  # the form's JSON schema (flat: one property per field)
    url: str | None = None

    def hook_payload(self) -> dict[str, object]:
        """The ``Elicitation`` hook's stdin fields (Claude Code's names)."""
        payload: dict[str, object] = {"mcp_server_name": self.server, "message": self.message, "mode": self.mode}
        if self.mode == "form":
            payload["requested_schema"] = dict(self.schema)
        if self.url is not None:
            payload["url"] = self.url
        return payload


@attrs.frozen(kw_only=True)
class ElicitAnswer:
    """The answer to an :class:`Elicitation`; ``reason`` says why it was declined when no one was asked."""

    action: Literal["accept", "decline", "cancel"]
    content: Mapping[str, Any] = attrs.field(factory=dict)
    reason: str | None = None


Elicit = Callable[[Elicitation], Awaitable[ElicitAnswer]]
"""Who answers a server's request for input."""


@attrs.frozen(kw_only=True)
class McpProgress:
    """A ``notifications/progress`` of a call still running: how far, of how much, and what it says."""

    server: str
    tool: str  # the name the model called
    progress: float
    total: float | None = None
    message: str | None = None

    def text(self) -> str:
        """One line for a status line: ``mcp__s__t 2/4 step two``."""
        amount = f"{self.progress:g}/{self.total:g}" if self.total is not None else f"{self.progress:g}"
        return f"{self.tool} {amount}" + (f" {self.message}" if self.message else "")


def roots_callback(roots: Callable[[], Sequence[Path]]) -> ListRootsFnT:
    """The SDK's ``roots/list`` answer: each of ``roots()`` as a ``file://`` URI named by its folder."""

    async def list_roots(context: object) -> mcp.types.ListRootsResult:
        import mcp.types

        listed = [
            mcp.types.Root.model_validate({"uri": path.resolve().as_uri(), "name": path.name or str(path)})
            for path in roots()
        ]
        return mcp.types.ListRootsResult(roots=listed)

    return list_roots


def elicitation_callback(server: str, elicit: Elicit, answered: Callable[[ElicitAnswer], None]) -> ElicitationFnT:
    """The SDK's ``elicitation/create`` answer for ``server``: ``elicit``'s; ``answered`` is told each answer."""

    async def on_elicit(context: object, params: mcp.types.ElicitRequestParams) -> mcp.types.ElicitResult:
        import mcp.types

        if isinstance(params, mcp.types.ElicitRequestURLParams):
            request = Elicitation(server=server, message=params.message, mode="url", url=params.url)
        else:
            schema = params.requested_schema
            schema_dict = schema if isinstance(schema, dict) else schema.model_dump(by_alias=True, exclude_none=True)
            request = Elicitation(server=server, message=params.message, schema=schema_dict)
        answer = await elicit(request)
        answered(answer)
        content = dict(answer.content) if answer.action == "accept" else None
        return mcp.types.ElicitResult(action=answer.action, content=content)

    return on_elicit
