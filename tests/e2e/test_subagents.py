"""End-to-end: the Agent tool — sub-agents as child runs of the same machine, acknowledged apart from completed.

Each test plays ``queryloop run`` (or an in-process :class:`AgentRun`) through the real
``anthropic`` SDK against the embedded server, which tells a child's requests from its
parent's by their first user message (``first_user_contains``). Behaviour observed on Claude
Code 2.1.235 against a fake API: a background agent's call is acknowledged at once with its
id and output file; its answer comes back as a ``<task-notification>`` user message that
starts a new turn once the parent answered (``-p`` waits for running agents); a foreground
call's result is the answer then an ``agentId``/usage block; child stream-json lines carry
``parent_tool_use_id``; an unknown type is an error result naming the types. Order is set by
events, not by time: a child's reply is held (the scenario's ``hold:``) until a parent request
named ``parent-…`` came in, or until a file the test creates when the run's output shows the
parent somewhere definite. Time enters only where the agents' time limit is what is tested
(``AGENT_LIMIT_S``). Together with ``test_every_transition`` these runs take every transition
of the agents layer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import pytest

from queryloop.fsm import Step
from queryloop.handlers.request import AnthropicBackend
from queryloop.run.agent import AgentRun, query_loop_program, restore_run, snapshot_run
from queryloop.run.config import AgentOptions, Limits, PermissionSettings, RequestSettings

from .harness import HANG_GUARD_S, ROOT, CliRun, MockApi, cli_command, cli_env, run_cli

pytestmark = pytest.mark.slow  # a dozen CLI runs, some holding a reply a few seconds

CHILD = "CHILD-TASK"
AGENT_LIMIT_S = "10"
"""The agents' time limit where a test waits for it: far past the parent's few quick steps before it (a busy
machine has taken over a second for them)."""


def agent_call(prompt: str = f"{CHILD} read hello.txt", *, background: bool | None = None, **extra: str) -> str:
    call: dict[str, Any] = {"description": "read hello", "prompt": prompt, **extra}
    if background is not None:
        call["run_in_background"] = background
    return json.dumps({"tool_use": {"name": "Agent", "input": call}})


def child_rules(*replies: str, marker: str = CHILD) -> str:
    """The child's replies in order (each a YAML step body), routed by its prompt."""
    out = ""
    for reply in replies:
        out += f"  - {{when: {{first_user_contains: {json.dumps(marker)}}}, times: 1, {reply[1:]}\n"
    return out


def scenario(parent: list[str], rules: str, otherwise_child: str | None = None) -> str:
    if otherwise_child is not None:
        rules += f"  - {{when: {{first_user_contains: {CHILD}}}, {otherwise_child[1:]}\n"
    text = "schema_version: 1\nscenario: subagents\nmodel: mock-primary\nrules:\n" + (rules or "  []\n")
    text += "models:\n  mock-primary:\n" + "".join(f"    - {step}\n" for step in parent)
    return text


def modifiers(delay_ms: int = 0, name: str = "", hold: str = "") -> str:
    """A step's ``delay_ms``, ``name`` and ``hold`` (a YAML flow mapping), as the step's extra keys."""
    out = f", delay_ms: {delay_ms}" if delay_ms else ""
    out += f", name: {name}" if name else ""
    return out + (f", hold: {hold}" if hold else "")


def text_reply(text: str, delay_ms: int = 0, *, name: str = "", hold: str = "") -> str:
    return f"{{reply: {{content: [{{text: {json.dumps(text)}}}]}}{modifiers(delay_ms, name, hold)}}}"


def tools_reply(*calls: str, delay_ms: int = 0, name: str = "", hold: str = "") -> str:
    return f"{{reply: {{content: [{', '.join(calls)}]}}{modifiers(delay_ms, name, hold)}}}"


def until_step(name: str) -> str:
    """A hold until a request the step called ``name`` answers has come in."""
    return f"{{step: {name}}}"


def until_file(path: Path) -> str:
    """A hold until ``path`` exists (a test creates it)."""
    return f"{{file: {json.dumps(str(path))}}}"


READ = json.dumps({"tool_use": {"name": "Read", "input": {"file_path": "hello.txt"}}})
BYPASS = ["--permission-mode", "bypassPermissions"]


def first_user(request: Any) -> str:
    content = request.messages[0]["content"]
    return content if isinstance(content, str) else " ".join(b.get("text", "") for b in content)


def split(requests: list[Any]) -> tuple[list[Any], list[Any]]:
    """The parent's requests and the children's, by their first user message."""
    children = [r for r in requests if CHILD in first_user(r)]
    return [r for r in requests if r not in children], children


def results_of(request: Any) -> list[dict[str, Any]]:
    return [
        b
        for m in request.messages
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]


def user_texts(request: Any) -> list[str]:
    return [m["content"] for m in request.messages if m["role"] == "user" and isinstance(m["content"], str)]


def run_releasing(
    args: list[str], api: MockApi, cwd: Path, release: Path, when: Callable[[dict[str, Any]], bool], **env: str
) -> CliRun:
    """``queryloop run ARGS`` in stream-json, like ``run_cli``; ``release`` is created as soon as a line of its
    output satisfies ``when`` (a step of the scenario holds until it exists)."""
    cmd = [*cli_command(cwd), "--permission-mode", "bypassPermissions", *args]
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=cli_env(api, **env),
            cwd=ROOT,
        )
        assert proc.stdout is not None
        read: list[str] = []
        try:
            for line in proc.stdout:
                read.append(line)
                if not release.exists() and when(json.loads(line)):
                    release.touch()
            proc.wait(HANG_GUARD_S)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
        err.seek(0)
        done = subprocess.CompletedProcess(cmd, proc.returncode, "".join(read), err.read())
    return CliRun(done, "stream-json")


def agent_ended(line: dict[str, Any]) -> bool:
    """The run's output says a sub-agent ended (its report is ready: the line is written after)."""
    return line.get("subtype") == "task_notification"


