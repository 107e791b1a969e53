"""End-to-end: the real Claude Agent SDK (pinned in the test extra) drives queryloop as its CLI (``cli_path``).

The SDK starts ``python -m queryloop`` through a small wrapper with ``--input-format
stream-json --output-format stream-json`` and speaks its control protocol on stdin and
stdout; queryloop talks to the embedded server over loopback. Every line queryloop
writes goes through the SDK's own message parser: a line it refused would raise here.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from claude_agent_sdk import (
    AgentDefinition,
    AssistantMessage,
    ClaudeAgentOptions,
    ClaudeSDKClient,
    HookMatcher,
    Message,
    PermissionResultAllow,
    PermissionResultDeny,
    ResultMessage,
    SystemMessage,
    TaskNotificationMessage,
    TaskStartedMessage,
    TaskUpdatedMessage,
    TextBlock,
    ToolPermissionContext,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
    create_sdk_mcp_server,
    query,
    tool,
)

from queryloop import __version__

from .harness import HANG_GUARD_S, MockApi
from .test_request_layer import scenario

pytestmark = pytest.mark.slow  # ~40 s in all: tools/test.sh --fast leaves the module out


@pytest.fixture
def cli_path(tmp_path: Path) -> Path:
    """An executable that runs queryloop, as ``cli_path`` names a CLI (the SDK's version check runs)."""
    wrapper = tmp_path / "queryloop-cli"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m queryloop "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)
    return wrapper


def _options(api: MockApi, cli_path: Path, tmp_path: Path, **options: Any) -> ClaudeAgentOptions:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    env = {
        "ANTHROPIC_BASE_URL": api.url,
        "ANTHROPIC_API_KEY": "test-key",
        "QUERYLOOP_HOME": str(tmp_path / "home"),
        "QUERYLOOP_RETRY_BASE_DELAY_MS": "1",
    }
    return ClaudeAgentOptions(cli_path=cli_path, cwd=work, model="mock-primary", env=env, **options)


RUNNING = "touch running && sleep 3600"
"""A Bash command that says it runs (the file ``running`` in the work folder), then waits for an interrupt."""


async def _until_running(tmp_path: Path) -> None:
    """Until the command ``RUNNING`` has started (polled: its file is the event; the bound only stops a hang)."""
    deadline = asyncio.get_running_loop().time() + HANG_GUARD_S
    while not (tmp_path / "work" / "running").exists():
        assert asyncio.get_running_loop().time() < deadline, "the Bash command never started"
        await asyncio.sleep(0.01)


async def _collect(messages: AsyncIterator[Message]) -> list[Message]:
    return [m async for m in messages]


def _result(messages: list[Message]) -> ResultMessage:
    assert isinstance(messages[-1], ResultMessage), messages
    return messages[-1]


def _texts(messages: list[Message]) -> list[str]:
    return [b.text for m in messages if isinstance(m, AssistantMessage) for b in m.content if isinstance(b, TextBlock)]


def _tool_results(request_messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        b
        for m in request_messages
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]


def _run(play: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(asyncio.wait_for(play(), 60))


def test_a_one_shot_query_through_the_sdk_gets_init_the_answer_and_the_result(tmp_path: Path, cli_path: Path) -> None:
    with MockApi(scenario('  mock-primary:\n    - reply: {content: [{text: "Hello from queryloop."}]}\n')) as api:
        messages = _run(lambda: _collect(query(prompt="hi", options=_options(api, cli_path, tmp_path))))
    init = messages[0]
    assert isinstance(init, SystemMessage) and init.subtype == "init"
    assert init.data["model"] == "mock-primary"
    assert init.data["claude_code_version"] == "2.1.235"
    assert _texts(messages) == ["Hello from queryloop."]
    result = _result(messages)
    assert (result.is_error, result.result, result.terminal_reason) == (False, "Hello from queryloop.", "completed")
    assert result.session_id == init.data["session_id"]
    assert list(api.requests[0].messages) == [{"role": "user", "content": "hi"}]


def test_a_client_conversation_of_three_prompts_carries_the_first_two_exchanges(tmp_path: Path, cli_path: Path) -> None:
    text = scenario("""  mock-primary:
    - reply: {content: [{text: "Hello Ada."}]}
    - reply: {content: [{text: "Noted: blue."}]}
    - reply: {content: [{text: "Ada, blue."}]}
""")

    async def play(api: MockApi) -> list[list[Message]]:
        responses = []
        async with ClaudeSDKClient(_options(api, cli_path, tmp_path)) as client:
            for prompt in ("My name is Ada.", "My colour is blue.", "Who am I?"):
                await client.query(prompt)
                responses.append(await _collect(client.receive_response()))
        return responses

    with MockApi(text) as api:
        responses = _run(lambda: play(api))
        assert [m["content"] for m in api.requests[2].messages] == [
            "My name is Ada.",
            [{"type": "text", "text": "Hello Ada."}],
            "My colour is blue.",
            [{"type": "text", "text": "Noted: blue."}],
            "Who am I?",
        ]
    results = [_result(r) for r in responses]
    assert [r.result for r in results] == ["Hello Ada.", "Noted: blue.", "Ada, blue."]
    assert len({r.session_id for r in results}) == 1
    assert _texts(responses[2]) == ["Ada, blue."], "each response holds only its own answer"


def test_interrupt_while_bash_sleeps_ends_the_prompt_through_its_abort_edge_and_the_session_goes_on(
    tmp_path: Path, cli_path: Path
) -> None:
    text = scenario(
        """  mock-primary:
    - reply: {content: [{tool_use: {name: Bash, input: {command: "RUNNING_COMMAND"}}}]}
    - reply: {content: [{text: "ok, stopped"}]}
""".replace("RUNNING_COMMAND", RUNNING)
    )

    async def play(api: MockApi) -> tuple[list[Message], list[Message]]:
        options = _options(api, cli_path, tmp_path, allowed_tools=["Bash(touch:*)", "Bash(sleep:*)"])
        async with ClaudeSDKClient(options) as client:
            await client.query("wait a while")
            first: list[Message] = []
            async for message in client.receive_response():
                first.append(message)
                if isinstance(message, AssistantMessage) and any(isinstance(b, ToolUseBlock) for b in message.content):
                    await _until_running(tmp_path)
                    await client.interrupt()
            await client.query("never mind")
            return first, await _collect(client.receive_response())

    with MockApi(text) as api:
        first, second = _run(lambda: play(api))
        carried = api.requests[1].messages
    stopped = _result(first)
    # the command sleeps an hour (Bash's own 2-minute timeout would end it in error): only the interrupt ends it
    assert (stopped.is_error, stopped.terminal_reason) == (True, "aborted_tools")
    assert carried[0]["content"] == "wait a while" and carried[-1]["content"] == "never mind"
    assert [r["is_error"] for r in _tool_results(carried)] == [True], "the interrupted call got an error result"
    assert (_result(second).terminal_reason, _result(second).result) == ("completed", "ok, stopped")


def _tool_result_ids(messages: list[Message]) -> list[str]:
    return [
        b.tool_use_id
        for m in messages
        if isinstance(m, UserMessage) and isinstance(m.content, list)
        for b in m.content
        if isinstance(b, ToolResultBlock)
    ]


def _tool_use_ids(messages: list[Message]) -> list[str]:
    return [b.id for m in messages if isinstance(m, AssistantMessage) for b in m.content if isinstance(b, ToolUseBlock)]


def test_a_later_prompt_of_a_conversation_shows_no_tool_result_of_an_earlier_one(
    tmp_path: Path, cli_path: Path
) -> None:
    # Claude Code 2.1.235 (the SDK's `ClaudeSDKClient`, same fake API): the second response is
    # init, the answer, the result; the first prompt's tool_result is not shown again.
    text = scenario("""  mock-primary:
    - reply: {content: [{tool_use: {name: Bash, input: {command: "echo hi"}}}]}
    - reply: {content: [{text: "It said hi."}]}
    - reply: {content: [{text: "Nothing to run."}]}
""")

    async def play(api: MockApi) -> list[list[Message]]:
        responses = []
        async with ClaudeSDKClient(_options(api, cli_path, tmp_path, allowed_tools=["Bash(echo:*)"])) as client:
            for prompt in ("say hi", "and now?"):
                await client.query(prompt)
                responses.append(await _collect(client.receive_response()))
        return responses

    with MockApi(text) as api:
        first, second = _run(lambda: play(api))
    assert _tool_result_ids(first) == _tool_use_ids(first) and len(_tool_use_ids(first)) == 1
    assert not [m for m in second if isinstance(m, UserMessage)], "no user message in the second response"
    assert _texts(second) == ["Nothing to run."] and _result(second).result == "Nothing to run."


def test_an_interrupted_later_prompt_shows_results_for_its_own_calls_only(tmp_path: Path, cli_path: Path) -> None:
    # Claude Code 2.1.235: the interrupted prompt's stream holds one tool_result, for its own call;
    # the prompt after it shows none.
    text = scenario(
        """  mock-primary:
    - reply: {content: [{tool_use: {name: Bash, input: {command: "echo hi"}}}]}
    - reply: {content: [{text: "It said hi."}]}
    - reply: {content: [{tool_use: {name: Bash, input: {command: "RUNNING_COMMAND"}}}]}
    - reply: {content: [{text: "Stopped."}]}
""".replace("RUNNING_COMMAND", RUNNING)
    )

    async def play(api: MockApi) -> list[list[Message]]:
        allowed = ["Bash(echo:*)", "Bash(touch:*)", "Bash(sleep:*)"]
        options = _options(api, cli_path, tmp_path, allowed_tools=allowed)
        responses: list[list[Message]] = []
        async with ClaudeSDKClient(options) as client:
            for prompt in ("say hi", "wait a while", "never mind"):
                await client.query(prompt)
                response: list[Message] = []
                async for message in client.receive_response():
                    response.append(message)
                    if prompt == "wait a while" and _tool_use_ids([message]):
                        await _until_running(tmp_path)
                        await client.interrupt()
                responses.append(response)
        return responses

    with MockApi(text) as api:
        first, interrupted, after = _run(lambda: play(api))
    assert _result(first).result == "It said hi." and _result(interrupted).terminal_reason == "aborted_tools"
    (call,) = _tool_use_ids(interrupted)
    assert _tool_result_ids(interrupted) == [call], "not the first prompt's echo again"
    assert _tool_result_ids(after) == [] and _result(after).result == "Stopped."


def test_python_pre_tool_use_and_stop_hooks_run_in_the_sdk_process(tmp_path: Path, cli_path: Path) -> None:
    text = scenario("""  mock-primary:
    - reply: {content: [{tool_use: {name: Bash, input: {command: "rm -rf build"}}}]}
    - reply: {content: [{text: "I will not delete it."}]}
""")
    seen: list[tuple[str, Any]] = []

    async def guard(input_data: Any, tool_use_id: str | None, context: Any) -> Any:
        seen.append(("PreToolUse", (input_data["tool_name"], input_data["tool_input"], tool_use_id)))
        reason = {"permissionDecision": "deny", "permissionDecisionReason": "no deleting builds"}
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse", **reason}}

    async def on_stop(input_data: Any, tool_use_id: str | None, context: Any) -> Any:
        seen.append(("Stop", input_data["hook_event_name"]))
        return {}

    hooks: Any = {"PreToolUse": [HookMatcher(matcher="Bash", hooks=[guard])], "Stop": [HookMatcher(hooks=[on_stop])]}
    with MockApi(text) as api:
        options = _options(api, cli_path, tmp_path, hooks=hooks, permission_mode="bypassPermissions")
        messages = _run(lambda: _collect(query(prompt="clean up", options=options)))
        denied = _tool_results(api.requests[1].messages)
    assert seen[0][0] == "PreToolUse" and seen[0][1][:2] == ("Bash", {"command": "rm -rf build"})
    assert seen[0][1][2], "the hook got the call's tool_use_id"
    assert seen[1:] == [("Stop", "Stop")]
    assert denied[0]["is_error"] and "no deleting builds" in str(denied[0]["content"])
    assert _result(messages).result == "I will not delete it."


def test_can_use_tool_denies_a_call_that_would_ask_and_the_model_reads_why(tmp_path: Path, cli_path: Path) -> None:
    text = scenario("""  mock-primary:
    - reply: {content: [{tool_use: {name: Write, input: {file_path: notes.txt, content: "x"}}}]}
    - reply: {content: [{text: "Understood."}]}
""")
    asked: list[tuple[str, dict[str, Any]]] = []

    async def can_use_tool(
        name: str, tool_input: dict[str, Any], context: ToolPermissionContext
    ) -> PermissionResultAllow | PermissionResultDeny:
        asked.append((name, tool_input))
        return PermissionResultDeny(message="writing is off today")

    async def prompts() -> AsyncIterator[dict[str, Any]]:
        yield {"type": "user", "message": {"role": "user", "content": "write notes"}}

    with MockApi(text) as api:
        options = _options(api, cli_path, tmp_path, can_use_tool=can_use_tool)
        messages = _run(lambda: _collect(query(prompt=prompts(), options=options)))
        denied = _tool_results(api.requests[1].messages)
    assert asked == [("Write", {"file_path": str(tmp_path / "work" / "notes.txt"), "content": "x"})]
    assert denied[0]["is_error"] and "writing is off today" in str(denied[0]["content"])
    assert not (tmp_path / "work" / "notes.txt").exists()
    result = _result(messages)
    assert result.result == "Understood."
    assert [d["tool_name"] for d in result.permission_denials or []] == ["Write"]


def test_can_use_tool_sees_a_file_tools_path_absolute_and_a_command_as_written(tmp_path: Path, cli_path: Path) -> None:
    # Claude Code 2.1.235 makes Read, Write and Edit's file_path (and NotebookEdit's notebook_path)
    # absolute and normalised for can_use_tool; a Bash command is passed as the model wrote it.
    text = scenario("""  mock-primary:
    - reply:
        content:
          - tool_use: {name: Write, input: {file_path: out.txt, content: "x"}}
          - tool_use: {name: Edit, input: {file_path: ./sub/../notes.txt, old_string: a, new_string: b}}
          - tool_use: {name: Read, input: {file_path: ../outside.txt}}
          - tool_use: {name: Bash, input: {command: "cat ../outside.txt"}}
    - reply: {content: [{text: "Understood."}]}
""")
    asked: list[tuple[str, dict[str, Any]]] = []

    async def can_use_tool(
        name: str, tool_input: dict[str, Any], context: ToolPermissionContext
    ) -> PermissionResultAllow | PermissionResultDeny:
        asked.append((name, tool_input))
        return PermissionResultDeny(message="not today")

    async def prompts() -> AsyncIterator[dict[str, Any]]:
        yield {"type": "user", "message": {"role": "user", "content": "look around"}}

    with MockApi(text) as api:
        options = _options(api, cli_path, tmp_path, can_use_tool=can_use_tool)
        messages = _run(lambda: _collect(query(prompt=prompts(), options=options)))
    work = (tmp_path / "work").resolve()
    assert asked == [
        ("Write", {"file_path": str(work / "out.txt"), "content": "x"}),
        ("Edit", {"file_path": str(work / "notes.txt"), "old_string": "a", "new_string": "b"}),
        ("Read", {"file_path": str(work.parent / "outside.txt")}),
        ("Bash", {"command": "cat ../outside.txt"}),
    ]
    assert _result(messages).result == "Understood."
    written = [
        b.input for m in messages if isinstance(m, AssistantMessage) for b in m.content if isinstance(b, ToolUseBlock)
    ]
    assert written[0] == {"file_path": "out.txt", "content": "x"}, "the stream shows the call as the model wrote it"


def test_a_tool_of_an_in_process_sdk_server_is_called_through_the_control_protocol(
    tmp_path: Path, cli_path: Path
) -> None:
    calls: list[dict[str, Any]] = []

    @tool("add", "Add two numbers", {"a": float, "b": float})
    async def add(args: dict[str, Any]) -> dict[str, Any]:
        calls.append(args)
        return {"content": [{"type": "text", "text": str(args["a"] + args["b"])}]}

    text = scenario("""  mock-primary:
    - reply: {content: [{tool_use: {name: mcp__calc__add, input: {a: 2, b: 3}}}]}
    - reply: {content: [{text: "2 + 3 = 5"}]}
""")
    with MockApi(text) as api:
        options = _options(
            api,
            cli_path,
            tmp_path,
            mcp_servers={"calc": create_sdk_mcp_server("calc", tools=[add])},
            allowed_tools=["mcp__calc__add"],
        )
        messages = _run(lambda: _collect(query(prompt="add 2 and 3", options=options)))
        offered = api.requests[0].tools
        results = _tool_results(api.requests[1].messages)
    assert "mcp__calc__add" in offered
    assert calls == [{"a": 2, "b": 3}]
    assert results[0]["content"] == "5" and not results[0].get("is_error")
    init = messages[0]
    assert isinstance(init, SystemMessage)
    assert {"name": "calc", "status": "connected"}.items() <= init.data["mcp_servers"][0].items()


def test_resume_continues_a_finished_session_with_its_history(tmp_path: Path, cli_path: Path) -> None:
    text = scenario("""  mock-primary:
    - reply: {content: [{text: "Hello Ada."}]}
    - reply: {content: [{text: "You are Ada."}]}
""")
    with MockApi(text) as api:
        first = _run(lambda: _collect(query(prompt="I am Ada.", options=_options(api, cli_path, tmp_path))))
        session_id = _result(first).session_id
        options = _options(api, cli_path, tmp_path, resume=session_id)
        second = _run(lambda: _collect(query(prompt="Who am I?", options=options)))
        carried = [m["content"] for m in api.requests[1].messages]
    assert carried == ["I am Ada.", [{"type": "text", "text": "Hello Ada."}], "Who am I?"]
    assert (_result(second).session_id, _result(second).result) == (session_id, "You are Ada.")


def test_rewind_files_puts_a_file_back_as_it_was_before_the_prompt(tmp_path: Path, cli_path: Path) -> None:
    text = scenario("""  mock-primary:
    - reply: {content: [{tool_use: {name: Write, input: {file_path: config.txt, content: "broken\\n"}}}]}
    - reply: {content: [{text: "Rewrote it."}]}
""")
    (tmp_path / "work").mkdir()
    config = tmp_path / "work" / "config.txt"
    config.write_text("working\n", encoding="utf-8")

    async def play(api: MockApi) -> list[Message]:
        options = _options(
            api,
            cli_path,
            tmp_path,
            permission_mode="acceptEdits",
            enable_file_checkpointing=True,
            extra_args={"replay-user-messages": None},
        )
        async with ClaudeSDKClient(options) as client:
            await client.query("rewrite the config")
            messages = await _collect(client.receive_response())
            assert config.read_text(encoding="utf-8") == "broken\n"
            prompt_ids = [m.uuid for m in messages if isinstance(m, UserMessage) and m.content == "rewrite the config"]
            assert len(prompt_ids) == 1 and prompt_ids[0]
            await client.rewind_files(prompt_ids[0])
        return messages

    with MockApi(text) as api:
        messages = _run(lambda: play(api))
    assert _result(messages).result == "Rewrote it."
    assert config.read_text(encoding="utf-8") == "working\n"


def _stream_json_session(cli_path: Path, tmp_path: Path, lines: list[str]) -> subprocess.CompletedProcess[str]:
    """queryloop fed ``lines`` on stdin as the SDK starts it (no prompt: nothing reaches a model)."""
    flags = ["--input-format", "stream-json", "--output-format", "stream-json", "--verbose"]
    return subprocess.run(
        [str(cli_path), *flags],
        input="".join(line + "\n" for line in lines),
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "ANTHROPIC_API_KEY": "test-key", "QUERYLOOP_HOME": str(tmp_path / "home")},
    )


def test_malformed_control_requests_get_error_responses_and_the_session_goes_on(tmp_path: Path, cli_path: Path) -> None:
    run = _stream_json_session(
        cli_path,
        tmp_path,
        [
            '{"type": "control_request", "request_id": "a", "request": {"subtype": "teleport"}}',
            '{"type": "control_request", "request_id": "b", "request": "interrupt"}',
            '{"type": "control_request", "request": {"subtype": "interrupt"}}',
            "{this is not json",
            json.dumps(
                {
                    "type": "control_request",
                    "request_id": "c",
                    "request": {"subtype": "set_permission_mode", "mode": "x"},
                }
            ),
            '{"type": "control_request", "request_id": "d", "request": {"subtype": "interrupt"}}',
        ],
    )
    answers = {r["request_id"]: r for r in (json.loads(line)["response"] for line in run.stdout.splitlines())}
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    assert (
        answers["a"]["subtype"] == "error" and "Unsupported control request subtype: teleport" in answers["a"]["error"]
    )
    assert answers["b"]["subtype"] == "error" and answers["b"]["error_code"] == "invalid_request"
    assert answers["c"]["subtype"] == "error" and answers["c"]["error_code"] == "invalid_mode"
    assert answers["d"] == {"subtype": "success", "request_id": "d", "response": {"still_queued": []}}
    assert "a control_request without a request_id cannot be answered" in run.stderr
    assert "stdin line 4 is not a JSON object" in run.stderr


def test_a_flag_whose_promise_queryloop_cannot_keep_is_refused_before_anything_runs(
    tmp_path: Path, cli_path: Path
) -> None:
    run = subprocess.run(
        [
            str(cli_path),
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json",
            "--verbose",
            "--task-budget",
            "5",
        ],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        stdin=subprocess.DEVNULL,
    )
    assert run.returncode == 2
    assert "--task-budget is not supported: task budgets" in run.stderr and run.stdout == ""


def test_an_sdk_output_format_gets_the_structured_output_in_its_result_message(tmp_path: Path, cli_path: Path) -> None:
    schema = {"type": "object", "properties": {"sum": {"type": "integer"}}, "required": ["sum"]}
    text = scenario(
        """  mock-primary:
    - reply: {content: [{tool_use: {name: StructuredOutput, input: {sum: "five"}}}]}
    - reply: {content: [{tool_use: {name: StructuredOutput, input: {sum: 5}}}]}
"""
    )
    with MockApi(text) as api:
        options = _options(api, cli_path, tmp_path, output_format={"type": "json_schema", "schema": schema})
        messages = _run(lambda: _collect(query(prompt="2 + 3?", options=options)))
        offered = [t for t in api.requests[0].tool_definitions if t["name"] == "StructuredOutput"]
    result = _result(messages)
    assert (result.subtype, result.structured_output, result.result) == ("success", {"sum": 5}, '{"sum":5}')
    assert offered and offered[0]["input_schema"] == schema


def test_version_names_the_claude_code_release_it_behaves_as_and_queryloops_own(cli_path: Path) -> None:
    run = subprocess.run([str(cli_path), "-v"], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert (run.returncode, run.stdout) == (0, f"2.1.235 (queryloop {__version__}; behaves as Claude Code)\n")
    version = re.match(r"(\d{1,9})\.(\d{1,9})\.(\d{1,9})", run.stdout)  # the Agent SDK's pattern
    assert version is not None and version.group(0) == "2.1.235"


def test_the_sdk_starts_queryloop_without_warning_that_it_is_too_old(
    tmp_path: Path, cli_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with MockApi(scenario('  mock-primary:\n    - reply: {content: [{text: "hi"}]}\n')) as api:
        messages = _run(lambda: _collect(query(prompt="hi", options=_options(api, cli_path, tmp_path))))
    assert _result(messages).result == "hi"
    assert not [r for r in caplog.records if "too old" in r.getMessage()], "Claude Code 2.1.235 draws no warning"


def test_an_agent_given_in_the_sdk_options_runs_in_the_background_and_reports_back(
    tmp_path: Path, cli_path: Path
) -> None:
    call = {"description": "read it", "prompt": "CHILD-TASK read a.txt", "subagent_type": "reader"}
    text = scenario(
        f"""  mock-primary:
    - reply: {{content: [{{tool_use: {{name: Agent, input: {json.dumps(call)}}}}}]}}
    - reply: {{content: [{{text: "Waiting."}}]}}
    - reply: {{content: [{{text: "PARENT-FINAL the reader says hi"}}]}}
""",
        extra='rules:\n  - {when: {first_user_contains: CHILD-TASK}, reply: {content: [{text: "it says hi"}]}}\n',
    )
    reader = AgentDefinition(description="reads files", prompt="You read files.", tools=["Read"])
    with MockApi(text) as api:
        options = _options(api, cli_path, tmp_path, agents={"reader": reader})
        messages = _run(lambda: _collect(query(prompt="go", options=options)))
        child = next(r for r in api.requests if "CHILD-TASK" in json.dumps(r.messages[0]))
    init = messages[0]
    assert isinstance(init, SystemMessage) and "reader" in init.data["agents"]
    assert child.tools == ("Read",) and "You read files." in json.dumps(child.system)
    (started,) = [m for m in messages if isinstance(m, TaskStartedMessage)]
    (ended,) = [m for m in messages if isinstance(m, TaskNotificationMessage)]
    assert started.task_id == ended.task_id and started.tool_use_id == ended.tool_use_id
    assert ended.status == "completed" and ended.summary == "it says hi"
    (updated,) = [m for m in messages if isinstance(m, TaskUpdatedMessage)]  # as Claude Code 2.1.235 sends it
    assert updated.task_id == ended.task_id and updated.status == "completed"
    result = _result(messages)
    assert (result.is_error, result.result) == (False, "PARENT-FINAL the reader says hi")


def test_a_permission_prompt_tool_name_of_an_mcp_tool_has_that_tool_answer(tmp_path: Path, cli_path: Path) -> None:
    server = Path(__file__).resolve().parents[1] / "fixtures" / "mcp" / "approval_server.py"
    asked = tmp_path / "asked.jsonl"
    text = scenario(
        '  mock-primary:\n    - reply: {content: [{tool_use: {name: Bash, input: {command: "touch made"}}}]}\n'
        '    - reply: {content: [{text: "done"}]}\n'
    )
    with MockApi(text) as api:
        options = _options(
            api,
            cli_path,
            tmp_path,
            mcp_servers={"perm": {"command": sys.executable, "args": [str(server), "deny", str(asked)]}},
            permission_prompt_tool_name="mcp__perm__approve",
        )
        messages = _run(lambda: _collect(query(prompt="go", options=options)))
    result = _result(messages)
    assert [d["tool_name"] for d in result.permission_denials or []] == ["Bash"]
    assert json.loads(asked.read_text())["tool_name"] == "Bash" and not (tmp_path / "work" / "made").exists()
