"""End-to-end: tools from real MCP servers (subprocesses over stdio, a server over HTTP on loopback) and their recovery.

Every run is ``queryloop run`` in a subprocess driving the real ``anthropic`` SDK against
the embedded server; the MCP servers are ``tests/fixtures/mcp/flaky_server.py`` (it can
refuse a start, die mid-call, add a tool and send ``notifications/tools/list_changed``,
change a schema between starts) and the shipped deploy server of the seed's chain. What
is checked is what the model was offered in each request, what each call returned, the
machine's path, and the servers' own state files.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from queryloop.machines import MACHINES_DIR

from .harness import ROOT, CliRun, MockApi, run_cli

pytestmark = pytest.mark.slow  # ~140 s in all: tools/test.sh --fast leaves the module out

FLAKY = ROOT / "tests" / "fixtures" / "mcp" / "flaky_server.py"


def _script(*steps: dict[str, Any]) -> str:
    replies = "\n".join(f"    - reply: {{content: [{json.dumps(s)}]}}" for s in steps)
    return f"schema_version: 1\nscenario: mcp\nmodel: mock-primary\nmodels:\n  mock-primary:\n{replies}\n"


def _call(name: str, **tool_input: str) -> dict[str, Any]:
    return {"tool_use": {"name": name, "input": tool_input}}


DONE = {"text": "done"}


def _server(folder: Path, plan: dict[str, Any] | None = None) -> str:
    """An ``--mcp-config`` value starting the flaky server over stdio with ``plan``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "plan.json").write_text(json.dumps(plan or {}))
    return json.dumps({"mcpServers": {"flaky": {"command": sys.executable, "args": [str(FLAKY), str(folder)]}}})


def _tools_offered(request: Any) -> dict[str, dict[str, Any]]:
    return {str(t["name"]): dict(t) for t in request.tool_definitions}


def _results(run: CliRun) -> list[dict[str, Any]]:
    return [block for line in run.of("user") for block in line["message"]["content"] if block["type"] == "tool_result"]


def _text(block: dict[str, Any]) -> str:
    content = block["content"]
    return content if isinstance(content, str) else "".join(b.get("text", "") for b in content)


def _run(tmp_path: Path, script: str, *flags: str, **env: str) -> tuple[CliRun, list[Any]]:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    with MockApi(script) as api:
        run = run_cli([*flags, "--model", "mock-primary", "--", "go"], api=api, cwd=work, timeout=120, **env)
        return run, api.requests


def test_a_servers_tools_are_offered_with_their_schema_and_called(tmp_path: Path) -> None:
    config = _server(tmp_path / "mcp", {"tools": ["echo", "note"]})
    run, requests = _run(tmp_path, _script(_call("mcp__flaky__echo", text="hi"), DONE), "--mcp-config", config)
    assert run.returncode == 0, run.stderr
    init = run.of("system", "init")[0]
    assert init["mcp_servers"] == [{"name": "flaky", "status": "connected"}]
    assert {"mcp__flaky__echo", "mcp__flaky__note"} <= set(init["tools"])
    offered = _tools_offered(requests[0])
    assert offered["mcp__flaky__echo"]["input_schema"]["required"] == ["text"]
    assert offered["mcp__flaky__echo"]["description"] == "Echo the text back."
    [result] = _results(run)
    assert _text(result) == "echo: hi" and not result["is_error"]
    assert run.all_reasons.index("tool_catalog_refreshed") < run.all_reasons.index("context_ok")


