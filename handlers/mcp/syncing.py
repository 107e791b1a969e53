"""MCP layer, the request boundary: servers that went down reconnected, changed tool lists put in the catalog.

Owns the effects of ``syncing_tools`` and ``reconnecting_mcp_servers`` and the edges that change what requests offer
— only here, so the model never sees a schema change mid-request.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from queryloop.fsm import EffectContext, Event, RunState, uses

from ..messages import compact_json
from ..outcome import Notice, with_outcome
from ..request import BackoffServices, backoff_cap_s, backoff_delay_s, with_request
from .data import CatalogUpdate, M, McpRun, McpServices, ServersDown, with_mcp
from .services.client import McpManager

__all__ = [
    "apply_catalog",
    "drop_servers",
    "apply_reconnected",
    "reconnect_servers",
    "start_reconnect",
    "sync_tools",
]


class SyncServices(McpServices, BackoffServices, Protocol):
    """The MCP services plus the backoff settings the request layer uses too."""


def _publish_warnings(ctx: EffectContext[Any, Any], manager: McpManager) -> None:
    for warning in manager.take_warnings():
        ctx.publish(Notice(f"warning: {warning}"))


def _catalog_tokens(definitions: Sequence[dict[str, Any]]) -> int:
    return math.ceil(len(compact_json(list(definitions))) / 4) if definitions else 0


def _owner(name: str, servers: Iterable[str]) -> str | None:
    """The server whose tool ``name`` is: the longest ``mcp__<server>__`` it starts with (``a`` is not ``a__b``)."""
    owners = [s for s in servers if name.startswith(f"mcp__{s}__")]  # a configured name is spelled as tool names are
    return max(owners, key=len) if owners else None


def _changes(old: Iterable[dict[str, Any]], new: Iterable[dict[str, Any]], servers: Iterable[str]) -> tuple[str, ...]:
    """One line per server whose offered tools changed: added, removed, changed."""
    known = tuple(servers)
    before = {str(d["name"]): d for d in old}
    after = {str(d["name"]): d for d in new}
    lines = []
    for server in known:
        mine_before = {n: d for n, d in before.items() if _owner(n, known) == server}
        mine_after = {n: d for n, d in after.items() if _owner(n, known) == server}
        added = sorted(set(mine_after) - set(mine_before))
        removed = sorted(set(mine_before) - set(mine_after))
        changed = sorted(n for n in set(mine_before) & set(mine_after) if mine_before[n] != mine_after[n])
        parts = [f"+{n}" for n in added] + [f"-{n}" for n in removed] + [f"~{n}" for n in changed]
        if parts:
            lines.append(f"{server}: {' '.join(parts)}")
    return tuple(lines)


async def sync_tools(ctx: EffectContext[M, McpServices]) -> Event[object]:
    """At a request boundary: relist the servers that announced a change; report the down ones or a new catalog."""
    manager = ctx.services.mcp
    data = ctx.run.data
    if manager is None:
        return Event(name="tools_in_sync")  # nothing to sync (the driver hands the loop a turn now and then)
    if not manager.started:
        await manager.start()
    dropped = data.mcp.dropped
    changed = [n for n in manager.changed() if n not in dropped]
    if changed:
        await manager.relist(changed)
    _publish_warnings(ctx, manager)
    down = manager.down(exclude=dropped)
    if down:
        failures = tuple(f for n in down if (f := manager.failure(n)) is not None)
        return Event(name="servers_down", data=ServersDown(names=down, failures=failures))
    if tuple(manager.generations(exclude=dropped).items()) == data.mcp.generations:
        return Event(name="tools_in_sync")  # the usual turn: nothing to rebuild
    return Event(name="tool_list_changed", data=_catalog_update(manager, data))


def _catalog_update(manager: McpManager, data: McpRun) -> CatalogUpdate:
    """The catalog the connected servers' current listings make (the dropped ones left out)."""
    dropped = data.mcp.dropped
    definitions = tuple(t.definition() for t in manager.catalog(exclude=dropped))
    return CatalogUpdate(
        definitions=definitions,
        tokens=_catalog_tokens(definitions),
        generations=tuple(manager.generations(exclude=dropped).items()),
        changes=_changes(data.request.tool_catalog, definitions, manager.names),
    )


