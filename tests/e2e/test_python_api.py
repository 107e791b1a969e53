"""End-to-end: the Python API (``queryloop.query``, ``QueryClient``) with tools, hooks and a permission
callback written in Python, through the real ``anthropic`` SDK against the embedded server over loopback."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anthropic

from queryloop import (
    AssistantMessage,
    HookMatcher,
    Message,
    PermissionResultAllow,
    PermissionResultDeny,
    QueryClient,
    QueryOptions,
    ResultMessage,
    SystemMessage,
    TextBlock,
    ToolPermissionContext,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
    create_sdk_mcp_server,
    query,
    tool,
)
from queryloop.handlers.request import AnthropicBackend
from queryloop.handlers.session import SessionPaths
from queryloop.handlers.session.services.transcript import load_ledger

from .harness import HANG_GUARD_S, ROOT, MockApi, assert_ledger_closed, cli_env
from .test_request_layer import scenario

ADD_2_AND_3 = "{tool_use: {name: add, input: {a: 2, b: 3}}}"


@tool
async def add(a: float, b: float) -> str:
    """Add two numbers."""
    return str(a + b)


async def _with_backend(api: MockApi, play: Callable[[AnthropicBackend], Awaitable[Any]]) -> Any:
    client = anthropic.AsyncAnthropic(api_key="test-key", base_url=api.url, max_retries=0)
    try:
        return await play(AnthropicBackend(client))
    finally:
        await client.close()


def _options(tmp_path: Path, backend: AnthropicBackend, **options: Any) -> QueryOptions:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return QueryOptions(
        model="mock-primary", cwd=work, home=tmp_path / "home", backend=backend, retry_base_delay_s=0.001, **options
    )


def _query(api: MockApi, tmp_path: Path, prompt: str, **options: Any) -> list[Message]:
    async def play(backend: AnthropicBackend) -> list[Message]:
        return [m async for m in query(prompt=prompt, options=_options(tmp_path, backend, **options))]

    messages: list[Message] = asyncio.run(_with_backend(api, play))
    return messages


def _result(messages: list[Message]) -> ResultMessage:
    last = messages[-1]
    assert isinstance(last, ResultMessage), messages
    return last


def _tool_result(api: MockApi, request: int) -> dict[str, Any]:
    """The (only) tool_result block of request number ``request``'s last message."""
    (block,) = api.requests[request].messages[-1]["content"]
    assert block["type"] == "tool_result"
    return dict(block)


def test_a_custom_tool_the_model_calls_runs_and_its_result_is_in_the_next_request(tmp_path: Path) -> None:
    text = scenario(f"""  mock-primary:
    - reply: {{content: [{{text: "adding"}}, {ADD_2_AND_3}]}}
    - reply: {{content: [{{text: "2 + 3 = 5"}}]}}
""")
    with MockApi(text) as api:
        messages = _query(api, tmp_path, "add 2 and 3", custom_tools=[add], allowed_tools=["add"])
    built_ins = ("Read", "Write", "Edit", "Bash", "Glob", "Grep", "WebFetch", "WebSearch", "Agent")
    assert api.requests[0].tools == (*built_ins, "add"), "after the built-ins"
    result = _tool_result(api, 1)
    assert (result["content"], result["is_error"]) == ("5.0", False)
    assert_ledger_closed(api.requests)
    init = messages[0]
    assert isinstance(init, SystemMessage) and init.subtype == "init" and init.data["tools"][-1] == "add"
    calls = [b for m in messages if isinstance(m, AssistantMessage) for b in m.content if isinstance(b, ToolUseBlock)]
    assert [(c.name, c.input) for c in calls] == [("add", {"a": 2, "b": 3})]
    results = [b for m in messages if isinstance(m, UserMessage) for b in m.content if isinstance(b, ToolResultBlock)]
    assert [(r.tool_use_id, r.content) for r in results] == [(calls[0].id, "5.0")]
    answer = _result(messages)
    assert (answer.subtype, answer.is_error, answer.terminal_reason) == ("success", False, "completed")
    assert answer.result == "2 + 3 = 5" and answer.num_turns == 2 and answer.total_cost_usd is not None