def test_permission_rules_name_a_server_or_one_of_its_tools_and_a_bare_deny_hides_them(tmp_path: Path) -> None:
    script = _script(_call("mcp__flaky__echo", text="hi"), DONE)
    config = _server(tmp_path / "mcp", {"tools": ["echo", "note"]})
    asked, _ = _run(tmp_path, script, "--mcp-config", config, "--permission-mode", "default")
    assert [d["tool_name"] for d in asked.result["permission_denials"]] == ["mcp__flaky__echo"], "headless: denied"
    for rule in ("mcp__flaky", "mcp__flaky__echo", "mcp__flaky__*"):
        allowed, _ = _run(
            tmp_path, script, "--mcp-config", config, "--permission-mode", "default", "--allowed-tools", rule
        )
        assert allowed.result["permission_denials"] == [], rule
        assert _text(_results(allowed)[0]) == "echo: hi", rule
    _, requests = _run(tmp_path, _script(DONE), "--mcp-config", config, "--disallowed-tools", "mcp__flaky__note")
    assert "mcp__flaky__echo" in _tools_offered(requests[0]) and "mcp__flaky__note" not in _tools_offered(requests[0])


def test_a_server_killed_mid_call_is_an_error_result_then_it_is_reconnected_and_its_new_schema_offered_next(
    tmp_path: Path,
) -> None:
    config = _server(tmp_path / "mcp", {"schema_by_start": {"2": "v2"}})
    script = _script(_call("mcp__flaky__die"), _call("mcp__flaky__lookup", key="a", region="eu"), DONE)
    run, requests = _run(tmp_path, script, "--mcp-config", config)
    assert run.returncode == 0, run.stderr
    died, looked_up = _results(run)
    assert died["is_error"] is True
    error = json.loads(_text(died).splitlines()[-1])["mcp_error"]
    assert error == {"server": "flaky", "tool": "die", "kind": "transport", "message": error["message"]}
    reasons = run.all_reasons
    assert reasons.index("mcp_reconnect_start") < reasons.index("mcp_reconnect_succeeded") < len(reasons)
    before = _tools_offered(requests[0])["mcp__flaky__lookup"]["input_schema"]["properties"]
    after = _tools_offered(requests[1])["mcp__flaky__lookup"]["input_schema"]["properties"]
    assert set(before) == {"key"} and set(after) == {"key", "region"}, "the new schema, in the next request"
    assert _text(looked_up) == "v2 a in eu" and not looked_up["is_error"]
    assert (tmp_path / "mcp" / "starts").read_text().split() == ["1", "2"]


def test_a_call_that_never_answers_ends_at_mcp_tool_timeout_and_the_server_answers_the_next_call(
    tmp_path: Path,
) -> None:
    config = _server(tmp_path / "mcp", {"tools": ["echo", "hang"]})
    script = _script(_call("mcp__flaky__hang"), _call("mcp__flaky__echo", text="hi"), DONE)
    run, _ = _run(tmp_path, script, "--mcp-config", config, MCP_TOOL_TIMEOUT="1500")
    assert run.returncode == 0, run.stderr
    hung, echoed = _results(run)
    assert hung["is_error"] is True
    error = json.loads(_text(hung).splitlines()[-1])["mcp_error"]
    assert error["kind"] == "timeout" and "within 1.5 s" in error["message"]
    assert _text(echoed) == "echo: hi" and not echoed["is_error"]
    assert (tmp_path / "mcp" / "starts").read_text().split() == ["1"], "still connected: not started again"
    assert "mcp_reconnect_start" not in run.all_reasons


def test_a_start_that_never_finishes_fails_at_mcp_timeout_then_is_started_again_at_the_boundary(
    tmp_path: Path,
) -> None:
    config = _server(tmp_path / "mcp", {"hang_starts": [1]})
    script = _script(_call("mcp__flaky__echo", text="hi"), DONE)
    run, _ = _run(tmp_path, script, "--mcp-config", config, MCP_TIMEOUT="10000")  # a start that answers: ~1 s
    assert run.returncode == 0, run.stderr
    assert run.of("system", "init")[0]["mcp_servers"] == [{"name": "flaky", "status": "failed"}]
    assert "did not finish starting within 10 s" in run.stderr
    assert run.all_reasons.index("mcp_reconnect_start") < run.all_reasons.index("mcp_reconnect_succeeded")
    [echoed] = _results(run)
    assert _text(echoed) == "echo: hi" and not echoed["is_error"]


