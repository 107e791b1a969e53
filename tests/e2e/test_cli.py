"""End-to-end: the `queryloop run` and `mock-api` command lines — flags, formats, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from .harness import HANG_GUARD_S, ROOT, MockApi, cli_env, run_cli
from .test_request_layer import scenario

HELLO = scenario("""  mock-primary:
    - reply: {content: [{text: "Hello there."}]}
""")


def test_without_a_key_or_scenario_one_line_says_how_to_run_offline(tmp_path: Path) -> None:
    run = run_cli(["-p", "hi"], api=None, cwd=tmp_path, fmt="text")
    assert run.returncode == 1
    assert run.stderr.strip().splitlines() == [
        "queryloop: neither ANTHROPIC_API_KEY nor ANTHROPIC_AUTH_TOKEN is set. To run offline against the embedded "
        "server, try: queryloop -p --scenario fallback_chain 'bump the checkpoint' "
        "(queryloop mock-api --list names the shipped scenarios)"
    ]
    assert run.stdout == ""


def _offline(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``queryloop ARGS`` with no key, run from ``cwd`` (not the checkout)."""
    cmd = [sys.executable, "-m", "queryloop", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=cli_env(None), cwd=cwd, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("name", ["hello", "hello.yaml"])
def test_a_bare_scenario_name_is_a_shipped_scenario_from_any_directory(tmp_path: Path, name: str) -> None:
    run = _offline(["-p", "--scenario", name, "hi"], tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "Hello! I am the scripted mock model."


def test_a_scenario_file_that_exists_is_read_before_a_shipped_name(tmp_path: Path) -> None:
    (tmp_path / "hello.yaml").write_text(HELLO, encoding="utf-8")
    run = _offline(["-p", "--scenario", "hello.yaml", "hi"], tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "Hello there."


def test_an_unknown_scenario_name_lists_the_shipped_ones_and_the_nearest(tmp_path: Path) -> None:
    run = _offline(["-p", "--scenario", "fallback_chian", "hi"], tmp_path)
    assert run.returncode == 1
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith(
        "queryloop: fallback_chian: no such file, nor a shipped scenario (did you mean 'fallback_chain'?"
    )
    assert "shipped: fallback_chain, hello, " in line and "Traceback" not in run.stderr
    missing = _offline(["-p", "--scenario", "nowhere/hello.yaml", "hi"], tmp_path)
    assert missing.returncode == 1 and "nowhere/hello.yaml: cannot read scenario file" in missing.stderr


def test_mock_api_lists_the_shipped_scenarios_and_refuses_none(tmp_path: Path) -> None:
    listed = _offline(["mock-api", "--list"], tmp_path)
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line.split()[1] for line in listed.stdout.splitlines()}
    assert rows["hello"] == "mock-primary" and "fallback_chain" in rows
    none = _offline(["mock-api"], tmp_path)
    assert none.returncode == 2 and "which scenario? one of: fallback_chain, hello," in none.stderr


def test_a_bad_flag_is_reported_before_anything_runs(tmp_path: Path) -> None:
    with MockApi(HELLO) as api:
        run = run_cli(["-p", "hi", "--max-turns", "-1"], api=api, cwd=tmp_path, fmt="text")
        assert run.returncode == 2 and "--max-turns: expected a number >= 0, got -1" in run.stderr
        run = run_cli(["-p", "hi", "--fallback-model", "a,b,c,d"], api=api, cwd=tmp_path, fmt="text")
        assert run.returncode == 2 and "at most 3 fallback models" in run.stderr
        assert api.requests == []


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--max-budget-usd", "nan"], "--max-budget-usd: expected a finite amount > 0, got 'nan'"),
        (["--max-budget-usd", "inf"], "expected a finite amount"),
        (["--max-turns", "0"], "--max-turns: expected a number >= 1, got 0"),
        (["--max-output-tokens", "0"], "--max-output-tokens: expected a number >= 1, got 0"),
        (["--allowed-tools", "Bash(ls"], "unbalanced '(' in a rule"),
        (["--disallowedTools", "Bash(rm"], "unbalanced '(' in a rule"),
    ],
)
def test_a_value_that_would_disable_a_limit_or_a_rule_is_a_usage_error(
    tmp_path: Path, flags: list[str], says: str
) -> None:
    with MockApi(HELLO) as api:
        run = run_cli(["-p", "hi", *flags], api=api, cwd=tmp_path, fmt="text")
        assert run.returncode == 2 and says in run.stderr, run.stderr
        assert api.requests == [], "nothing ran"


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (
            ["--max-turns", "100001"],
            "--max-turns: expected a number from 1 to 100000 (the machine's range of max_turns)",
        ),
        (["--max-agent-turns", "100000"], "--max-agent-turns: expected a number from 1 to 100 "),
        (["--max-retries", "11"], "--max-retries: expected a number from 0 to 10 "),
        (["--max-retry-after", "3601"], "--max-retry-after: expected a number from 0 to 3600 "),
    ],
)
def test_a_flag_beyond_its_params_declared_range_is_a_usage_error(tmp_path: Path, flags: list[str], says: str) -> None:
    """Issue 51: `--max-agent-turns 100000` once ran a turn that could send 136 million requests; the figures
    `queryloop check` proves hold for every value within the machine's declared ranges, and a run takes no other."""
    with MockApi(HELLO) as api:
        run = run_cli(["-p", "hi", *flags], api=api, cwd=tmp_path, fmt="text")
        assert run.returncode == 2 and says in run.stderr, run.stderr
        assert len(run.stderr.strip().splitlines()) == 1 and api.requests == [], "one line, nothing ran"