def parent_waits(line: dict[str, Any]) -> bool:
    """The run's output says the parent (not a sub-agent) waits for its agents."""
    return (
        line.get("subtype") == "transition" and line["to"] == "awaiting_agents" and not line.get("parent_tool_use_id")
    )


def start_run(cwd: Path, api: MockApi, *args: str) -> subprocess.Popen[str]:
    """``queryloop run -p go`` in stream-json, left running (a test interrupts or kills it)."""
    cmd = cli_command(cwd)
    cmd += ["-p", "go", "--model", "mock-primary", *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(api), cwd=ROOT)


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    where = tmp_path / "cwd"
    where.mkdir()
    (where / "hello.txt").write_text("hello\n")
    return where


def test_a_background_agent_is_acknowledged_then_its_report_starts_a_turn(cwd: Path) -> None:
    text = scenario(
        [
            tools_reply(agent_call()),
            text_reply("Waiting for the agent.", name="parent-waiting"),
            text_reply("PARENT-FINAL it said hello"),
        ],
        child_rules(tools_reply(READ), text_reply("the file says hello", hold=until_step("parent-waiting"))),
    )
    with MockApi(text) as api:
        run = run_cli(["-p", "go", "--model", "mock-primary"], api=api, cwd=cwd)
        parent, children = split(api.requests)
    assert run.returncode == 0, run.stderr
    assert run.result["result"] == "PARENT-FINAL it said hello"
    assert run.reasons.count("agent_report_turn") == 1 and "agent_completion_reported" in run.reasons
    assert len(parent) == 3 and len(children) == 2
    (ack,) = results_of(parent[1])
    # observed: one text block whose lines include `agentId: ID` and `output_file: PATH`
    ((block,),) = [ack["content"]]
    assert block["type"] == "text" and not ack.get("is_error")
    lines = block["text"].splitlines()
    (agent_id,) = [line.removeprefix("agentId: ") for line in lines if line.startswith("agentId: ")]
    assert len(agent_id) == 17 and agent_id.startswith("a")  # Claude Code's shape: "a" and 16 hex digits
    assert any(line.startswith("output_file: /") for line in lines)
    notification = user_texts(parent[2])[-1]
    assert f"<task-id>{agent_id}</task-id>" in notification and "<status>completed</status>" in notification
    assert "<result>the file says hello</result>" in notification
    assert 'Agent "read hello" finished' in notification
    # the child: its own system prompt and tools (no Agent: a child starts none), its prompt as it was given
    child = children[0]
    assert first_user(child) == f"{CHILD} read hello.txt"
    assert "Agent" not in child.tools and "Read" in child.tools
    assert "sub-agent" in json.dumps(child.system)
    # observed: a sub-agent's system prompt tells it its working directory and model (our words)
    assert f"working directory: {cwd}" in json.dumps(child.system) and "model: mock-primary" in json.dumps(child.system)
    # stream-json: the task's start and end, the child's lines tagged with the call that started it
    call_id = ack["tool_use_id"]
    # observed: the user line of the acknowledgement carries the launch's fields as tool_use_result
    (shown,) = [u for u in run.of("user") if u["message"]["content"][0].get("tool_use_id") == call_id]
    assert shown["tool_use_result"] == {
        "isAsync": True,
        "status": "async_launched",
        "agentId": agent_id,
        "description": "read hello",
        "resolvedModel": "mock-primary",
        "prompt": f"{CHILD} read hello.txt",
        "outputFile": shown["tool_use_result"]["outputFile"],
        "canReadOutputFile": True,
    }
    assert shown["tool_use_result"]["outputFile"].endswith(f"agent-{agent_id}.jsonl")
    (started,) = run.of("system", "task_started")
    assert started["task_id"] == agent_id and started["tool_use_id"] == call_id and started["prompt"].startswith(CHILD)
    (ended,) = run.of("system", "task_notification")
    assert ended["status"] == "completed" and ended["summary"] == "the file says hello"
    # observed: a task_progress line per tool call of the agent, and a task_updated line before the notification
    (progress,) = run.of("system", "task_progress")
    assert progress["task_id"] == agent_id and progress["tool_use_id"] == call_id
    assert progress["subagent_type"] == "general-purpose" and progress["last_tool_name"] == "Read"
    assert progress["usage"]["tool_uses"] == 1 and progress["usage"]["total_tokens"] > 0
    assert "parent_tool_use_id" not in progress
    (updated,) = run.of("system", "task_updated")
    assert updated["task_id"] == agent_id and updated["patch"]["status"] == "completed"
    assert run.lines.index(updated) + 1 == run.lines.index(ended)
    tagged = [line for line in run.lines if line.get("parent_tool_use_id") == call_id]
    assert {line["type"] for line in tagged} >= {"assistant", "user"}
    assert all(line["subagent_type"] == "general-purpose" for line in tagged if line["type"] == "assistant")
    # observed: the init line lists the built-in agents by name, case aside, and the Agent tool first, as Task
    (init,) = run.of("system", "init")
    assert init["agents"] == ["claude", "Explore", "general-purpose", "Plan"]
    assert init["tools"][0] == "Task" and "Agent" not in init["tools"]
    # its sidechain transcript beside the session's, with what it is
    sidechain = Path(ended["output_file"])
    first = json.loads(sidechain.read_text().splitlines()[0])
    assert first["isSidechain"] is True and first["agentId"] == agent_id
    assert first["sessionId"] == run.result["session_id"] and sidechain.parent.name == "subagents"
    meta = json.loads(sidechain.with_suffix(".meta.json").read_text())
    assert meta == {
        "agentType": "general-purpose",
        "description": "read hello",
        "toolUseId": call_id,
        "spawnDepth": 1,
        "background": True,
    }
    listed = subprocess.run(
        [sys.executable, "-m", "queryloop", "sessions"], capture_output=True, text=True, cwd=cwd, env=cli_env(None)
    )
    header, row = listed.stdout.splitlines()
    assert header.split()[5] == "AGENTS" and row.split()[0] == run.result["session_id"] and row.split()[5] == "1"
    # the result counts the child's requests with the parent's
    usage = run.result["modelUsage"]["mock-primary"]
    counted = usage["inputTokens"] + usage["cacheReadInputTokens"] + usage["cacheCreationInputTokens"]
    assert counted == sum(r.input_tokens for r in parent + children) > sum(r.input_tokens for r in parent)