def test_the_sdks_in_process_server_example_runs_with_its_tools_named_as_mcp_tools(tmp_path: Path) -> None:
    @tool("add", "Add two numbers", {"a": float, "b": float})
    async def add_numbers(args: dict[str, Any]) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": f"Result: {args['a'] + args['b']}"}]}

    calculator = create_sdk_mcp_server(name="calculator", version="2.0.0", tools=[add_numbers])
    text = scenario("""  mock-primary:
    - reply: {content: [{tool_use: {name: mcp__calc__add, input: {a: 2, b: 3}}}]}
    - reply: {content: [{text: "5"}]}
""")
    with MockApi(text) as api:
        messages = _query(api, tmp_path, "add", tools=[], mcp_servers={"calc": calculator}, allowed_tools=["mcp__calc"])
    assert api.requests[0].tools == ("mcp__calc__add",)
    assert _tool_result(api, 1) == {
        "type": "tool_result",
        "tool_use_id": _tool_result(api, 1)["tool_use_id"],
        "content": "Result: 5",
        "is_error": False,
    }
    assert _result(messages).terminal_reason == "completed"


def test_a_tool_that_raises_gives_an_error_result_and_the_run_goes_on(tmp_path: Path) -> None:
    @tool("lookup", "Look an account up", {"account": str}, read_only=True)
    async def lookup(args: dict[str, Any]) -> dict[str, Any]:
        raise KeyError(f"no account {args['account']}")

    text = scenario("""  mock-primary:
    - reply: {content: [{tool_use: {name: lookup, input: {account: "A-1"}}}]}
    - reply: {content: [{text: "that account does not exist"}]}
""")
    with MockApi(text) as api:
        messages = _query(api, tmp_path, "find A-1", custom_tools=[lookup], allowed_tools=["lookup"])
    result = _tool_result(api, 1)
    assert result["is_error"] is True and result["content"] == "lookup failed with KeyError: 'no account A-1'"
    answer = _result(messages)
    assert (answer.is_error, answer.terminal_reason, answer.result) == (
        False,
        "completed",
        "that account does not exist",
    )


def test_input_the_schema_refuses_never_reaches_the_function(tmp_path: Path) -> None:
    seen: list[float] = []

    @tool
    async def square(x: float) -> str:
        """Square a number."""
        seen.append(x)
        return str(x * x)

    text = scenario("""  mock-primary:
    - reply: {content: [{tool_use: {name: square, input: {x: "four", y: 1}}}]}
    - reply: {content: [{text: "sorry"}]}
""")
    with MockApi(text) as api:
        _query(api, tmp_path, "square four", custom_tools=[square], allowed_tools=["square"])
    assert seen == [], "the function never ran"
    result = _tool_result(api, 1)
    assert result["is_error"] is True
    assert result["content"].startswith("<tool_use_error>InputValidationError: Invalid input for tool square;")
    assert "'four' is not of type 'number'" in result["content"] and "'y' was unexpected" in result["content"]


def test_a_completed_call_of_a_tool_that_is_not_idempotent_is_recorded_in_the_ledger(tmp_path: Path) -> None:
    charged: list[int] = []

    @tool(idempotent=False)
    async def charge(cents: int) -> str:
        """Charge the customer's card."""
        charged.append(cents)
        return f"charged {cents} cents, receipt R-{len(charged)}"

    @tool(read_only=True)
    async def balance() -> str:
        """The customer's balance."""
        return "1200 cents"

    text = scenario("""  mock-primary:
    - reply: {content: [{tool_use: {name: balance, input: {}}}, {tool_use: {name: charge, input: {cents: 500}}}]}
    - reply: {content: [{text: "charged"}]}
""")
    with MockApi(text) as api:
        messages = _query(
            api, tmp_path, "charge 5 dollars", custom_tools=[charge, balance], allowed_tools=["charge", "balance"]
        )
    assert charged == [500]
    answer = _result(messages)
    paths = SessionPaths(home=tmp_path / "home", cwd=(tmp_path / "work").resolve(), session_id=answer.session_id)
    ledger, warnings = load_ledger(paths.ledger)
    assert warnings == []
    assert [(e.name, e.input, e.result["content"]) for e in ledger] == [
        ("charge", {"cents": 500}, "charged 500 cents, receipt R-1")
    ], "only the call that cannot be undone: the read-only one is not recorded"