def test_text_mode_streams_the_answer_to_stdout_and_transitions_to_stderr(tmp_path: Path) -> None:
    with MockApi(HELLO) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path, fmt="text")
    assert run.returncode == 0
    assert run.stdout == "Hello there.\n"
    assert "answer_recorded" in run.stderr and "running_stop_hooks → completed" in run.stderr


def test_the_prompt_can_come_on_stdin(tmp_path: Path) -> None:
    with MockApi(HELLO) as api:
        run = run_cli(["--model", "mock-primary"], api=api, cwd=tmp_path, fmt="json", stdin="what is up?\n")
    assert run.returncode == 0
    assert api.requests[0].messages[0]["content"] == "what is up?\n"


def test_json_mode_prints_exactly_one_result_object_with_the_documented_fields(tmp_path: Path) -> None:
    with MockApi(HELLO) as api:
        run = run_cli(
            ["-p", "hi", "--model", "mock-primary", "--append-system-prompt", "Be brief."],
            api=api,
            cwd=tmp_path,
            fmt="json",
        )
    assert len(run.lines) == 1
    result = run.result
    for key in (
        "type",
        "subtype",
        "is_error",
        "num_turns",
        "duration_ms",
        "duration_api_ms",
        "result",
        "stop_reason",
        "terminal_reason",
        "api_error_status",
        "session_id",
        "total_cost_usd",
        "usage",
        "modelUsage",
        "permission_denials",
        "uuid",
    ):
        assert key in result, key
    assert result["total_cost_usd"] > 0 and result["usage"]["output_tokens"] > 0
    assert api.requests[0].system is not None and "Be brief." in json.dumps(api.requests[0].system)


def test_json_mode_with_verbose_prints_one_array_of_the_stream_json_lines_the_result_last(tmp_path: Path) -> None:
    with MockApi(HELLO) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path, fmt="json", verbose=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("\n") == 1, "one line: the array"
    [messages] = [json.loads(line) for line in run.stdout.splitlines()]
    kinds = [(m["type"], m.get("subtype")) for m in messages if m.get("subtype") not in ("transition", "api_request")]
    assert kinds == [("system", "init"), ("assistant", None), ("result", "success")]
    assert messages[-1]["result"] == "Hello there."


def test_stream_json_starts_with_init_and_ends_with_result(tmp_path: Path) -> None:
    with MockApi(HELLO) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path)
    kinds = [(line["type"], line.get("subtype")) for line in run.lines]
    assert kinds == [
        ("system", "init"),
        ("system", "transition"),
        ("system", "transition"),
        ("system", "transition"),
        ("system", "transition"),
        ("system", "api_request"),
        ("assistant", None),
        ("system", "transition"),
        ("system", "transition"),
        ("system", "transition"),
        ("result", "success"),
    ]
    init = run.lines[0]
    assert init["model"] == "mock-primary"
    # observed on Claude Code 2.1.235: the Agent tool is listed first there, under its earlier name
    assert init["tools"] == ["Task", "Read", "Write", "Edit", "Bash", "Glob", "Grep", "WebFetch", "WebSearch"]
    request = run.lines[5]
    assert request["request_id"] == api.requests[0].request_id and request["attempt"] == 1 and request["status"] == 200
    assert request["client_request_id"] == api.requests[0].headers["x-client-request-id"]
    assert request["ttft_ms"] is not None and request["usage"]["output_tokens"] > 0
    assert [run.lines[i]["reason"] for i in (1, 2, 3, 4, 7, 8, 9)] == [
        "session_started",
        "prompt_submitted",
        "tool_catalog_current",
        "context_ok",
        "reply_received",
        "answer_recorded",
        "stop_hooks_passed",
    ]
    transition = run.lines[7]
    assert (
        transition["from"] == "calling_model"
        and transition["to"] == "reading_reply"
        and "api_retries" in transition["counters"]
    )


def test_a_malformed_scenario_is_one_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema_version: 1\nscenario: x\nmodel: m\nmodels:\n  m:\n    - reply: {content: [{txt: hi}]}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "queryloop", "run", "--scenario", str(bad), "-p", "hi"],
        capture_output=True,
        text=True,
        env=cli_env(None),
        cwd=ROOT,
        timeout=HANG_GUARD_S,
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"queryloop: {bad}:6")
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("scenario", [["--scenario", str(ROOT / "machines/scenarios/hello.yaml")], ["hello"]])
def test_mock_api_serves_a_scenario_on_the_given_port(tmp_path: Path, scenario: list[str]) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "queryloop", "mock-api", *scenario],
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert line.startswith("mock-api listening on http://127.0.0.1:")
        url = line.split()[-1]
        how = proc.stderr.readline()
        assert f"ANTHROPIC_BASE_URL={url} and ANTHROPIC_API_KEY set to any value" in how, how
        body = json.dumps(
            {"model": "mock-primary", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
        ).encode()
        request = urllib.request.Request(
            f"{url}/v1/messages",
            data=body,
            headers={"content-type": "application/json", "x-api-key": "x", "anthropic-version": "2023-06-01"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            reply = json.loads(response.read())
        assert reply["type"] == "message" and reply["content"][0]["type"] == "text"
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stderr:
            proc.stderr.close()