def test_a_changed_tool_list_is_offered_from_the_next_request_on_and_not_before(tmp_path: Path) -> None:
    config = _server(tmp_path / "mcp", {"tools": ["grow", "echo"]})
    script = _script(_call("mcp__flaky__grow"), _call("mcp__flaky__extra", word="x"), DONE)
    run, requests = _run(tmp_path, script, "--mcp-config", config)
    assert run.returncode == 0, run.stderr
    assert "mcp__flaky__extra" not in _tools_offered(requests[0])
    assert "mcp__flaky__extra" in _tools_offered(requests[1])
    grown, extra = _results(run)
    assert _text(grown) == "grown" and _text(extra) == "extra: x"
    reasons = run.all_reasons
    first_turn = reasons.index("next_turn")
    assert reasons[first_turn + 1] == "tool_catalog_refreshed", reasons
    assert (tmp_path / "mcp" / "starts").read_text().split() == ["1"], "a notification is no reconnect"


def test_a_server_that_comes_back_after_a_failed_attempt_is_reconnected_after_a_backoff(tmp_path: Path) -> None:
    config = _server(tmp_path / "mcp", {"fail_starts": [2], "tools": ["die", "echo"]})
    script = _script(_call("mcp__flaky__die"), _call("mcp__flaky__echo", text="back"), DONE)
    run, _ = _run(tmp_path, script, "--mcp-config", config)
    assert run.returncode == 0, run.stderr
    reasons = run.reasons
    assert reasons[reasons.index("mcp_reconnect_start") :][:3] == [
        "mcp_reconnect_start",
        "mcp_reconnect_backoff",
        "mcp_reconnect_succeeded",
    ]
    assert _text(_results(run)[1]) == "echo: back"


def test_a_server_that_stays_down_is_dropped_with_a_notice_and_its_tools_fail_cleanly(tmp_path: Path) -> None:
    config = _server(tmp_path / "mcp", {"fail_starts": [2, 3, 4, 5], "tools": ["die", "echo"]})
    script = _script(_call("mcp__flaky__die"), _call("mcp__flaky__echo", text="still there?"), DONE)
    run, requests = _run(tmp_path, script, "--mcp-config", config)
    assert run.returncode == 0, run.stderr
    reasons = run.reasons
    start = reasons.index("mcp_reconnect_start")
    assert reasons[start : start + 5] == ["mcp_reconnect_start", *["mcp_reconnect_backoff"] * 3, "mcp_reconnect_failed"]
    assert not [n for n in _tools_offered(requests[1]) if n.startswith("mcp__")], "dropped from the catalog"
    echoed = _results(run)[1]
    assert echoed["is_error"] and "No such tool available: mcp__flaky__echo" in _text(echoed)
    assert "MCP server 'flaky'" in run.stderr and "still down" in run.stderr
    assert (tmp_path / "mcp" / "starts").read_text().split() == ["1", "2", "3", "4", "5"], "1 + max_mcp_reconnects"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(params=["http"])