def test_a_python_pre_tool_use_hook_denies_the_call_with_its_reason(tmp_path: Path) -> None:
    asked: list[tuple[dict[str, Any], str | None]] = []
    ran: list[str] = []

    async def no_deploys_on_friday(input_data: dict[str, Any], tool_use_id: str | None, context: Any) -> dict[str, Any]:
        asked.append((input_data, tool_use_id))
        return {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": "no deploys on Friday",
            }
        }

    @tool
    async def deploy(release: str) -> str:
        """Deploy a release."""
        ran.append(release)
        return "deployed"

    text = scenario("""  mock-primary:
    - reply: {content: [{tool_use: {name: deploy, input: {release: v2}}}]}
    - reply: {content: [{text: "not deployed"}]}
""")
    hooks = {"PreToolUse": [HookMatcher(matcher="deploy", hooks=[no_deploys_on_friday])]}
    with MockApi(text) as api:
        messages = _query(api, tmp_path, "deploy v2", custom_tools=[deploy], allowed_tools=["deploy"], hooks=hooks)
    assert ran == []
    ((input_data, tool_use_id),) = asked
    call_id = _tool_result(api, 1)["tool_use_id"]
    assert tool_use_id == call_id
    assert input_data["hook_event_name"] == "PreToolUse" and input_data["tool_name"] == "deploy"
    assert input_data["tool_input"] == {"release": "v2"} and input_data["cwd"] == str((tmp_path / "work").resolve())
    result = _tool_result(api, 1)
    assert result["is_error"] is True and "no deploys on Friday" in result["content"]
    assert _result(messages).permission_denials == [
        {"tool_name": "deploy", "tool_use_id": call_id, "tool_input": {"release": "v2"}}
    ]


def test_a_python_hook_that_raises_is_reported_and_the_call_still_runs(tmp_path: Path) -> None:
    async def broken(input_data: dict[str, Any], tool_use_id: str | None, context: Any) -> dict[str, Any]:
        raise RuntimeError("hook bug")

    text = scenario(f"""  mock-primary:
    - reply: {{content: [{ADD_2_AND_3}]}}
    - reply: {{content: [{{text: "5"}}]}}
""")
    hooks = {"PreToolUse": [HookMatcher(hooks=[broken])]}
    with MockApi(text) as api:
        messages = _query(api, tmp_path, "add", custom_tools=[add], allowed_tools=["add"], hooks=hooks)
    assert _tool_result(api, 1)["content"] == "5.0"
    errors = [m.data for m in messages if isinstance(m, SystemMessage) and m.subtype == "hook_error"]
    assert len(errors) == 1 and errors[0]["hook_event_name"] == "PreToolUse"
    assert "raised RuntimeError: hook bug" in errors[0]["error"] and "broken" in errors[0]["error"]
    assert _result(messages).terminal_reason == "completed"


def test_can_use_tool_answers_what_would_ask_allowing_with_new_input_or_denying(tmp_path: Path) -> None:
    asked: list[tuple[str, dict[str, Any], str | None]] = []

    async def decide(name: str, tool_input: dict[str, Any], context: ToolPermissionContext) -> Any:
        asked.append((name, tool_input, context.tool_use_id))
        if tool_input["a"] == 2:
            return PermissionResultAllow(updated_input={"a": 20, "b": 3})
        return PermissionResultDeny(message="seven is unlucky")

    text = scenario(f"""  mock-primary:
    - reply: {{content: [{ADD_2_AND_3}]}}
    - reply: {{content: [{{tool_use: {{name: add, input: {{a: 7, b: 1}}}}}}]}}
    - reply: {{content: [{{text: "done"}}]}}
""")
    with MockApi(text) as api:
        messages = _query(api, tmp_path, "add twice", custom_tools=[add], can_use_tool=decide)
    allowed, denied = _tool_result(api, 1), _tool_result(api, 2)
    assert (allowed["content"], allowed["is_error"]) == ("23.0", False), "run with the input the callback gave"
    assert denied["is_error"] is True
    assert denied["content"] == "Permission to use add was denied: seven is unlucky"
    assert [(n, i) for n, i, _ in asked] == [("add", {"a": 2, "b": 3}), ("add", {"a": 7, "b": 1})]
    assert [call_id for *_, call_id in asked] == [allowed["tool_use_id"], denied["tool_use_id"]]
    denials = _result(messages).permission_denials
    assert denials is not None and [d["tool_input"] for d in denials] == [{"a": 7, "b": 1}]


def test_a_denial_that_interrupts_ends_the_prompt_through_an_abort_edge(tmp_path: Path) -> None:
    async def stop_everything(name: str, tool_input: dict[str, Any], context: ToolPermissionContext) -> Any:
        return PermissionResultDeny(message="stop right there", interrupt=True)

    text = scenario(f"""  mock-primary:
    - reply: {{content: [{ADD_2_AND_3}]}}
    - reply: {{content: [{{text: "never asked for"}}]}}
""")
    with MockApi(text) as api:
        messages = _query(api, tmp_path, "add", custom_tools=[add], can_use_tool=stop_everything)
    answer = _result(messages)
    assert (answer.is_error, answer.terminal_reason) == (True, "aborted_tools"), "it ends at the gate"
    assert len(api.requests) == 1, "nothing is sent after the interrupt"
    results = [b for m in messages if isinstance(m, UserMessage) for b in m.content if isinstance(b, ToolResultBlock)]
    assert len(results) == 1 and results[0].is_error is True, "the call still gets its result"