@uses(counters=("mcp_reconnects",), waits=("max_backoff_s",))
async def reconnect_servers(ctx: EffectContext[M, SyncServices]) -> Event[object]:
    """Reconnect every server that is down (at once); each retry after a backoff. Reconnected: the new catalog."""
    services = ctx.services
    manager = services.mcp
    assert manager is not None, "servers are only down when some are configured"
    retries = ctx.run.count("mcp_reconnects")
    if retries:
        draw = services.rng.random()
        delay = backoff_delay_s(retries - 1, services.retry_base_delay_s, services.retry_max_delay_s, draw)
        await asyncio.sleep(min(delay, backoff_cap_s(ctx.run)))  # the machine's declared bound on one wait
    names = ctx.run.data.mcp.down
    connected = await manager.reconnect(names)
    _publish_warnings(ctx, manager)
    still = tuple(n for n in names if not connected[n])
    if still:
        failures = tuple(f for n in still if (f := manager.failure(n)) is not None)
        for failure in failures:
            ctx.publish(Notice(f"warning: MCP server {failure.server!r} is still down after attempt {retries + 1}"))
        return Event(name="reconnect_failed", data=ServersDown(names=still, failures=failures))
    return Event(name="servers_reconnected", data=_catalog_update(manager, ctx.run.data))


def _with_catalog(data: M, update: CatalogUpdate) -> M:
    data = with_request(data, tool_catalog=update.definitions, tool_catalog_tokens=update.tokens)
    data = with_mcp(data, generations=update.generations)
    if not update.changes:
        return data
    return with_outcome(data, note="MCP tools refreshed: " + "; ".join(update.changes))


def apply_catalog(run: RunState[M], event: Event[CatalogUpdate]) -> M:
    """From the next request on, the model is offered the new catalog."""
    return _with_catalog(run.data, event.data)


def start_reconnect(run: RunState[M], event: Event[ServersDown]) -> M:
    """The servers to reconnect, and why they are down."""
    down = event.data
    why = "; ".join(f"{f.server}: {f.kind}: {f.message}" for f in down.failures) or ", ".join(down.names)
    return with_outcome(with_mcp(run.data, down=down.names), note=f"MCP servers down, reconnecting: {why}")


def apply_reconnected(run: RunState[M], event: Event[CatalogUpdate]) -> M:
    """Every down server is connected again; the catalog is rebuilt from the fresh listings."""
    names = ", ".join(run.data.mcp.down)
    data = with_outcome(with_mcp(run.data, down=()), note=f"MCP servers reconnected: {names}")
    return _with_catalog(data, event.data)


def drop_servers(run: RunState[M], event: Event[ServersDown]) -> M:
    """Servers that stayed down leave the catalog for the rest of the run; a call naming their tools gets an error."""
    names = event.data.names
    known = (*names, *(n for n, _ in run.data.mcp.generations))
    catalog = tuple(d for d in run.data.request.tool_catalog if _owner(str(d["name"]), known) not in names)
    data = with_request(run.data, tool_catalog=catalog, tool_catalog_tokens=_catalog_tokens(catalog))
    mcp = data.mcp
    data = with_mcp(
        data,
        down=(),
        dropped=(*mcp.dropped, *names),
        generations=tuple((n, g) for n, g in mcp.generations if n not in names),
    )
    why = "; ".join(f"{f.server}: {f.kind}: {f.message}" for f in event.data.failures) or ", ".join(names)
    return with_outcome(data, note=f"MCP servers dropped from the tools offered (they stayed down): {why}")
