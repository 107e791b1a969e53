"""End-to-end: hostile inputs that are not commands, through the real CLI in a subprocess.

JSON nested too deep or holding a number too long (settings, ``--mcp-config``, a stdin
line of the Agent SDK's protocol, a transcript line, the model's tool input), terminal
escape sequences in the model's text, a command's output and an MCP server's answer, MCP
server names that could pass for another's, a crafted checkpoint index, session ids in
another spelling. Each test says what the input is and checks the one line it gives (no
traceback), or that it is shown and not obeyed, or that nothing changed. One drives the
CLI through the real Claude Agent SDK (its in-process MCP server's tool names).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from claude_agent_sdk import create_sdk_mcp_server, query, tool

from .harness import ROOT, MockApi, run_cli
from .test_agent_sdk import _collect, _options, _result, _run
from .test_request_layer import scenario
from .test_sessions import first_run, paths, queryloop

pytestmark = pytest.mark.slow  # ~65 s in all: tools/test.sh --fast leaves the module out

HELLO = scenario("""  mock-primary:
    - reply: {content: [{text: "hello"}]}
""")
FLAKY = ROOT / "tests" / "fixtures" / "mcp" / "flaky_server.py"


def nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def one_line(stderr: str) -> str:
    """The one line on stderr, which is no traceback."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[-2000:]
    return lines[0]


# ---- JSON past the limits ----------------------------------------------------------------------------

LIMITS = {
    "deep": (nested(5_000), "1:501: JSON nested deeper than 100 levels"),
    "long-number": ('{"model": ' + "9" * 5_000 + "}", "1:11: a number 5000 digits long"),
}


@pytest.mark.parametrize("kind", sorted(LIMITS))
@pytest.mark.parametrize("where", ["--settings", "--mcp-config", "settings file", ".mcp.json"])
def test_a_document_past_the_json_limits_is_one_line_naming_where_and_exit_1(
    tmp_path: Path, kind: str, where: str
) -> None:
    document, problem = LIMITS[kind]
    args = ["-p", "hi", "--model", "mock-primary"]
    if where.startswith("--"):
        args += [where, document]
        label = where
    elif where == "settings file":
        (tmp_path / ".queryloop").mkdir()
        (tmp_path / ".queryloop" / "settings.json").write_text(document)
        label = ".queryloop/settings.json"
    else:
        (tmp_path / ".mcp.json").write_text(document)
        label = str(tmp_path / ".mcp.json")
    with MockApi(HELLO) as api:
        run = run_cli(args, api=api, cwd=tmp_path)
    assert run.returncode == 1
    line = one_line(run.stderr)
    assert line.startswith("queryloop: ") and f"{label}:{problem}" in line, line
    assert api.requests == [], "nothing was sent"


def test_a_stdin_line_nested_too_deep_is_one_line_and_the_session_plays_the_next_prompt(tmp_path: Path) -> None:
    prompt = {"type": "user", "message": {"role": "user", "content": "hi"}}
    head = '{"type": "user", "message": '
    stdin = head + nested(3_000) + "}\n" + json.dumps(prompt) + "\n"
    at = len(head) + len('{"a":') * 99  # the 101st level
    with MockApi(HELLO) as api:
        run = run_cli(
            ["--input-format", "stream-json", "--verbose", "--model", "mock-primary"],
            api=api,
            cwd=tmp_path,
            stdin=stdin,
        )
    assert run.returncode == 0, run.stderr
    assert one_line(run.stderr) == (
        "queryloop: error: stdin line 1 cannot be read safely (JSON nested deeper than 100 levels: "
        f"line 1 column {at + 1} (char {at})); skipped"
    )
    assert run.result["result"] == "hello" and len(api.requests) == 1


def test_a_transcript_line_too_deep_to_read_is_skipped_with_a_warning_and_the_session_resumes(
    tmp_path: Path,
) -> None:
    session_id = first_run(tmp_path)
    transcript = paths(tmp_path, session_id).transcript
    lines = transcript.read_text().splitlines(keepends=True)
    crafted = '{"type": "system", "uuid": "x", "payload": ' + nested(4_000) + "}\n"
    transcript.write_text(lines[0] + crafted + "".join(lines[1:]))
    with MockApi(HELLO) as api:
        run = run_cli(["-r", session_id, "-p", "again", "--model", "mock-primary"], api=api, cwd=tmp_path, fmt="text")
    assert run.returncode == 0, run.stderr
    assert f"warning: {transcript}:2: skipped a line that cannot be read safely: JSON nested deeper" in run.stderr
    assert "Traceback" not in run.stderr
    sent = [m["content"] for m in api.requests[0].messages]
    assert sent[0] == "first prompt" and sent[-1] == "again"