def test_a_foreground_agent_answers_as_the_calls_result(cwd: Path) -> None:
    text = scenario(
        [tools_reply(agent_call(background=False)), text_reply("PARENT-FINAL done")],
        child_rules(text_reply("the file says hello")),
    )
    with MockApi(text) as api:
        run = run_cli(["-p", "go", "--model", "mock-primary"], api=api, cwd=cwd)
        parent, children = split(api.requests)
    assert run.returncode == 0 and run.result["result"] == "PARENT-FINAL done", run.stderr
    assert "agent_report_turn" not in run.reasons and len(parent) == 2 and len(children) == 1
    (result,) = results_of(parent[1])
    answer, usage = result["content"]
    assert answer == {"type": "text", "text": "the file says hello"}
    assert usage["text"].startswith("agentId: a") and "<usage>subagent_tokens: " in usage["text"]
    assert not any("<task-notification>" in t for t in user_texts(parent[1]))
    # observed: the call's user line carries the answer and the agent's counts apart, not their texts run together
    (shown,) = [u for u in run.of("user") if u["message"]["content"][0].get("tool_use_id") == result["tool_use_id"]]
    fields = shown["tool_use_result"]
    (ended,) = run.of("system", "task_notification")
    assert {k: fields[k] for k in ("status", "prompt", "agentId", "agentType", "content", "resolvedModel")} == {
        "status": "completed",
        "prompt": f"{CHILD} read hello.txt",
        "agentId": ended["task_id"],
        "agentType": "general-purpose",
        "content": [{"type": "text", "text": "the file says hello"}],
        "resolvedModel": "mock-primary",
    }
    assert fields["totalTokens"] == ended["usage"]["total_tokens"] > 0 and fields["totalToolUseCount"] == 0
    assert fields["totalDurationMs"] == ended["usage"]["duration_ms"]


def test_two_background_agents_report_in_the_order_they_end_each_in_its_own_turn(cwd: Path) -> None:
    slow, fast = agent_call(f"{CHILD} slow one"), agent_call(f"{CHILD} fast one")
    # the fast one ends once the parent waits (its second request came in), the slow one once the parent
    # answers the fast one's report (its third request came in)
    text = scenario(
        [
            tools_reply(slow, fast),
            text_reply("Waiting.", name="parent-waiting"),
            text_reply("one reported", name="parent-one-reported"),
            text_reply("PARENT-FINAL both"),
        ],
        child_rules(text_reply("SLOW-ANSWER", hold=until_step("parent-one-reported")), marker="slow one")
        + child_rules(text_reply("FAST-ANSWER", hold=until_step("parent-waiting")), marker="fast one"),
    )
    with MockApi(text) as api:
        run = run_cli(["-p", "go", "--model", "mock-primary"], api=api, cwd=cwd)
        parent, _ = split(api.requests)
    assert run.returncode == 0 and run.result["result"] == "PARENT-FINAL both", run.stderr
    assert run.reasons.count("agent_report_turn") == 2 and run.reasons.count("agent_completion_reported") == 2
    assert len(parent) == 4
    assert "FAST-ANSWER" in user_texts(parent[2])[-1] and "SLOW-ANSWER" in user_texts(parent[3])[-1]
    assert len(results_of(parent[1])) == 2  # both acknowledgements in one user message, in the calls' order


_THIRD = until_step("parent-third")


@pytest.mark.parametrize(
    ("child", "event", "status"),
    [
        (text_reply("CHILD-ANSWER", hold=_THIRD), "agent_completion_collected", "completed"),
        (
            f"{{error: {{status: 400, message: 'bad child request'}}, hold: {_THIRD}}}",
            "agent_failure_collected",
            "failed",
        ),
        (text_reply("never seen", delay_ms=3_600_000), "agent_timeout_collected", "failed"),
    ],
    ids=["completed", "failed", "timed-out"],
)
def test_an_agent_that_ends_during_a_tool_turn_is_reported_after_its_results(
    cwd: Path, tmp_path: Path, child: str, event: str, status: str
) -> None:
    # the parent reads twice while the agent runs (nothing to report): its answer is held until the parent's third
    # request came in, or it runs into its time limit. That third reply, one more read, is held until the run's
    # output says the agent ended: the tool turn after it finds the report.
    ended = tmp_path / "agent-ended"
    text = scenario(
        [
            tools_reply(agent_call()),
            tools_reply(READ),
            tools_reply(READ, name="parent-third", hold=until_file(ended)),
            text_reply("PARENT-FINAL"),
        ],
        child_rules(child),
    )
    with MockApi(text) as api:
        run = run_releasing(
            ["-p", "go", "--model", "mock-primary", "--max-retries", "0"],
            api,
            cwd,
            ended,
            agent_ended,
            QUERYLOOP_AGENT_TIMEOUT_S=AGENT_LIMIT_S if "timeout" in event else "60",
        )
        parent, _ = split(api.requests)
    assert run.returncode == 0 and run.result["result"] == "PARENT-FINAL", run.stderr
    turns = [r for r in run.reasons if r.startswith(("next_turn", "agent", "agents")) and "_launch_" not in r]
    assert turns == ["next_turn_with_agents", "agents_still_running"] * 2 + ["next_turn_with_agents", event], turns
    notification = user_texts(parent[3])[-1]
    assert f"<status>{status}</status>" in notification
    assert ("<result>CHILD-ANSWER</result>" in notification) == (status == "completed")


