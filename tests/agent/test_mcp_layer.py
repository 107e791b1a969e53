"""The MCP layer's pure parts: configuration, names, the ledger identity of a call, what a change looks like.

The connections themselves are exercised end to end against real servers (``tests/e2e/test_mcp.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from queryloop.handlers.mcp import McpConfigError, McpFailure, McpTool, parse_mcp_servers, tool_name, with_timeouts
from queryloop.handlers.mcp.syncing import _changes
from queryloop.handlers.session import input_hash
from queryloop.run.mcp_config import load_mcp_servers


def test_a_stdio_server_is_the_default_and_variables_are_expanded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QL_TOKEN", "s3cret")
    monkeypatch.delenv("QL_REGION", raising=False)
    servers = parse_mcp_servers(
        {
            "mcpServers": {
                "local": {"command": "srv", "args": ["--region", "${QL_REGION:-eu}"], "env": {"T": "${QL_TOKEN}"}},
                "remote": {"type": "http", "url": "https://h/mcp", "headers": {"Authorization": "Bearer ${QL_TOKEN}"}},
            }
        },
        "f.json",
    )
    local, remote = servers["local"], servers["remote"]
    assert (local.type, local.command, local.args, dict(local.env)) == (
        "stdio",
        "srv",
        ("--region", "eu"),
        {"T": "s3cret"},
    )
    assert (remote.type, remote.url, dict(remote.headers)) == (
        "http",
        "https://h/mcp",
        {"Authorization": "Bearer s3cret"},
    )
    assert "s3cret" not in repr(remote), "headers may hold credentials: never in a repr"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"command": "a", "url": "http://h"}, "a url needs type http or sse"),
        ({"type": "sse", "command": "a", "url": "http://h"}, "has a url, not a command"),
        ({"command": 3}, "3 is not of type 'string'"),
        ({"command": "a", "args": "x"}, "'x' is not of type 'array'"),
    ],
)
def test_a_malformed_server_names_where_and_what(entry: dict[str, object], message: str) -> None:
    with pytest.raises(McpConfigError) as caught:
        parse_mcp_servers({"mcpServers": {"s": entry}}, "cfg.json")
    assert str(caught.value).startswith("cfg.json: at .mcpServers.s") and message in str(caught.value)


def test_mcp_timeouts_are_milliseconds_a_call_at_least_a_second_and_a_servers_own_timeout_wins() -> None:
    document = {"mcpServers": {"own": {"command": "x", "timeout": 5000}, "plain": {"command": "x"}}}
    servers = tuple(parse_mcp_servers(document, "test").values())
    warnings: list[str] = []
    own, plain = with_timeouts(servers, {"MCP_TOOL_TIMEOUT": "300", "MCP_TIMEOUT": "2500"}, warnings)
    assert (own.tool_timeout_s, plain.tool_timeout_s) == (5.0, 1.0)
    assert own.startup_timeout_s == plain.startup_timeout_s == 2.5
    assert warnings == []
    unset = with_timeouts(servers, {}, warnings)[1]
    assert (unset.tool_timeout_s, unset.startup_timeout_s) == (None, None)


@pytest.mark.parametrize("value", ["soon", "-5", "0", "1.5"])
def test_an_mcp_timeout_that_is_no_whole_number_of_ms_is_not_used_with_a_warning(value: str) -> None:
    servers = tuple(parse_mcp_servers({"mcpServers": {"s": {"command": "x", "timeout": 10}}}, "test").values())
    warnings: list[str] = []
    [server] = with_timeouts(servers, {"MCP_TOOL_TIMEOUT": value}, warnings)
    assert server.tool_timeout_s is None, "a server's timeout under a second is not used either"
    assert warnings == [f"MCP_TOOL_TIMEOUT={value!r} is not a whole number of milliseconds above 0; it is not used"]


def test_names_the_api_refuses_are_made_safe() -> None:
    assert tool_name("my.server", "get user") == "mcp__my_server__get_user"


def test_an_idempotency_key_is_not_part_of_a_calls_identity() -> None:
    tool = McpTool(
        server="deploy",
        name="mcp__deploy__deploy",
        remote="deploy",
        description="d",
        input_schema={"type": "object", "properties": {"release": {}, "idempotency_key": {}, "requestId": {}}},
    )
    ignore = tool.attempt_fields()
    assert ignore == ("idempotency_key", "requestId")
    first = input_hash(tool.name, {"release": "v42", "idempotency_key": "a", "requestId": "1"}, ignore)
    again = input_hash(tool.name, {"release": "v42", "idempotency_key": "b", "requestId": "2"}, ignore)
    other = input_hash(tool.name, {"release": "v43", "idempotency_key": "a", "requestId": "1"}, ignore)
    assert first == again != other
    assert input_hash("Bash", {"command": "x"}) == input_hash("Bash", {"command": "x"}, ())


def test_a_failure_is_a_line_for_the_model_and_a_structured_error() -> None:
    text = McpFailure(server="s", tool="t", kind="timeout", message="no answer in time").text()
    line, detail = text.splitlines()
    assert line == "MCP tool 't' of server 's' failed (timeout): no answer in time"
    assert detail == '{"mcp_error": {"server": "s", "tool": "t", "kind": "timeout", "message": "no answer in time"}}'


def test_a_catalog_change_says_per_server_what_was_added_removed_and_changed() -> None:
    old = [{"name": "mcp__a__x", "d": 1}, {"name": "mcp__a__y", "d": 1}, {"name": "mcp__b__z", "d": 1}]
    new = [{"name": "mcp__a__x", "d": 2}, {"name": "mcp__a__w", "d": 1}, {"name": "mcp__b__z", "d": 1}]
    assert _changes(old, new, ["a", "b"]) == ("a: +mcp__a__w -mcp__a__y ~mcp__a__x",)


def test_a_servers_tools_are_told_from_those_of_a_server_whose_name_it_begins() -> None:
    old = [{"name": "mcp__a__x"}, {"name": "mcp__a__b__y"}]
    new = [{"name": "mcp__a__b__y"}]
    assert _changes(old, new, ["a", "a__b"]) == ("a: -mcp__a__x",), "a__b's tool is not a's"


def _project(tmp_path: Path) -> Path:
    (tmp_path / ".mcp.json").write_text('{"mcpServers": {"p": {"command": "p"}, "q": {"command": "q"}}}')
    return tmp_path


def test_a_project_server_starts_only_when_approved_and_the_flag_wins_a_name(tmp_path: Path) -> None:
    cwd = _project(tmp_path)
    none, warnings = load_mcp_servers(cwd=cwd, settings={})
    assert none == () and len(warnings) == 2 and "enabledMcpjsonServers" in warnings[0]
    some, _ = load_mcp_servers(cwd=cwd, settings={"enabledMcpjsonServers": ["q"]})
    assert [s.name for s in some] == ["q"]
    every, _ = load_mcp_servers(cwd=cwd, settings={"enableAllProjectMcpServers": True, "disabledMcpjsonServers": ["p"]})
    assert [s.name for s in every] == ["q"]
    flagged, _ = load_mcp_servers(
        cwd=cwd,
        settings={"enableAllProjectMcpServers": True},
        mcp_config=['{"mcpServers": {"q": {"command": "mine"}}}'],
    )
    assert {s.name: s.command for s in flagged} == {"p": "p", "q": "mine"}
    strict, warnings = load_mcp_servers(
        cwd=cwd, settings={"enableAllProjectMcpServers": True}, mcp_config=['{"mcpServers": {}}'], strict=True
    )
    assert strict == () and warnings == []


def test_closing_the_servers_closes_their_logs_even_when_a_disconnect_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from queryloop.handlers.mcp import McpManager

    servers = parse_mcp_servers({"mcpServers": {"s": {"command": "true"}}}, "<test>")
    manager = McpManager(servers.values(), cwd=Path("/"))
    log = manager._log("s")

    async def fails(connection: object) -> None:
        raise RuntimeError("the server's task ended badly")

    monkeypatch.setattr(manager, "_disconnect", fails)
    with pytest.raises(RuntimeError):
        asyncio.run(manager.close())
    assert log.closed