def test_without_can_use_tool_a_call_that_would_ask_is_denied(tmp_path: Path) -> None:
    text = scenario(f"""  mock-primary:
    - reply: {{content: [{ADD_2_AND_3}]}}
    - reply: {{content: [{{text: "denied"}}]}}
""")
    with MockApi(text) as api:
        _query(api, tmp_path, "add", custom_tools=[add])
    result = _tool_result(api, 1)
    assert result["is_error"] is True and "cannot ask" in result["content"]


async def _response(client: QueryClient) -> list[Message]:
    return [m async for m in client.receive_response()]


def test_a_client_conversation_carries_the_first_exchange_into_the_second_prompt(tmp_path: Path) -> None:
    text = scenario("""  mock-primary:
    - reply: {content: [{text: "Hello Ada."}]}
    - reply: {content: [{text: "Your name is Ada."}]}
""")

    async def play(backend: AnthropicBackend) -> tuple[list[Message], list[Message]]:
        async with QueryClient(_options(tmp_path, backend)) as client:
            await client.query("My name is Ada.")
            first = await _response(client)
            await client.query("What is my name?")
            return first, await _response(client)

    with MockApi(text) as api:
        first, second = asyncio.run(_with_backend(api, play))
    assert [m["content"] for m in api.requests[1].messages] == [
        "My name is Ada.",
        [{"type": "text", "text": "Hello Ada."}],
        "What is my name?",
    ]
    one, two = _result(first), _result(second)
    assert one.session_id == two.session_id
    assert (one.result, two.result) == ("Hello Ada.", "Your name is Ada.")
    texts = [b.text for m in second if isinstance(m, AssistantMessage) for b in m.content if isinstance(b, TextBlock)]
    assert texts == ["Your name is Ada."], "the second response holds only its own reply"


def test_a_later_prompt_of_a_client_conversation_shows_no_tool_result_of_an_earlier_one(tmp_path: Path) -> None:
    # As Claude Code 2.1.235 streams a conversation: each response shows its own tool results only.
    text = scenario(f"""  mock-primary:
    - reply: {{content: [{ADD_2_AND_3}]}}
    - reply: {{content: [{{text: "5"}}]}}
    - reply: {{content: [{{text: "Still 5."}}]}}
""")

    async def play(backend: AnthropicBackend) -> tuple[list[Message], list[Message]]:
        async with QueryClient(_options(tmp_path, backend, custom_tools=[add])) as client:
            await client.query("add 2 and 3")
            first = await _response(client)
            await client.query("and now?")
            return first, await _response(client)

    with MockApi(text) as api:
        first, second = asyncio.run(_with_backend(api, play))
    assert len([m for m in first if isinstance(m, UserMessage)]) == 1, "the first response shows its tool result"
    assert not [m for m in second if isinstance(m, UserMessage)], "the second shows none"
    assert _result(second).result == "Still 5."


def test_can_use_tool_sees_a_file_tools_path_absolute(tmp_path: Path) -> None:
    # Claude Code 2.1.235 shows can_use_tool Write's file_path absolute and normalised.
    text = scenario("""  mock-primary:
    - reply: {content: [{tool_use: {name: Write, input: {file_path: ./drafts/../out.txt, content: "x"}}}]}
    - reply: {content: [{text: "done"}]}
""")
    asked: list[dict[str, Any]] = []

    async def decide(name: str, tool_input: dict[str, Any], context: ToolPermissionContext) -> Any:
        asked.append(tool_input)
        return PermissionResultAllow()

    with MockApi(text) as api:
        _query(api, tmp_path, "write it", can_use_tool=decide)
    assert asked == [{"file_path": str((tmp_path / "work").resolve() / "out.txt"), "content": "x"}]
    assert (tmp_path / "work" / "out.txt").read_text(encoding="utf-8") == "x"