@pytest.mark.parametrize(
    ("child", "reason", "words"),
    [
        (
            f"{{error: {{status: 500, message: 'child down'}}, hold: {until_step('parent-waiting')}}}",
            "agent_failure_reported",
            "child down",
        ),
        (text_reply("never seen", delay_ms=3_600_000), "agent_timeout_reported", "time limit"),
    ],
    ids=["failed", "timed-out"],
)
def test_an_agent_that_fails_or_runs_too_long_reports_it_and_the_parent_goes_on(
    cwd: Path, child: str, reason: str, words: str
) -> None:
    # the agent fails once the parent waits (its second request came in), or runs into its time limit
    parent_steps = [tools_reply(agent_call()), text_reply("Waiting.", name="parent-waiting")]
    text = scenario([*parent_steps, text_reply("PARENT-FINAL sorry")], "", child)
    with MockApi(text) as api:
        run = run_cli(
            ["-p", "go", "--model", "mock-primary", "--max-retries", "1"],
            api=api,
            cwd=cwd,
            QUERYLOOP_AGENT_TIMEOUT_S=AGENT_LIMIT_S,
        )
        parent, children = split(api.requests)
    assert run.returncode == 0 and run.result["result"] == "PARENT-FINAL sorry", run.stderr
    assert reason in run.reasons and "agent_report_turn" in run.reasons
    notification = user_texts(parent[2])[-1]
    assert "<status>failed</status>" in notification and words in notification and "<result>" not in notification
    if reason == "agent_failure_reported":
        assert len(children) == 2  # its own retry ladder: --max-retries 1 holds for the child too
    (ended,) = run.of("system", "task_notification")
    assert ended["status"] == "failed"


def test_a_foreground_agent_that_fails_is_an_error_result(cwd: Path) -> None:
    text = scenario(
        [tools_reply(agent_call(background=False)), text_reply("PARENT-FINAL")],
        "",
        "{error: {status: 400, message: 'bad child request'}}",
    )
    with MockApi(text) as api:
        run_cli(["-p", "go", "--model", "mock-primary"], api=api, cwd=cwd)
        parent, _ = split(api.requests)
    (result,) = results_of(parent[1])
    assert result["is_error"] and result["content"].startswith("Agent terminated early: ")
    assert "bad child request" in result["content"]


def test_a_custom_agent_gets_only_its_tools_its_prompt_and_its_model(cwd: Path) -> None:
    agents = {
        "reader": {"description": "reads files", "prompt": "You read files.", "tools": ["Read"], "model": "haiku"}
    }
    text = scenario(
        [tools_reply(agent_call(background=False, subagent_type="reader")), text_reply("PARENT-FINAL")],
        child_rules(text_reply("read it")),
    )
    with MockApi(text) as api:
        run = run_cli(["-p", "go", "--model", "mock-primary", "--agents", json.dumps(agents)], api=api, cwd=cwd)
        parent, children = split(api.requests)
    assert run.returncode == 0, run.stderr
    (child,) = children
    assert list(child.tools) == ["Read"]
    assert (child.model, child.max_tokens) == ("claude-haiku-4-5-20251001", 32_000)  # what Claude Code sends for haiku
    assert json.dumps(child.system).count("You read files.") == 1
    assert run.of("system", "init")[0]["agents"] == ["claude", "Explore", "general-purpose", "Plan", "reader"]
    assert "reader: reads files" in next(t["description"] for t in parent[0].tool_definitions if t["name"] == "Agent")


def test_a_project_agent_never_gets_a_tool_its_session_is_not_offered(cwd: Path) -> None:
    # a cloned repository's agent asks for Bash and Write; the user's --tools offers Read and Agent only
    (cwd / ".claude" / "agents").mkdir(parents=True)
    (cwd / ".claude" / "agents" / "planted.md").write_text(
        "---\nname: planted\ndescription: does anything\ntools: Bash, Write, Read\n---\nYou do anything.\n"
    )
    text = scenario(
        [tools_reply(agent_call(background=False, subagent_type="planted")), text_reply("PARENT-FINAL")],
        child_rules(text_reply("done")),
    )
    with MockApi(text) as api:
        run = run_cli(["-p", "go", "--model", "mock-primary", "--tools", "Read,Agent"], api=api, cwd=cwd)
        _, children = split(api.requests)
    assert run.returncode == 0, run.stderr
    (child,) = children
    assert list(child.tools) == ["Read"]


def test_an_unknown_agent_type_is_an_error_result_naming_the_types(cwd: Path) -> None:
    text = scenario([tools_reply(agent_call(subagent_type="nope")), text_reply("PARENT-FINAL")], "")
    with MockApi(text) as api:
        run = run_cli(["-p", "go", "--model", "mock-primary"], api=api, cwd=cwd)
        parent, children = split(api.requests)
    (result,) = results_of(parent[1])
    # observed: the types in the init line's order (Claude Code 2.1.235 also lists statusline-setup)
    known = "claude, Explore, general-purpose, Plan"
    assert result["is_error"] and result["content"] == f"Agent type 'nope' not found. Available agents: {known}"
    assert children == [] and "agent_report_turn" not in run.reasons


