"""End-to-end: the reference MCP servers — images, resources, roots, elicitation, prompts, progress.

The servers are npm's ``@modelcontextprotocol/server-everything`` and
``@modelcontextprotocol/server-filesystem`` at the versions pinned in
``tests/fixtures/mcp/npm/package.json`` (``tools/test.sh`` runs ``npm ci`` there when they
are missing), started by ``queryloop run`` as stdio subprocesses. The model is the embedded
server over loopback through the real ``anthropic`` SDK; what is checked is the request
body it received (the image block, the resource's text, the link's URI), the stream-json
lines and the transcript on disk.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import struct
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pexpect
import pytest

from .harness import ROOT, CliRun, MockApi, cli_command, cli_env, run_cli
from .test_interactive import Session

pytestmark = pytest.mark.slow  # node servers: tools/test.sh --fast leaves the module out

BIN = ROOT / "tests" / "fixtures" / "mcp" / "npm" / "node_modules" / ".bin"
EVERYTHING = BIN / "mcp-server-everything"
FILESYSTEM = BIN / "mcp-server-filesystem"


@pytest.fixture(scope="module", autouse=True)
def _servers_installed() -> None:
    if not (EVERYTHING.exists() and FILESYSTEM.exists()):
        pytest.fail(f"the reference MCP servers are not installed: run tools/test.sh, or npm ci in {BIN.parent.parent}")


def _script(*steps: dict[str, Any]) -> str:
    replies = "\n".join(f"    - reply: {{content: [{json.dumps(s)}]}}" for s in steps)
    return f"schema_version: 1\nscenario: mcp-servers\nmodel: mock-primary\nmodels:\n  mock-primary:\n{replies}\n"


def _call(tool: str, /, **tool_input: Any) -> dict[str, Any]:
    return {"tool_use": {"name": tool, "input": tool_input}}


DONE = {"text": "done"}


def _config(**servers: list[str]) -> str:
    """An ``--mcp-config`` document: each server a stdio command with its arguments."""
    entries = {name: {"command": str(argv[0]), "args": argv[1:]} for name, argv in servers.items()}
    return json.dumps({"mcpServers": entries})


def _run(tmp_path: Path, script: str, *flags: str, **env: str) -> tuple[CliRun, list[Any]]:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    env.setdefault("QUERYLOOP_HOME", str(tmp_path / "home"))
    with MockApi(script) as api:
        run = run_cli([*flags, "--model", "mock-primary", "--", "go"], api=api, cwd=work, timeout=120, **env)
        return run, api.requests


def _results(request: Any) -> dict[str, Any]:
    """Each tool_result's content the request carried, by the name of the tool it answers."""
    names = {
        b["id"]: b["name"]
        for m in request.messages
        if m["role"] == "assistant"
        for b in m["content"]
        if b["type"] == "tool_use"
    }
    return {
        names[b["tool_use_id"]]: b["content"]
        for m in request.messages
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_result"
    }


def _text(content: Any) -> str:
    return content if isinstance(content, str) else "\n".join(b.get("text", "") for b in content)