def test_a_tool_input_nested_too_deep_is_a_malformed_tool_use_not_a_crash(tmp_path: Path) -> None:
    deep: object = {"x": 1}
    for _ in range(150):
        deep = {"a": deep}
    text = scenario(f"""  mock-primary:
    - reply: {{content: [{{tool_use: {{name: Bash, input: {json.dumps({"command": "touch ran", "deep": deep})}}}}}]}}
    - reply: {{content: [{{text: "done"}}]}}
""")
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "malformed_tool_use_retry" in run.reasons and run.result["result"] == "done"
    assert not (tmp_path / "ran").exists(), "half a tool call never runs"


# ---- a surrogate alone in the model's reply ------------------------------------------------------------

# where the reply holds `\ud800` (a JSON escape no UTF-8 writer can take): the scenario's block, the text it becomes
LONE_SURROGATES = {
    "text": ('{text: "a\\ud800b"}', "a\ufffdb"),
    "thinking": ('{thinking: "t\\udfff", signature: "s"}, {text: "ok"}', "t\ufffd"),
    "tool_use input": ('{tool_use: {name: Bash, input: {command: "echo x\\udc00 > out"}}}', "echo x\ufffd > out"),
}


@pytest.mark.parametrize("where", sorted(LONE_SURROGATES))
@pytest.mark.parametrize("fmt", ["stream-json", "text"])
def test_a_lone_surrogate_in_a_reply_becomes_the_replacement_character_everywhere(
    tmp_path: Path, where: str, fmt: str
) -> None:
    blocks, becomes = LONE_SURROGATES[where]
    text = scenario(f"""  mock-primary:
    - reply: {{content: [{blocks}]}}
    - reply: {{content: [{{text: "done"}}]}}
""")
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary", "--verbose"], api=api, cwd=tmp_path, fmt=fmt)
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr[-2000:]
    if fmt == "text":
        assert run.stdout.strip() == {"text": "a\ufffdb", "thinking": "ok", "tool_use input": "done"}[where]
        return
    assert becomes in json.dumps([line for line in run.lines if line["type"] == "assistant"], ensure_ascii=False)
    transcript = paths(tmp_path, run.result["session_id"]).transcript.read_text(encoding="utf-8")
    assert becomes in json.dumps([json.loads(line) for line in transcript.splitlines()], ensure_ascii=False)
    if where == "tool_use input":
        assert (tmp_path / "out").read_text(encoding="utf-8") == "x\ufffd\n"
        sent = api.requests[1].messages[1]["content"][0]["input"]["command"]
        assert sent == becomes, "the next request carries the call as the run read it"


def test_a_lone_surrogate_in_a_hook_s_json_and_a_stdin_line_reaches_the_model_as_the_replacement_character(
    tmp_path: Path,
) -> None:
    hook = tmp_path / "hook.py"
    context = {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "ctx \ud800 end"}}
    hook.write_text(f"print({json.dumps(json.dumps(context))})\n")
    hooks = {"UserPromptSubmit": [{"hooks": [{"type": "command", "command": f"{sys.executable} {hook}"}]}]}
    stdin = '{"type": "user", "message": {"role": "user", "content": "hi \\udc00 there"}}\n'
    with MockApi(HELLO) as api:
        run = run_cli(
            ["--input-format", "stream-json", "--model", "mock-primary", "--settings", json.dumps({"hooks": hooks})],
            api=api,
            cwd=tmp_path,
            stdin=stdin,
        )
    assert run.returncode == 0 and run.stderr == "", run.stderr[-2000:]
    sent = json.dumps(api.requests[0].messages, ensure_ascii=False)
    assert "hi \ufffd there" in sent and "ctx \ufffd end" in sent, sent


# ---- terminal escapes ----------------------------------------------------------------------------------

# A model's answer that would clear the screen, retitle the window and write the clipboard if obeyed.
TEXT = r"clear\e[2J title\e]0;pwned\a clip\e]52;c;cm0gLXJmIH4=\e\\ end"
SHOWN = r"clear\x1b[2J title\x1b]0;pwned\x07 clip\x1b]52;c;cm0gLXJmIH4=\x1b\ end"
RAW = "clear\x1b[2J title\x1b]0;pwned\x07 clip\x1b]52;c;cm0gLXJmIH4=\x1b\\ end"


def _escapes_script(command: str) -> str:
    return scenario(f"""  mock-primary:
    - reply: {{content: [{{tool_use: {{name: Bash, input: {{command: {json.dumps(command)}}}}}}}]}}
    - reply: {{content: [{{text: "{TEXT}"}}]}}
""")


