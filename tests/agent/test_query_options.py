"""The Python API's options: what they become for a run, and the ones refused before anything runs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from queryloop import HookMatcher, OptionsError, QueryClient, QueryOptions, create_sdk_mcp_server, query, tool
from queryloop.frontends.options import agent_options
from queryloop.handlers.hooks import HookFunction
from queryloop.run.config import AgentOptions
from queryloop.run.defaults import DEFAULT_MODEL, DEFAULT_SYSTEM_PROMPT
from queryloop.testing import ScriptedBackend, scripted_reply


async def _hook(input_data: dict[str, Any], tool_use_id: str | None, context: dict[str, Any]) -> dict[str, Any]:
    return {}


def _resolve(options: QueryOptions) -> AgentOptions:
    return agent_options(options, can_use_tool=None)


@tool
async def shout(text: str) -> str:
    """Shout."""
    return text.upper()


def test_the_options_become_the_runs_options_with_settings_rules_and_python_hooks(tmp_path: Path) -> None:
    settings = json.dumps(
        {
            "permissions": {"deny": ["Bash(rm:*)"]},
            "env": {"FROM_SETTINGS": "1"},
            "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "true"}]}]},
        }
    )
    options = QueryOptions(
        cwd=tmp_path,
        settings=settings,
        allowed_tools=["shout", "Bash(git:*)"],
        disallowed_tools="Write",
        system_prompt={"type": "preset", "preset": "claude_code", "append": "Be brief."},
        fallback_model="mock-fallback",
        env={"FROM_OPTIONS": "2"},
        hooks={"PreToolUse": [HookMatcher(matcher="shout", hooks=[_hook], timeout=5)]},
        custom_tools=[shout],
        permission_mode="acceptEdits",
    )
    run = _resolve(options)
    assert (run.request.model, run.request.fallback_models, run.cwd) == (
        "claude-opus-5",  # DEFAULT_MODEL, the opus alias, resolved
        ("mock-fallback",),
        tmp_path.resolve(),
    )
    assert (run.request.system_prompt, run.request.append_system_prompt) == (DEFAULT_SYSTEM_PROMPT, "Be brief.")
    assert [r.text for r in run.permissions.rules.allow] == ["shout", "Bash(git:*)"]
    assert [r.text for r in run.permissions.rules.deny] == ["Bash(rm:*)", "Write"]
    assert run.tools.env == {"FROM_SETTINGS": "1", "FROM_OPTIONS": "2"}
    assert [(m.event, m.matcher) for m in run.hooks.matchers] == [("Stop", ""), ("PreToolUse", "shout")]
    assert run.hooks.matchers[1].hooks == (HookFunction(callback=_hook, timeout_s=5),)
    assert run.tools.custom_tools == (shout,) and run.permissions.mode == "acceptEdits"


def test_mcp_servers_become_the_runs_servers_and_an_in_process_servers_tools_its_custom_tools(tmp_path: Path) -> None:
    calculator = create_sdk_mcp_server("calculator", tools=[shout])
    options = QueryOptions(
        cwd=tmp_path,
        mcp_servers={"deploy": {"command": "python3", "args": ["deploy.py"]}, "calc": calculator},
    )
    run = _resolve(options)
    assert [(s.name, s.type, s.command, s.args) for s in run.tools.mcp_servers] == [
        ("deploy", "stdio", "python3", ("deploy.py",))
    ]
    assert [t.name for t in run.tools.custom_tools] == ["mcp__calc__shout"]
    assert run.tools.custom_tools[0].run is shout.run


def test_no_settings_file_is_read_unless_its_source_is_named(tmp_path: Path) -> None:
    (tmp_path / ".queryloop").mkdir()
    (tmp_path / ".queryloop" / "settings.json").write_text(json.dumps({"model": "from-project-settings"}))
    assert DEFAULT_MODEL == "opus"
    assert _resolve(QueryOptions(cwd=tmp_path)).request.model == "claude-opus-5"
    named = QueryOptions(cwd=tmp_path, setting_sources=["project"])
    assert _resolve(named).request.model == "from-project-settings"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: QueryOptions(permission_mode="yolo"), "permission_mode 'yolo' is not one of default, acceptEdits"),
        (lambda p: QueryOptions(setting_sources=["global"]), "setting_sources ['global'] are not among user"),
        (lambda p: QueryOptions(max_turns=0), "max_turns must be at least 1"),
        (lambda p: QueryOptions(fallback_model=["a", "b", "c", "d"]), "at most 3 fallback models"),
        (lambda p: QueryOptions(resume="x", continue_conversation=True), "resume and continue_conversation exclude"),
        (lambda p: _resolve(QueryOptions(cwd=p / "nowhere")), "is not a directory"),
        (
            lambda p: _resolve(QueryOptions(cwd=p, hooks={"BeforeTool": [HookMatcher(hooks=[_hook])]})),
            "'BeforeTool' is no hook event; the events are PreToolUse",
        ),
        (
            lambda p: _resolve(QueryOptions(cwd=p, hooks={"PreToolUse": [_hook]})),
            "hooks['PreToolUse'] must hold HookMatcher(matcher=..., hooks=[...])",
        ),
        (
            lambda p: _resolve(QueryOptions(cwd=p, hooks={"PreToolUse": [HookMatcher("(", [_hook])]})),
            "hooks['PreToolUse'] matcher '('",
        ),
        (lambda p: _resolve(QueryOptions(cwd=p, settings="{nope")), "--settings"),
        (lambda p: _resolve(QueryOptions(cwd=p, allowed_tools=["Bash("])), "Bash("),
        (
            lambda p: _resolve(QueryOptions(cwd=p, system_prompt={"type": "file"})),
            "system_prompt {'type': 'file'} is neither a str nor",
        ),
        (
            lambda p: _resolve(QueryOptions(cwd=p, mcp_servers={"x": {"url": "ftp://nowhere"}})),
            "mcp_servers: ",
        ),
        (
            lambda p: _resolve(QueryOptions(cwd=p, mcp_servers={"x": {"type": "sdk", "name": "x"}})),
            "mcp_servers['x'] is an sdk server without tools: make it with create_sdk_mcp_server",
        ),
        (
            lambda p: _resolve(QueryOptions(cwd=p, custom_tools=[shout, shout])),
            "two custom tools are named 'shout'",
        ),
    ],
)
def test_options_that_cannot_make_a_run_are_refused_naming_the_problem(make: Any, message: str, tmp_path: Path) -> None:
    with pytest.raises(OptionsError) as raised:
        make(tmp_path)
    assert message in str(raised.value)


def test_an_unknown_session_to_resume_is_refused_before_anything_runs(tmp_path: Path) -> None:
    options = QueryOptions(
        cwd=tmp_path,
        home=tmp_path / "home",
        backend=ScriptedBackend(lambda call: scripted_reply([{"type": "text", "text": "unused"}], call=call)),
        resume="00000000-0000-4000-8000-000000000000",
    )

    async def first_message() -> object:
        return await anext(query(prompt="hi", options=options))

    with pytest.raises(OptionsError, match="No conversation found with session ID: 00000000-0000-4000-8000"):
        asyncio.run(first_message())


def test_without_a_backend_or_an_api_key_the_client_says_what_to_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)

    async def connect() -> None:
        await QueryClient(QueryOptions(cwd=tmp_path, home=tmp_path / "home")).connect()

    with pytest.raises(OptionsError, match=r"set ANTHROPIC_API_KEY .* or pass backend=") as raised:
        asyncio.run(connect())
    says = str(raised.value)  # and how to run offline from any install (tests/test_packaging.py follows it)
    assert "`queryloop mock-api hello --port 8123`" in says
    assert "ANTHROPIC_BASE_URL=http://127.0.0.1:8123 and ANTHROPIC_API_KEY=offline" in says


def test_a_client_keeping_no_session_refuses_a_second_prompt(tmp_path: Path) -> None:
    backend = ScriptedBackend(lambda call: scripted_reply([{"type": "text", "text": "one"}], call=call))
    options = QueryOptions(cwd=tmp_path, home=tmp_path / "home", backend=backend, persist_session=False)

    async def talk() -> str | None:
        async with QueryClient(options) as client:
            await client.query("first")
            answers = [m async for m in client.receive_response()]
            await client.query("second")
            with pytest.raises(OptionsError, match="persist_session=False keeps none"):
                async for _ in client.receive_response():
                    pass
            return getattr(answers[-1], "result", None)

    assert asyncio.run(talk()) == "one"