def _png(side: int, pixels: bytes) -> bytes:
    """A PNG file ``side`` pixels square (RGB, stored uncompressed so its size is known)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    rows = b"".join(b"\0" + pixels[y * side * 3 : (y + 1) * side * 3] for y in range(side))
    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows, 0)) + chunk(b"IEND", b"")


def test_images_resources_and_links_reach_the_model_as_claude_code_sends_them(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "big.png").write_bytes(_png(1500, os.urandom(1500 * 1500 * 3)))  # 6.4 MB: over the cap
    config = _config(everything=[str(EVERYTHING), "stdio"], fs=[str(FILESYSTEM), str(work)])
    gzip_input = {"name": "fresh.txt", "data": "data:text/plain;base64," + base64.b64encode(b"fresh").decode()}
    script = _script(
        _call("mcp__everything__get-tiny-image"),
        _call("mcp__everything__get-resource-links", count=2),
        _call("mcp__everything__get-resource-reference", resourceType="Text", resourceId=3),
        _call("mcp__fs__read_media_file", path=str(work / "big.png")),
        _call("ListMcpResourcesTool", server="everything"),
        _call("mcp__everything__gzip-file-as-resource", **gzip_input),
        _call("ListMcpResourcesTool"),
        _call("ReadMcpResourceTool", server="everything", uri="demo://resource/dynamic/text/7"),
        _call("ReadMcpResourceTool", server="fs", uri="file:///etc/passwd"),
        DONE,
    )
    run, requests = _run(tmp_path, script, "--mcp-config", config)
    assert run.returncode == 0, run.stderr
    offered = requests[0].tools
    assert (
        offered.index("ListMcpResourcesTool")
        < offered.index("ReadMcpResourceTool")
        < offered.index("mcp__fs__read_file")
    )
    results = _results(requests[-1])

    image = results["mcp__everything__get-tiny-image"]
    assert [b["type"] for b in image] == ["text", "image", "text"]
    source = image[1]["source"]
    assert source["type"] == "base64" and source["media_type"] == "image/png"
    assert base64.b64decode(source["data"]).startswith(b"\x89PNG")

    links = results["mcp__everything__get-resource-links"]
    assert "demo://resource/dynamic/blob/1" in links and "demo://resource/dynamic/text/2" in links
    reference = results["mcp__everything__get-resource-reference"]
    assert "[Resource from everything at demo://resource/dynamic/text/3] Resource 3: This is a plaintext" in reference

    too_big = results["mcp__fs__read_media_file"]
    assert isinstance(too_big, str) and "image/png, 6.4 MB" in too_big and "5.0 MB limit" in too_big

    before = json.loads(_text(_results(requests[5])["ListMcpResourcesTool"]))
    assert {"uri": "demo://resource/static/document/features.md", "server": "everything"}.items() <= before[2].items()
    after = json.loads(_text(_results(requests[7])["ListMcpResourcesTool"]))
    added = {e["uri"] for e in after} - {e["uri"] for e in before}
    assert added == {"demo://resource/session/fresh.txt"}  # resources/list_changed: the listing was refreshed

    read = [
        b
        for m in requests[-1].messages
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_result"
    ]
    # as Claude Code 2.1.235 answers a read of text: the result's contents, compact JSON
    (contents,) = json.loads(_text(read[-2]["content"]))["contents"]
    assert contents["uri"] == "demo://resource/dynamic/text/7" and contents["text"].startswith("Resource 7")
    assert read[-1]["is_error"] and "no connected MCP server 'fs' offers resources" in _text(read[-1]["content"])

    user_lines = [line for line in run.of("user") if line["message"]["content"][0]["type"] == "tool_result"]
    assert user_lines[0]["tool_use_result"][1]["type"] == "image"  # stream-json: the blocks, as Claude Code
    transcript = next((tmp_path / "home" / "projects").glob("*/*.jsonl"))
    kept = [json.loads(line) for line in transcript.read_text().splitlines()]
    images = [
        b
        for e in kept
        if e.get("type") == "user" and isinstance(e["message"]["content"], list)
        for r in e["message"]["content"]
        if r.get("type") == "tool_result" and isinstance(r["content"], list)
        for b in r["content"]
        if b["type"] == "image"
    ]
    assert images == [image[1]]


def test_headless_roots_resource_permissions_and_elicitation_answered_by_a_hook_then_declined(tmp_path: Path) -> None:
    extra, elsewhere, seen = tmp_path / "extra", tmp_path / "elsewhere", tmp_path / "elicitation.json"
    extra.mkdir()
    elsewhere.mkdir()
    # the hook answers the first request for input only; the second finds no one to answer it
    answer = {"hookSpecificOutput": {"hookEventName": "Elicitation", "action": "accept", "content": {"name": "Ada"}}}
    command = f"[ -e {seen} ] && exit 0; cat > {seen}; echo '{json.dumps(answer)}'"
    hook = {"matcher": "everything", "hooks": [{"type": "command", "command": command}]}
    settings = {"permissions": {"additionalDirectories": [str(extra)]}, "hooks": {"Elicitation": [hook]}}
    config = _config(everything=[str(EVERYTHING), "stdio"], fs=[str(FILESYSTEM), str(elsewhere)])
    elicit = _call("mcp__everything__trigger-elicitation-request")
    script = _script(
        _call("mcp__everything__get-roots-list"),
        _call("mcp__fs__list_allowed_directories"),
        _call("ReadMcpResourceTool", server="everything", uri="demo://resource/dynamic/text/1"),
        _call("ListMcpResourcesTool"),
        elicit,
        elicit,
        DONE,
    )
    flags = ["--permission-mode", "default", "--allowedTools", "mcp__everything,mcp__fs"]
    run, requests = _run(
        tmp_path,
        script,
        "--mcp-config",
        config,
        "--settings",
        json.dumps(settings),
        *flags,
        "--disallowedTools",
        "ReadMcpResourceTool",
    )
    assert run.returncode == 0, run.stderr
    results = [
        _text(b["content"])
        for m in requests[-1].messages
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_result"
    ]
    roots, allowed, read, listed, answered, declined = results
    work = (tmp_path / "work").resolve()
    assert f"URI: {work.as_uri()}" in roots and f"URI: {extra.resolve().as_uri()}" in roots
    # the filesystem server serves the roots the client declares instead of its command line's directory
    assert str(work) in allowed and str(extra.resolve()) in allowed and "elsewhere" not in allowed

    assert "ReadMcpResourceTool" not in requests[0].tools and "ListMcpResourcesTool" in requests[0].tools
    assert "No such tool available" in read  # a bare deny rule hides it
    assert "demo://resource/static/document" in listed  # read-only: it ran without asking
    assert run.result["permission_denials"] == []

    assert '"action": "accept"' in answered and "Name: Ada" in answered
    asked = json.loads(seen.read_text())
    assert asked["hook_event_name"] == "Elicitation" and asked["mcp_server_name"] == "everything"
    assert asked["mode"] == "form" and asked["requested_schema"]["required"] == ["name"]
    assert '"action": "decline"' in declined
    assert "asked for input, which was declined: no one can answer in a headless run" in run.stderr


INTERACTIVE = """\
schema_version: 1
scenario: interactive-mcp
model: mock-primary
rules:
  - when: {last_user_contains: "weather in Boston"}
    times: 1
    reply: {content: [{text: "PROMPT-SEEN"}]}