def test_escape_sequences_in_the_answer_and_a_command_s_output_are_shown_not_obeyed_in_text_output(
    tmp_path: Path,
) -> None:
    command = r"printf 'out\033]0;owned\007 \302\233 31m\n'"  # ESC ] … BEL, and CSI as C1 (U+009B in UTF-8)
    with MockApi(_escapes_script(command)) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary", "--verbose"], api=api, cwd=tmp_path, fmt="text")
    assert run.returncode == 0, run.stderr
    for stream in (run.stdout, run.stderr):
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f\x80-\x9f]", stream), repr(stream)
    assert run.stdout.strip() == SHOWN
    assert r"Bash: out\x1b]0;owned\x07 \x9b 31m" in run.stderr, run.stderr


def test_json_output_carries_the_same_text_escaped_as_json_escapes_it(tmp_path: Path) -> None:
    with MockApi(_escapes_script("printf 'a\\033[2Jb'")) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "\x1b" not in run.stdout and "\\u001b" in run.stdout
    assert run.result["result"] == RAW, "a program reading JSON gets the text exactly"
    assert run.of("user")[0]["tool_use_result"]["stdout"] == "a\x1b[2Jb", "Bash's record, as Claude Code's"


def test_escape_sequences_in_an_mcp_server_s_answer_are_shown_not_obeyed(tmp_path: Path) -> None:
    (tmp_path / "mcp").mkdir()
    (tmp_path / "mcp" / "plan.json").write_text(json.dumps({"tools": ["echo"]}))
    config = {"mcpServers": {"flaky": {"command": sys.executable, "args": [str(FLAKY), str(tmp_path / "mcp")]}}}
    text = scenario("""  mock-primary:
    - reply: {content: [{tool_use: {name: mcp__flaky__echo, input: {text: "\\e]0;pwned\\a\\e[2J"}}}]}
    - reply: {content: [{text: "done"}]}
""")
    with MockApi(text) as api:
        run = run_cli(
            ["--mcp-config", json.dumps(config), "--model", "mock-primary", "-p", "go"],
            api=api,
            cwd=tmp_path,
            fmt="text",
            timeout=120,
        )
    assert run.returncode == 0, run.stderr
    assert "\x1b" not in run.stderr and "\x07" not in run.stderr
    assert r"mcp__flaky__echo: echo: \x1b]0;pwned\x07\x1b[2J" in run.stderr, run.stderr


# ---- MCP server names ----------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["--mcp-config", ".mcp.json", "settings"])
def test_a_server_named_to_pass_for_another_is_refused_naming_the_server_and_the_source(
    tmp_path: Path, where: str
) -> None:
    servers = {"trusted": {"command": "true"}, "trusted__evil": {"command": "touch", "args": ["started"]}}
    args = ["-p", "hi", "--model", "mock-primary"]
    if where == "--mcp-config":
        args += ["--mcp-config", json.dumps({"mcpServers": servers})]
    elif where == ".mcp.json":
        (tmp_path / ".mcp.json").write_text(json.dumps({"mcpServers": servers}))
        args += ["--settings", json.dumps({"enableAllProjectMcpServers": True})]
    else:
        args += ["--settings", json.dumps({"mcpServers": servers})]
    with MockApi(HELLO) as api:
        run = run_cli([*args, "--allowed-tools", "mcp__trusted"], api=api, cwd=tmp_path)
    assert run.returncode == 1
    line = one_line(run.stderr)
    assert line.startswith("queryloop: ") and "at .mcpServers.trusted__evil: server name 'trusted__evil'" in line
    assert "which a permission rule for mcp__trusted would cover" in line
    assert not (tmp_path / "started").exists() and api.requests == []


def test_an_in_process_server_named_to_pass_for_another_is_a_usage_error(tmp_path: Path) -> None:
    config = {"mcpServers": {"trusted_": {"type": "sdk", "name": "trusted_"}}}
    args = ["--input-format", "stream-json", "--mcp-config", json.dumps(config), "--model", "mock-primary"]
    run = run_cli(args, api=None, cwd=tmp_path)
    assert run.returncode == 2
    assert "--mcp-config: at .mcpServers.trusted_: server name 'trusted_' may not end with '_'" in one_line(run.stderr)


# ---- sessions: a crafted checkpoint index, ids in another spelling ----------------------------------------------