def http_server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[str, Path]]:
    """The flaky server over HTTP on loopback (``--http`` or ``--sse``), started again by the test whenever it dies."""
    transport = request.param
    folder = tmp_path / f"{transport}-mcp"
    folder.mkdir()
    (folder / "plan.json").write_text(json.dumps({"schema_by_start": {"2": "v2"}}))
    port = _free_port()
    stop = threading.Event()
    current: list[subprocess.Popen[bytes]] = []

    def start() -> None:
        current.append(
            subprocess.Popen(
                [sys.executable, str(FLAKY), str(folder), f"--{transport}", str(port)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.05)
        raise AssertionError("the HTTP MCP server did not start")

    def restart_when_dead() -> None:
        while not stop.is_set():
            if current[-1].poll() is not None:
                start()  # the test restarts the server it killed
            time.sleep(0.05)

    start()
    watcher = threading.Thread(target=restart_when_dead, daemon=True)
    watcher.start()
    try:
        yield f"http://127.0.0.1:{port}/{'mcp' if transport == 'http' else 'sse'}", folder
    finally:
        stop.set()
        watcher.join(5)
        for process in current:
            process.kill()
            process.wait()


def test_over_http_a_killed_server_is_restarted_by_the_test_then_reconnected_with_its_new_schema(
    tmp_path: Path, http_server: tuple[str, Path]
) -> None:
    url, folder = http_server
    config = json.dumps({"mcpServers": {"flaky": {"type": "http", "url": url, "headers": {"X-Test": "1"}}}})
    script = _script(
        _call("mcp__flaky__echo", text="over http"),
        _call("mcp__flaky__die"),
        _call("mcp__flaky__lookup", key="k", region="us"),
        DONE,
    )
    # a real backoff (1 s, then 2 s, 4 s), so the restart can land between the attempts
    run, requests = _run(tmp_path, script, "--mcp-config", config, QUERYLOOP_RETRY_BASE_DELAY_MS="1000")
    assert run.returncode == 0, run.stderr
    echoed, died, looked_up = _results(run)
    assert _text(echoed) == "echo: over http"
    assert died["is_error"] and '"kind": "transport"' in _text(died)
    assert "mcp_reconnect_succeeded" in run.all_reasons
    assert set(_tools_offered(requests[1])["mcp__flaky__lookup"]["input_schema"]["properties"]) == {"key"}
    assert set(_tools_offered(requests[2])["mcp__flaky__lookup"]["input_schema"]["properties"]) == {"key", "region"}
    assert _text(looked_up) == "v2 k in us"
    assert (folder / "starts").read_text().split() == ["1", "2"]


@pytest.mark.parametrize("http_server", ["sse"], indirect=True)
def test_over_sse_a_servers_tools_are_listed_and_called(tmp_path: Path, http_server: tuple[str, Path]) -> None:
    url, _ = http_server
    config = json.dumps({"mcpServers": {"flaky": {"type": "sse", "url": url}}})
    run, requests = _run(tmp_path, _script(_call("mcp__flaky__echo", text="over sse"), DONE), "--mcp-config", config)
    assert run.returncode == 0, run.stderr
    assert run.of("system", "init")[0]["mcp_servers"] == [{"name": "flaky", "status": "connected"}]
    assert "mcp__flaky__echo" in _tools_offered(requests[0])
    assert _text(_results(run)[0]) == "echo: over sse"


def test_the_deploy_chain_never_deploys_twice_the_ledger_answers_the_re_proposed_deploy(tmp_path: Path) -> None:
    """The seed's chain with the deploy MCP server: the re-proposed deploy carries a fresh idempotency key."""
    scenario = (MACHINES_DIR / "scenarios" / "seed_chain_mcp.yaml").read_text()
    work = tmp_path / "work"
    work.mkdir()
    (work / "checkpoint.txt").write_text("CHECKPOINT_ORIGINAL\n")
    flags = ["--model", "mock-primary", "--fallback-model", "mock-fallback", "--permission-mode", "acceptEdits"]
    deploy = {"command": sys.executable, "args": ["-m", "queryloop", "mock-mcp-deploy", "--state", "deployments.json"]}
    flags += ["--mcp-config", json.dumps({"mcpServers": {"deploy": deploy}})]  # the scenario's cli hint, as a flag
    with MockApi(scenario) as api:
        run = run_cli([*flags, "--allowed-tools", "mcp__deploy", "Read", "--", "go"], api=api, cwd=work, timeout=120)
    assert run.returncode == 0, run.stderr
    reasons = run.all_reasons
    for reason in ("model_fallback", "file_checkpoint_taken", "reactive_compact_succeeded", "ledger_hit_replayed"):
        assert reason in reasons, reasons
    state = json.loads((work / "deployments.json").read_text())
    assert [d["idempotency_key"] for d in state["deployments"]] == ["deploy-v42-first"], "deployed once"
    replayed = _results(run)[-1]
    assert "Not run again" in _text(replayed) and "deployed v42 as dep-42" in _text(replayed)
    calls = [b for line in run.of("assistant") for b in line["message"]["content"] if b["type"] == "tool_use"]
    keys = [c["input"]["idempotency_key"] for c in calls if c["name"] == "mcp__deploy__deploy"]
    assert keys == ["deploy-v42-first", "deploy-v42-second"], "the server could not have told them apart"


def test_a_project_mcp_json_starts_nothing_until_the_settings_approve_it(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / ".mcp.json").write_text(_server(tmp_path / "mcp", {"tools": ["echo"]}))
    with MockApi(_script(DONE)) as api:
        fresh = run_cli(["--model", "mock-primary", "--", "go"], api=api, cwd=work)
        approved = run_cli(
            ["--model", "mock-primary", "--settings", '{"enabledMcpjsonServers": ["flaky"]}', "--", "go"],
            api=api,
            cwd=work,
        )
    assert fresh.returncode == 0 and fresh.of("system", "init")[0]["mcp_servers"] == []
    assert "'flaky' is not started: it is not approved" in fresh.stderr
    assert approved.of("system", "init")[0]["mcp_servers"] == [{"name": "flaky", "status": "connected"}]
    assert (tmp_path / "mcp" / "starts").read_text().split() == ["1"], "started once: by the approved run only"


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ('{"mcpServers": {"x": {}}}', "--mcp-config: at .mcpServers.x: a server needs either a command"),
        ('{"mcpServers": {"x": {"type": "http"}}}', "at .mcpServers.x: a server of type http needs a url"),
        ('{"mcpServers": {"x": {"type": "sse", "url": "ftp://h"}}}', "url must start with http:// or https://"),
        ('{"servers": {}}', "--mcp-config: at (top level): 'mcpServers' is a required property"),
        ('{"mcpServers": {"x y": {"command": "a"}}}', "server name 'x y' may hold only letters"),
        ("{nope", "--mcp-config:1:2: invalid JSON"),
        ("missing.json", f"--mcp-config {ROOT / 'missing.json'}: cannot read it"),  # read where the program ran
        ('{"mcpServers": {"x": {"command": "${QL_UNSET_VAR}"}}}', "environment variable QL_UNSET_VAR is not set"),
    ],
)
def test_a_malformed_mcp_config_is_one_clear_error_before_anything_runs(
    tmp_path: Path, config: str, expected: str
) -> None:
    flags = ["--mcp-config", config, "--model", "mock-primary", "--", "go"]
    run = run_cli(flags, api=None, cwd=tmp_path, ANTHROPIC_API_KEY="unused", ANTHROPIC_BASE_URL="http://127.0.0.1:9")
    assert run.returncode == 1
    assert expected in run.stderr, run.stderr
    assert "Traceback" not in run.stderr and run.stdout == ""


def test_a_server_whose_command_does_not_exist_is_failed_in_init_and_the_run_goes_on(tmp_path: Path) -> None:
    config = json.dumps({"mcpServers": {"gone": {"command": str(tmp_path / "no-such-server")}}})
    run, requests = _run(tmp_path, _script(DONE), "--mcp-config", config)
    assert run.returncode == 0, run.stderr
    assert run.of("system", "init")[0]["mcp_servers"] == [{"name": "gone", "status": "failed"}]
    assert "mcp_reconnect_failed" in run.all_reasons
    assert not [n for n in _tools_offered(requests[0]) if n.startswith("mcp__")]
    assert "MCP server 'gone'" in run.stderr