%s
models:
  mock-primary: [{reply: {content: [{text: "TURN-DONE"}]}}]
otherwise: {reply: {content: [{text: "TURN-DONE"}]}}
"""


def _calls(**words: tuple[str, dict[str, Any]]) -> str:
    """Scenario rules: a prompt holding WORD (spelled with spaces for _) calls the tool once."""
    return "".join(
        f'  - when: {{last_user_contains: "{word.replace("_", " ")}"}}\n    times: 1\n'
        f"    reply: {{content: [{{tool_use: {json.dumps({'name': name, 'input': tool_input})}}}]}}\n"
        for word, (name, tool_input) in words.items()
    )


class _McpSession(Session):
    """An interactive session whose MCP servers start first (node, on a busy machine: a longer wait)."""

    def __init__(self, scenario: Path, cwd: Path, home: Path, *args: str) -> None:
        environment = {**os.environ, "PROMPT_TOOLKIT_NO_CPR": "1", "QUERYLOOP_HOME": str(home), "TERM": "xterm"}
        command = ["-m", "queryloop", "--scenario", str(scenario), "--cwd", str(cwd), *args]
        self.child = pexpect.spawn(sys.executable, command, env=environment, encoding="utf-8", timeout=120)
        self.child.setwinsize(50, 200)
        self.seen = ""
        self.banner = self.ready()


def test_the_interactive_session_offers_prompts_follows_roots_asks_for_input_and_shows_progress(tmp_path: Path) -> None:
    cwd, home, extra = tmp_path / "cwd", tmp_path / "home", tmp_path / "extra"
    for folder in (cwd, home, extra):
        folder.mkdir()
    elicit = ("mcp__everything__trigger-elicitation-request", {})
    rules = _calls(
        roots_first=("mcp__everything__get-roots-list", {}),
        roots_again=("mcp__everything__get-roots-list", {}),
        ask_me=elicit,
        ask_again=elicit,
        go_long=("mcp__everything__trigger-long-running-operation", {"duration": 2, "steps": 4}),
    )
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(INTERACTIVE % rules)
    config = _config(everything=[str(EVERYTHING), "stdio"])
    session = _McpSession(scenario, cwd, home, "--mcp-config", config, "--permission-mode", "bypassPermissions")
    session.send("/help")
    session.expect(r"/mcp__everything__args-prompt")
    session.ready()
    session.send("/mcp__everything__args-prompt Boston MA")  # a prompt as a slash command
    session.expect("PROMPT-SEEN")
    session.ready()
    for prompt in ("roots first", "/add-dir ../extra", "a prompt between", "roots again"):
        session.send(prompt)
        session.expect("working directories:" if prompt.startswith("/") else "TURN-DONE")
        session.ready()
    session.send("ask me")  # answered: the required name, the other fields left out
    session.expect(r"MCP server 'everything' asks: Please provide inputs")
    session.expect(r"answer it\? \[y\]es · \[n\]o \(decline\) · \[c\]ancel")
    session.send("y")
    answered: set[str] = set()  # prompt_toolkit may draw a question twice: each field is answered once
    while "TURN-DONE" not in (shown := session.expect(r"  \w+( \(required\))?: [^\n]*\[[^\]\n]*\]|TURN-DONE")):
        field = re.findall(r"  (\w+)(?: \(required\))?: ", shown)[-1]
        if field not in answered:
            answered.add(field)
            session.send("Ada" if field == "name" else "")  # the required name; the other fields left out
    session.ready()
    session.send("ask again")  # declined
    session.expect(r"answer it\?")
    session.send("n")
    session.expect("TURN-DONE")
    session.ready()
    session.send("go long")
    progress = session.expect("TURN-DONE")
    session.ready()
    assert session.close() == 0
    assert re.search(r"mcp__everything__trigger-long-running-operation [1-4]/4", progress), progress[-2000:]

    (transcript,) = home.glob("projects/*/*.jsonl")
    results = [
        _text(b["content"])
        for e in map(json.loads, transcript.read_text().splitlines())
        if e.get("type") == "user" and isinstance(e["message"]["content"], list)
        for b in e["message"]["content"]
        if b.get("type") == "tool_result"
    ]
    first, again, answered, declined = results[:4]
    assert cwd.resolve().as_uri() in first and extra.resolve().as_uri() not in first
    assert cwd.resolve().as_uri() in again and extra.resolve().as_uri() in again  # the roots followed /add-dir
    assert '"action": "accept"' in answered and "Name: Ada" in answered
    assert '"action": "decline"' in declined
    prompts = [
        e["message"]["content"]
        for e in map(json.loads, transcript.read_text().splitlines())
        if e.get("type") == "user" and isinstance(e["message"]["content"], str)
    ]
    assert any("What's weather in Boston, MA?" in p for p in prompts)


def test_a_prompt_is_a_slash_command_and_a_relative_mcp_config_is_read_where_the_program_was_run(
    tmp_path: Path,
) -> None:
    (tmp_path / "work").mkdir()
    (tmp_path / "servers.json").write_text(_config(everything=[str(EVERYTHING), "stdio"]))
    script = _script(DONE)

    def run(prompt: str, api: MockApi) -> subprocess.CompletedProcess[str]:
        command = cli_command("work")
        flags = ["--mcp-config", "servers.json", "--model", "mock-primary", "-p", prompt]
        env = cli_env(api, QUERYLOOP_HOME=str(tmp_path / "home"))
        return subprocess.run([*command, *flags], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)

    with MockApi(script) as api:
        used = run("/mcp__everything__args-prompt Boston MA", api)
        missing = run("/mcp__everything__args-prompt", api)
        requests = api.requests
    assert used.returncode == 0, used.stderr
    init = json.loads(used.stdout.splitlines()[0])
    assert init["mcp_servers"] == [{"name": "everything", "status": "connected"}]  # servers.json, not work/servers.json
    assert {"mcp__everything__simple-prompt", "mcp__everything__args-prompt"} <= set(init["slash_commands"])
    assert len(requests) == 1 and "What's weather in Boston, MA?" in requests[0].messages[0]["content"]
    assert missing.returncode == 1 and missing.stdout == ""
    assert "queryloop: /mcp__everything__args-prompt needs city: /mcp__everything__args-prompt <city> [state]" in (
        missing.stderr
    )


def test_the_agent_sdk_host_answers_an_elicitation_through_its_hook_callback(tmp_path: Path) -> None:
    from claude_agent_sdk import ClaudeAgentOptions, HookMatcher, ResultMessage, query

    wrapper = tmp_path / "queryloop-cli"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m queryloop "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)
    asked: list[dict[str, Any]] = []

    async def answer(input_data: Any, tool_use_id: str | None, context: Any) -> Any:
        asked.append(dict(input_data))
        return {
            "hookSpecificOutput": {"hookEventName": "Elicitation", "action": "accept", "content": {"name": "Grace"}}
        }

    (tmp_path / "work").mkdir()
    script = _script(_call("mcp__everything__trigger-elicitation-request"), DONE)
    with MockApi(script) as api:
        env = {"ANTHROPIC_BASE_URL": api.url, "ANTHROPIC_API_KEY": "test-key", "QUERYLOOP_HOME": str(tmp_path / "home")}
        options = ClaudeAgentOptions(
            cli_path=wrapper,
            cwd=tmp_path / "work",
            model="mock-primary",
            env=env,
            permission_mode="bypassPermissions",
            mcp_servers={"everything": {"type": "stdio", "command": str(EVERYTHING), "args": ["stdio"]}},
            hooks={"Elicitation": [HookMatcher(matcher="everything", hooks=[answer])]},  # type: ignore[dict-item]
        )

        async def play() -> list[Any]:
            return [m async for m in query(prompt="go", options=options)]

        messages = asyncio.run(asyncio.wait_for(play(), 120))
        requests = api.requests
    assert isinstance(messages[-1], ResultMessage) and not messages[-1].is_error
    result = _text(_results(requests[-1])["mcp__everything__trigger-elicitation-request"])
    assert '"action": "accept"' in result and "Name: Grace" in result
    assert asked[0]["hook_event_name"] == "Elicitation" and asked[0]["mcp_server_name"] == "everything"