def test_interrupt_ends_the_prompt_through_its_abort_edge_and_the_conversation_goes_on(tmp_path: Path) -> None:
    started = asyncio.Event()

    @tool(read_only=True)
    async def wait_for_build() -> str:
        """Wait until the build finishes."""
        started.set()
        await asyncio.Event().wait()  # never finishes by itself
        return "built"

    text = scenario("""  mock-primary:
    - reply: {content: [{tool_use: {name: wait_for_build, input: {}}}]}
    - reply: {content: [{text: "ok, stopped"}]}
""")

    async def play(backend: AnthropicBackend) -> tuple[list[Message], list[Message]]:
        options = _options(tmp_path, backend, custom_tools=[wait_for_build], allowed_tools=["wait_for_build"])
        async with QueryClient(options) as client:
            await client.query("build it")
            responses = asyncio.ensure_future(_response(client))
            await asyncio.wait_for(started.wait(), 10)
            await client.interrupt()
            first = await asyncio.wait_for(responses, 10)
            await client.query("never mind")
            return first, await _response(client)

    with MockApi(text) as api:
        first, second = asyncio.run(_with_backend(api, play))
    stopped = _result(first)
    assert (stopped.is_error, stopped.terminal_reason) == (True, "aborted_tools")
    transitions = [m.data["reason"] for m in first if isinstance(m, SystemMessage) and m.subtype == "transition"]
    assert transitions[-1] == "tools_aborted"
    assert len(api.requests) == 2
    assert_ledger_closed(api.requests)
    carried = api.requests[1].messages
    assert carried[0]["content"] == "build it" and carried[-1]["content"] == "never mind"
    assert any(
        isinstance(m["content"], list) and any(b.get("type") == "tool_result" and b["is_error"] for b in m["content"])
        for m in carried
    ), "the interrupted call got an error result before the next prompt"
    assert (_result(second).terminal_reason, _result(second).result) == ("completed", "ok, stopped")


def test_an_interrupt_sent_right_after_the_prompt_ends_it_before_any_request(tmp_path: Path) -> None:
    text = scenario("""  mock-primary:
    - reply: {content: [{text: "answered"}]}
""")

    async def play(backend: AnthropicBackend) -> tuple[list[Message], list[Message]]:
        async with QueryClient(_options(tmp_path, backend)) as client:
            await client.query("first")
            await client.interrupt()  # the prompt waits its turn: the interrupt is its
            first = await _response(client)
            await client.query("second")
            return first, await _response(client)

    with MockApi(text) as api:
        first, second = asyncio.run(_with_backend(api, play))
    stopped = _result(first)
    assert (stopped.is_error, stopped.errors) == (True, ["Interrupted by the user"])
    assert stopped.terminal_reason is not None and stopped.terminal_reason.startswith("aborted_")
    assert len(api.requests) == 1, "the interrupted prompt sent nothing"
    assert api.requests[0].messages[-1] == {"role": "user", "content": "second"}
    assert _result(second).result == "answered"


def _documented_program() -> str:
    """The program docs/python-api.md shows first."""
    page = (ROOT / "docs" / "python-api.md").read_text(encoding="utf-8")
    found = re.search(r"```python\n(.*?)```", page, re.DOTALL)
    assert found is not None, "docs/python-api.md has no python block"
    return found.group(1)


def test_the_documented_program_runs_its_custom_tool_against_the_embedded_server(tmp_path: Path) -> None:
    program = _documented_program()
    assert len([line for line in program.splitlines() if line.strip()]) <= 14, "a short program"
    text = """schema_version: 1
scenario: readme
model: claude-sonnet-4-5
default:
  - reply: {content: [{tool_use: {name: add, input: {a: 2, b: 3}}}]}
  - reply: {content: [{text: "2 + 3 = 5"}]}
"""
    with MockApi(text) as api:
        env = cli_env(api, QUERYLOOP_HOME=str(tmp_path / "home"))
        proc = subprocess.run(
            [sys.executable, "-c", program], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=HANG_GUARD_S
        )
    assert proc.returncode == 0, proc.stderr
    assert _tool_result(api, 1)["content"] == "5.0"
    assert "2 + 3 = 5" in proc.stdout


def test_input_a_permission_callback_gives_is_checked_again_against_the_deny_rules(tmp_path: Path) -> None:
    async def swap(name: str, tool_input: dict[str, Any], context: ToolPermissionContext) -> Any:
        return PermissionResultAllow(updated_input={"command": "touch swapped.txt"})

    text = scenario("""  mock-primary:
    - reply: {content: [{tool_use: {name: Bash, input: {command: "echo harmless > out.txt"}}}]}
    - reply: {content: [{text: "done"}]}
""")
    with MockApi(text) as api:
        messages = _query(api, tmp_path, "go", can_use_tool=swap, disallowed_tools=["Bash(touch:*)"])
    refused = _tool_result(api, 1)
    assert not (tmp_path / "swapped.txt").exists(), "the callback's input ran past a deny rule"
    assert refused["is_error"] is True and "Bash(touch:*)" in refused["content"]
    denials = _result(messages).permission_denials
    assert denials is not None and len(denials) == 1