def test_a_subagent_stop_hook_block_gives_the_child_one_more_turn(cwd: Path, tmp_path: Path) -> None:
    log = tmp_path / "hook.jsonl"
    hook = tmp_path / "hook.py"
    hook.write_text(
        "import json, sys, pathlib\n"
        "data = json.load(sys.stdin)\n"
        f"log = pathlib.Path({str(log)!r})\n"
        "with log.open('a') as f: f.write(json.dumps(data) + '\\n')\n"
        "if not data['stop_hook_active']:\n"
        "    print('check the README too', file=sys.stderr); sys.exit(2)\n"
    )
    settings = {"hooks": {"SubagentStop": [{"hooks": [{"type": "command", "command": f"{sys.executable} {hook}"}]}]}}
    text = scenario(
        [tools_reply(agent_call(background=False)), text_reply("PARENT-FINAL")],
        child_rules(text_reply("first answer"), text_reply("second answer")),
    )
    with MockApi(text) as api:
        run = run_cli(["-p", "go", "--model", "mock-primary", "--settings", json.dumps(settings)], api=api, cwd=cwd)
        parent, children = split(api.requests)
    assert run.returncode == 0, run.stderr
    assert len(children) == 2 and "Stop hook feedback" in json.dumps(children[1].messages[-1])
    assert results_of(parent[1])[0]["content"][0]["text"] == "second answer"
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c["hook_event_name"] for c in calls] == ["SubagentStop", "SubagentStop"]
    assert [c["stop_hook_active"] for c in calls] == [False, True]
    first = calls[0]
    assert first["agent_type"] == "general-purpose" and first["agent_id"].startswith("a")
    assert first["agent_transcript_path"].endswith(f"agent-{first['agent_id']}.jsonl")
    assert first["transcript_path"].endswith(f"{run.result['session_id']}.jsonl")  # the session's own
    assert first["last_assistant_message"] == "first answer"


def _read_until_the_parent_waits(proc: subprocess.Popen[str]) -> list[str]:
    """The stream-json lines up to the parent's step into ``awaiting_agents`` (all of them, if it never comes)."""
    assert proc.stdout is not None
    read = []
    for line in proc.stdout:
        read.append(line)
        step = json.loads(line)
        if step.get("subtype") == "transition" and step["to"] == "awaiting_agents":
            if not step.get("parent_tool_use_id"):
                break
    return read


def test_ctrl_c_while_the_parent_waits_for_an_agent_cancels_it(cwd: Path) -> None:
    # the agent's reply never comes (only the server's stop ends its wait): Ctrl-C is what ends the run
    text = scenario([tools_reply(agent_call()), text_reply("Waiting.")], "", text_reply("never", delay_ms=3_600_000))
    with MockApi(text) as api:
        proc = start_run(cwd, api)
        try:
            read = _read_until_the_parent_waits(proc)
            assert read and json.loads(read[-1]).get("to") == "awaiting_agents", "the parent never waited"
            deadline = time.monotonic() + HANG_GUARD_S  # a hang's bound: the agent's request is on its way
            while not split(api.requests)[1]:
                assert time.monotonic() < deadline, "the agent never sent its request"
                time.sleep(0.05)
            proc.send_signal(signal.SIGINT)
            rest, stderr = proc.communicate(timeout=HANG_GUARD_S)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr
    lines = [json.loads(line) for line in [*read, *rest.splitlines()]]
    transitions = [line for line in lines if line.get("subtype") == "transition"]
    assert [t["reason"] for t in transitions if not t.get("parent_tool_use_id")][-1] == "agent_wait_aborted"
    (ended,) = [line for line in lines if line.get("subtype") == "task_notification"]
    assert ended["status"] == "stopped"
    # the child took its own abort edge
    assert [t["reason"] for t in transitions if t.get("parent_tool_use_id")][-1] == "request_aborted"
    assert lines[-1]["type"] == "result" and lines[-1]["subtype"] == "error_during_execution"


def test_an_interrupt_while_the_reports_are_collected_takes_the_abort_edge(cwd: Path) -> None:
    """In process: the run's generator is closed right after it enters collecting_agent_reports."""
    text = scenario(
        [tools_reply(agent_call()), tools_reply(READ), text_reply("never sent")],
        "",
        text_reply("never", delay_ms=30_000),
    )

    async def play(api: MockApi) -> list[str]:
        options = AgentOptions(
            prompt="go",
            cwd=cwd,
            request=RequestSettings(model="mock-primary"),
            permissions=PermissionSettings(mode="bypassPermissions"),
        )
        client = anthropic.AsyncAnthropic(base_url=api.url, api_key="test-key", max_retries=0)
        run = AgentRun(options, AnthropicBackend(client))
        async with contextlib.aclosing(run.events()) as items:
            async for item in items:
                if isinstance(item, Step) and item.dest == "collecting_agent_reports":
                    break
        await client.close()
        return [s.reason for s in run.steps]

    with MockApi(text) as api:
        reasons = asyncio.run(play(api))
    assert reasons[-2:] == ["next_turn_with_agents", "agent_wait_aborted"], reasons


def test_a_run_restored_elsewhere_reports_an_agent_it_no_longer_has_as_lost(cwd: Path) -> None:
    """In process: the run waiting for its agent is rebuilt from its JSON snapshot with fresh services (as a
    fleet worker takes over a session whose worker died); the agent went with the old process, so it is
    reported as failed — lost — and the parent answers, instead of waiting for an end that never comes."""
    text = scenario(
        [tools_reply(agent_call()), text_reply("Waiting."), text_reply("PARENT-FINAL it was lost")],
        "",
        text_reply("never", delay_ms=30_000),
    )

    async def play(api: MockApi) -> tuple[list[str], dict[str, Any], str]:
        options = AgentOptions(
            prompt="go",
            cwd=cwd,
            request=RequestSettings(model="mock-primary"),
            permissions=PermissionSettings(mode="bypassPermissions"),
        )
        client = anthropic.AsyncAnthropic(base_url=api.url, api_key="test-key", max_retries=0)
        program = query_loop_program()
        try:
            run = AgentRun(options, AnthropicBackend(client))
            reasons: list[str] = []
            while run.runner.final.state != "awaiting_agents":
                reasons.append((await run.runner.step_once())[-1].reason)
            snapshot = json.loads(json.dumps(snapshot_run(program, run.runner.final)))
            assert run.subagents is not None
            await run.subagents.close()  # the old process and its agent are gone
            run = AgentRun(options, AnthropicBackend(client), state=restore_run(program, snapshot))
            while not run.runner.done:
                reasons.append((await run.runner.step_once())[-1].reason)
            return reasons, run.result(), user_texts(api.requests[-1])[-1]
        finally:
            await client.close()

    with MockApi(text) as api:
        reasons, result, notification = asyncio.run(play(api))
    at = reasons.index("agent_report_turn")
    assert reasons[at + 1] == "agent_failure_reported" and reasons.count("agent_report_turn") == 1, reasons
    assert result["result"] == "PARENT-FINAL it was lost" and not result["is_error"]
    assert "<status>failed</status>" in notification and "lost: the run was restored" in notification