def test_rewind_refuses_a_crafted_checkpoint_outside_the_project_and_changes_nothing(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    text = scenario("""  mock-primary:
    - reply: {content: [{tool_use: {name: Write, input: {file_path: made.txt, content: "new\\n"}}}]}
    - reply: {content: [{text: "done"}]}
""")
    session_id = first_run(work, "make it", text)
    assert (work / "made.txt").exists()
    index = paths(work, session_id).checkpoints
    entry = json.loads(index.read_text().splitlines()[-1])
    crafted = {**entry, "seq": entry["seq"] + 1, "path": str(work / ".." / "victim.txt"), "blob": None}
    with index.open("a") as out:
        out.write(json.dumps(crafted) + "\n")
    done = queryloop(["rewind", session_id], cwd=work)
    assert done.returncode == 1 and done.stdout == ""
    assert one_line(done.stderr) == (
        f"queryloop: rewind refused: checkpoint {crafted['seq']} in {index} names {work / '..' / 'victim.txt'} "
        f"(resolving to {victim.resolve()}), outside the working directory {work.resolve()}; no file was changed"
    )
    assert victim.read_text() == "precious\n" and (work / "made.txt").read_text() == "new\n"


@pytest.mark.parametrize(
    "spelling", [str.upper, lambda s: "{" + s + "}", lambda s: s.replace("-", "")], ids=["upper", "braces", "hex"]
)
def test_a_session_id_in_another_spelling_is_one_line(tmp_path: Path, spelling: object) -> None:
    session_id = first_run(tmp_path)
    other = spelling(session_id)  # type: ignore[operator]
    rewind = queryloop(["rewind", other], cwd=tmp_path)
    assert rewind.returncode == 2
    assert one_line(rewind.stderr).startswith(
        f"queryloop rewind: error: argument SESSION: {other!r} is not a session ID"
    )
    with MockApi(HELLO) as api:
        resumed = run_cli(["--resume", other, "-p", "again", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert resumed.returncode == 1 and api.requests == []
    assert resumed.stderr.strip().splitlines()[0] == (
        "Error: --resume requires a valid session ID when used with --print. "
        f'Provided value "{other}" is not a UUID. Session IDs are written in lowercase 8-4-4-4-12 form: {session_id}'
    )


def test_a_transcript_named_as_no_session_is_never_continued(tmp_path: Path) -> None:
    session_id = first_run(tmp_path)
    (paths(tmp_path, session_id).project / "notes.jsonl").write_text(
        json.dumps({"type": "user", "uuid": str(uuid.uuid4()), "message": {"role": "user", "content": "stray"}}) + "\n"
    )
    with MockApi(HELLO) as api:
        run = run_cli(["--continue", "-p", "again", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.result["session_id"] == session_id, "the newest file is not a session: the session is"
    listed = subprocess.run(
        [sys.executable, "-m", "queryloop", "sessions", "--cwd", str(tmp_path)], capture_output=True, text=True
    )
    assert "notes" not in listed.stdout and session_id in listed.stdout


@pytest.fixture
def sdk_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """queryloop as the Agent SDK's ``cli_path`` (as in ``test_agent_sdk``)."""
    monkeypatch.setenv("CLAUDE_AGENT_SDK_SKIP_VERSION_CHECK", "1")
    wrapper = tmp_path / "queryloop-cli"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m queryloop "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)
    return wrapper


def test_an_in_process_server_s_tools_never_share_a_name_with_each_other_or_a_configured_server(
    tmp_path: Path, sdk_cli: Path
) -> None:
    """Through the real Agent SDK: its in-process server ``calc`` lists ``add.v1`` and ``add_v1`` (both offered as
    ``mcp__calc__add_v1``), and the settings configure a stdio server also named ``calc``."""

    @tool("add.v1", "Add two numbers", {"a": int, "b": int})
    async def add_dot(args: dict[str, Any]) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": "dot"}]}

    @tool("add_v1", "Add two numbers", {"a": int, "b": int})
    async def add_under(args: dict[str, Any]) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": "underscore"}]}

    (tmp_path / "mcp").mkdir()
    stdio = {"command": sys.executable, "args": [str(FLAKY), str(tmp_path / "mcp")]}
    said: list[str] = []
    with MockApi(HELLO) as api:
        options = _options(
            api,
            sdk_cli,
            tmp_path,
            mcp_servers={"calc": create_sdk_mcp_server("calc", tools=[add_dot, add_under])},
            settings=json.dumps({"mcpServers": {"calc": stdio}}),
            stderr=said.append,
        )
        messages = _run(lambda: _collect(query(prompt="hi", options=options)))
        offered = [name for name in api.requests[0].tools if name.startswith("mcp__")]
    assert _result(messages).result == "hello"
    assert offered == ["mcp__calc__add_v1"], "offered once: the API refuses a request naming a tool twice"
    assert not (tmp_path / "mcp" / "starts").exists(), "the configured server of the same name was not started"
    stderr = "\n".join(said)
    assert "MCP server 'calc' of settings is not started: the Agent SDK's in-process server" in stderr, stderr
    assert (
        "a tool of in-process MCP server 'calc' is not offered: another tool of the server is offered as "
        "'mcp__calc__add_v1'" in stderr
    ), stderr