def test_a_report_edge_whose_handler_does_not_mark_it_delivered_ends_the_run_in_internal_error(
    cwd: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In process, with a mutant handler: the report's edges declare their contract (`changes:
    [agents.reported, messages]`), so a ``deliver_report`` that appends the notification but never marks the
    report delivered ends the run in internal_error at the first report. Without the contract the same
    report would start turn after turn (unbounded without --max-turns; max_turns 3 here only keeps a
    regression finite)."""
    from queryloop.fsm import Program, load_machine
    from queryloop.handlers import agents

    delivered = agents.deliver_report

    def deliver_unmarked(run: Any, event: Any) -> Any:
        return delivered(run, event).evolve(agents=run.data.agents)

    monkeypatch.setattr(agents, "deliver_report", deliver_unmarked)
    program = Program(load_machine(ROOT / "machines" / "query_loop.yaml"))  # the mutant bound, not the cache
    text = scenario(
        [tools_reply(agent_call()), *(text_reply(f"PARENT-{n}") for n in range(6))], "", text_reply("the child")
    )

    async def play(api: MockApi) -> tuple[AgentRun, list[str]]:
        options = AgentOptions(
            prompt="go",
            cwd=cwd,
            request=RequestSettings(model="mock-primary"),
            permissions=PermissionSettings(mode="bypassPermissions"),
            limits=Limits(max_turns=3),
        )
        client = anthropic.AsyncAnthropic(base_url=api.url, api_key="test-key", max_retries=0)
        try:
            run = AgentRun(options, AnthropicBackend(client), program=program)
            reasons: list[str] = []
            while not run.runner.done:
                reasons.append((await run.runner.step_once())[-1].reason)
            return run, reasons
        finally:
            await client.close()

    with MockApi(text) as api:
        run, reasons = asyncio.run(play(api))
    assert run.runner.final.state == "internal_error" and reasons[-2:] == ["agent_report_turn", "internal_error"]
    assert not [r for r in reasons if r.endswith(("_reported", "_collected"))], "no report was delivered"
    assert run.runner.error is not None
    error = str(run.runner.error.exception)
    assert "'agent_completion_reported' left agents.reported as it was" in error, error


def test_a_turn_starts_at_most_max_agents_per_turn_agents_and_the_others_get_an_error(cwd: Path) -> None:
    """In process, with the machine's param set as a Python caller sets it: three Agent calls in one reply."""
    calls = [agent_call(f"{CHILD} task {n}", background=False) for n in range(3)]
    text = scenario([tools_reply(*calls), text_reply("PARENT-FINAL")], "", text_reply("done"))

    async def play(api: MockApi) -> dict[str, Any]:
        options = AgentOptions(
            prompt="go",
            cwd=cwd,
            request=RequestSettings(model="mock-primary"),
            permissions=PermissionSettings(mode="bypassPermissions"),
            limits=Limits(params={"max_agents_per_turn": 2}),
        )
        client = anthropic.AsyncAnthropic(base_url=api.url, api_key="test-key", max_retries=0)
        try:
            run = AgentRun(options, AnthropicBackend(client))
            async with contextlib.aclosing(run.events()) as items:
                async for _ in items:
                    pass
            return run.result()
        finally:
            await client.close()

    with MockApi(text) as api:
        result = asyncio.run(play(api))
        parent, children = split(api.requests)
    assert result["result"] == "PARENT-FINAL" and len(children) == 2
    outcomes = [(r.get("is_error", False), json.dumps(r["content"])) for r in results_of(parent[1])]
    assert [error for error, _ in outcomes] == [False, False, True], outcomes
    assert "max_agents_per_turn is 2" in outcomes[2][1]


def test_max_agent_turns_limits_a_sub_agents_tool_turns(cwd: Path) -> None:
    text = scenario(
        [tools_reply(agent_call(background=False)), text_reply("PARENT-FINAL")],
        child_rules(tools_reply(READ), tools_reply(READ), text_reply("never reached")),
    )
    with MockApi(text) as api:
        run = run_cli(["-p", "go", "--model", "mock-primary", "--max-agent-turns", "1"], api=api, cwd=cwd)
        parent, children = split(api.requests)
    assert run.returncode == 0, run.stderr
    assert len(children) == 1, "its first tool turn was its last"
    (result,) = results_of(parent[1])
    assert result["is_error"] and "Agent terminated early" in json.dumps(result["content"])


def test_a_kill_mid_agent_then_resume_continues_the_agent_from_its_sidechain_and_reports_it_once(
    cwd: Path,
) -> None:
    """kill -9 of the parent while its background agent waits for its second reply (its Bash call done and in
    its sidechain); --resume: the agent continues from its sidechain — the call is not run again — and the
    resumed run reports it, once."""
    once = json.dumps({"tool_use": {"name": "Bash", "input": {"command": "echo ran >> side_effect.log"}}})
    first = scenario(
        [tools_reply(agent_call()), text_reply("Waiting.")],
        child_rules(tools_reply(once), text_reply("never", delay_ms=3_600_000)),
    )
    with MockApi(first) as api:
        proc = start_run(cwd, api, *BYPASS)
        try:
            deadline = time.monotonic() + HANG_GUARD_S  # bounds a hang only: the requests are the events
            while len(split(api.requests)[1]) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)  # until the agent asked for its second reply: its Bash call is done
            assert len(split(api.requests)[1]) == 2, "the agent never got to its second request"
            proc.kill()
        finally:
            stdout, _ = proc.communicate(timeout=HANG_GUARD_S)
    session_id = json.loads(stdout.splitlines()[0])["session_id"]
    assert (cwd / "side_effect.log").read_text() == "ran\n"
    second = scenario(
        [text_reply("Still waiting."), text_reply("PARENT-FINAL the agent finished")],
        child_rules(text_reply("CHILD-DONE after the resume")),
    )
    with MockApi(second) as api:
        run = run_cli(
            [
                "--resume",
                session_id,
                "-p",
                "go on",
                "--model",
                "mock-primary",
                "--permission-mode",
                "bypassPermissions",
            ],
            api=api,
            cwd=cwd,
        )
        parent, children = split(api.requests)
    assert run.returncode == 0 and run.result["result"] == "PARENT-FINAL the agent finished", run.stderr
    assert (cwd / "side_effect.log").read_text() == "ran\n", "the agent's completed call did not run again"
    (child,) = children
    assert "echo ran >> side_effect.log" in json.dumps(child.messages), "its history, from its sidechain"
    assert "interrupted and has been resumed" in json.dumps(child.messages[-1])
    notifications = [t for t in user_texts(parent[-1]) if "<task-notification>" in t]
    assert len(notifications) == 1 and "CHILD-DONE after the resume" in notifications[0]
    assert run.reasons.count("agent_completion_reported") == 1


def test_an_agent_that_ended_before_the_kill_but_was_never_reported_is_reported_from_its_sidechain(
    cwd: Path,
) -> None:
    """The agent answers after 0.5 s while the parent waits for a reply held an hour; the parent is killed
    once the agent's end is in its sidechain. The resumed run reports the answer the sidechain holds, once,
    without running the agent again."""
    first = scenario(
        [tools_reply(agent_call()), text_reply("never", delay_ms=3_600_000)],
        child_rules(text_reply("CHILD-ANSWERED-BEFORE-THE-KILL", delay_ms=500)),
    )
    with MockApi(first) as api:
        proc = start_run(cwd, api, *BYPASS)
        try:
            deadline = time.monotonic() + HANG_GUARD_S  # bounds a hang only: the requests are the events
            while len(split(api.requests)[0]) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            (ack,) = results_of(split(api.requests)[0][1])
            sidechain = Path(ack["content"][0]["text"].split("output_file: ")[1].split("\n")[0])
            while time.monotonic() < deadline and not _has_ended(sidechain):
                time.sleep(0.05)  # until the agent's end is written
            proc.kill()
        finally:
            stdout, _ = proc.communicate(timeout=HANG_GUARD_S)
    session_id = json.loads(stdout.splitlines()[0])["session_id"]
    second = scenario([text_reply("Still here."), text_reply("PARENT-FINAL")], "", text_reply("must not run"))
    with MockApi(second) as api:
        run = run_cli(["--resume", session_id, "-p", "go on", "--model", "mock-primary", *BYPASS], api=api, cwd=cwd)
        parent, children = split(api.requests)
    assert run.returncode == 0 and run.result["result"] == "PARENT-FINAL", run.stderr
    assert children == [], "an agent that had ended is not run again"
    (notification,) = [t for t in user_texts(parent[-1]) if "<task-notification>" in t]
    assert "<result>CHILD-ANSWERED-BEFORE-THE-KILL</result>" in notification
    assert run.reasons.count("agent_completion_reported") == 1


def _has_ended(sidechain: Path) -> bool:
    """Whether a sidechain transcript holds its run's end (its ``system/result`` entry)."""
    try:
        lines = sidechain.read_text().splitlines()
    except FileNotFoundError:
        return False
    return any('"subtype": "result"' in line or '"subtype":"result"' in line for line in lines)


def test_the_budget_counts_the_agents_requests_and_an_agent_gets_what_is_left(cwd: Path) -> None:
    """--max-budget-usd 1: the agent's one request costs about $3 (a million input tokens), so the agent stops
    at its own budget (what the run had left) and the parent stops at its next reply, its own cost far below."""
    costly = "{reply: {content: [{text: costly}], usage: {input_tokens: 1000000, output_tokens: 10}}}"
    text = scenario(
        [tools_reply(agent_call(background=False)), text_reply("never the answer")],
        child_rules(costly),
    )
    with MockApi(text) as api:
        run = run_cli(["-p", "go", "--model", "mock-primary", "--max-budget-usd", "1"], api=api, cwd=cwd)
        parent, children = split(api.requests)
    assert run.returncode == 1 and run.result["subtype"] == "error_max_budget_usd", run.stderr
    assert len(children) == 1 and len(parent) == 2
    (result,) = results_of(parent[1])
    assert result["is_error"] and "budget" in json.dumps(result["content"])
    assert run.result["total_cost_usd"] >= 1 and run.reasons[-1] == "max_budget_reached"


# ---- issue 43: what Claude Code 2.1.235 does, observed against the same scenarios (2026-12-04) -------------


def test_a_report_turn_does_not_count_against_max_turns(cwd: Path) -> None:
    """Observed: with --max-turns 2, the Agent call's turn and the answer use the run's turns, and the agent's
    report still starts a turn of its own (Claude Code does not count it): the model's answer to the report is
    the result, the agent was not cancelled."""
    text = scenario(
        [
            tools_reply(agent_call()),
            text_reply("Waiting.", name="parent-waiting"),
            text_reply("PARENT-FINAL it said hello"),
        ],
        child_rules(tools_reply(READ), text_reply("the file says hello", hold=until_step("parent-waiting"))),
    )
    with MockApi(text) as api:
        run = run_cli(["-p", "go", "--model", "mock-primary", "--max-turns", "2"], api=api, cwd=cwd)
        parent, children = split(api.requests)
    assert run.returncode == 0 and run.result["result"] == "PARENT-FINAL it said hello", run.stderr
    assert run.reasons.count("agent_report_turn") == 1 and "agent_completion_reported" in run.reasons
    assert len(parent) == 3 and len(children) == 2
    (ended,) = run.of("system", "task_notification")
    assert ended["status"] == "completed"


def test_at_max_turns_a_running_background_agent_finishes_and_its_report_starts_a_turn(
    cwd: Path, tmp_path: Path
) -> None:
    """Observed: with --max-turns 1 the Agent call's tool turn is the last the run may take, yet the agent runs
    to its end (not cancelled) and its report starts a turn the model answers. Claude Code prints an
    error_max_turns result for the first turn, then a success one for the report's turn; queryloop prints one
    result, the run's last."""
    waits = tmp_path / "parent-waits"  # the agent answers once the run's output says the parent waits for it
    text = scenario(
        [tools_reply(agent_call()), text_reply("PARENT-FINAL after the report")],
        child_rules(tools_reply(READ), text_reply("the file says hello", hold=until_file(waits))),
    )
    with MockApi(text) as api:
        run = run_releasing(["-p", "go", "--model", "mock-primary", "--max-turns", "1"], api, cwd, waits, parent_waits)
        parent, children = split(api.requests)
    assert run.returncode == 0, run.stderr
    assert run.result["result"] == "PARENT-FINAL after the report" and run.result["subtype"] == "success"
    assert "turn_limit_agent_wait" in run.reasons and "max_turns_reached" not in run.reasons, run.reasons
    assert len(parent) == 2 and len(children) == 2
    notification = user_texts(parent[1])[-1]
    assert "<status>completed</status>" in notification and "<result>the file says hello</result>" in notification
    (ended,) = run.of("system", "task_notification")
    assert ended["status"] == "completed"


def test_a_sub_agents_tool_hooks_are_told_its_agent_id_and_type(cwd: Path, tmp_path: Path) -> None:
    """Observed: a sub-agent's PreToolUse and PostToolUse hooks get ``agent_id`` and ``agent_type``; its
    parent's own calls (the Agent call itself) get neither."""
    log = tmp_path / "hooks.jsonl"
    hook = tmp_path / "hook.py"
    hook.write_text(f"import sys, pathlib\npathlib.Path({str(log)!r}).open('a').write(sys.stdin.read() + '\\n')\n")
    command = [{"type": "command", "command": f"{sys.executable} {hook}"}]
    settings = {"hooks": {e: [{"matcher": "*", "hooks": command}] for e in ("PreToolUse", "PostToolUse")}}
    text = scenario(
        [tools_reply(agent_call(background=False)), text_reply("PARENT-FINAL")],
        child_rules(tools_reply(READ), text_reply("the file says hello")),
    )
    with MockApi(text) as api:
        run = run_cli(["-p", "go", "--model", "mock-primary", "--settings", json.dumps(settings)], api=api, cwd=cwd)
    assert run.returncode == 0, run.stderr
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    (started,) = run.of("system", "task_started")
    seen = [(c["hook_event_name"], c["tool_name"], c.get("agent_id"), c.get("agent_type")) for c in calls]
    agent = (started["task_id"], "general-purpose")
    assert sorted(seen) == sorted(
        [
            ("PreToolUse", "Agent", None, None),
            ("PreToolUse", "Read", *agent),
            ("PostToolUse", "Read", *agent),
            ("PostToolUse", "Agent", None, None),
        ]
    )


def test_a_sub_agents_refused_calls_are_listed_in_the_runs_permission_denials(cwd: Path) -> None:
    """Observed (issue 41): headless, a sub-agent's Write that would ask is refused, and the run's result lists it
    in ``permission_denials`` with the sub-agent's tool_use id and input."""
    write = json.dumps({"tool_use": {"name": "Write", "input": {"file_path": "out.txt", "content": "x"}}})
    text = scenario(
        [tools_reply(agent_call(f"{CHILD} write it", background=False)), text_reply("PARENT-FINAL")],
        child_rules(tools_reply(write), text_reply("could not write")),
    )
    with MockApi(text) as api:
        run = run_cli(["-p", "go", "--model", "mock-primary", "--permission-mode", "default"], api=api, cwd=cwd)
        _, children = split(api.requests)
    assert run.returncode == 0 and run.result["result"] == "PARENT-FINAL", run.stderr
    (refused,) = [b for b in results_of(children[1]) if b.get("is_error")]
    (denial,) = run.result["permission_denials"]
    assert denial["tool_name"] == "Write" and denial["tool_use_id"] == refused["tool_use_id"]
    assert denial["tool_input"]["content"] == "x" and not (cwd / "out.txt").exists()


def test_at_the_machines_defaults_a_turn_starts_eight_agents_and_a_ninth_gets_an_error(cwd: Path) -> None:
    """The per-turn limit the run keeps is the machine's (`children: agents` `per_step`, max_agents_per_turn: 8)."""
    calls = [agent_call(f"{CHILD} task {n}", background=False) for n in range(9)]
    text = scenario([tools_reply(*calls), text_reply("PARENT-FINAL")], "", text_reply("done"))
    with MockApi(text) as api:
        run = run_cli(["-p", "go", "--model", "mock-primary"], api=api, cwd=cwd)
        parent, children = split(api.requests)
    assert run.returncode == 0 and run.result["result"] == "PARENT-FINAL", run.stderr
    assert len(children) == 8
    errors = [json.dumps(r["content"]) for r in results_of(parent[1]) if r.get("is_error")]
    assert len(errors) == 1 and "max_agents_per_turn is 8" in errors[0]
    # the machine admits them: eight counted edges, then the cap's edge refuses the ninth (no count in Python)
    own = [line["reason"] for line in run.of("system", "transition") if not line.get("parent_tool_use_id")]
    at = own.index("permission_granted")
    assert own[at + 1 : at + 11] == ["agent_launch_admitted"] * 8 + ["agent_launch_refused", "next_turn"], own
