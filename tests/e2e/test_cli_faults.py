"""End-to-end: faults of the command line — markup in data, scenario temp dirs, hook errors, request deadlines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .harness import HANG_GUARD_S, ROOT, MockApi, cli_env, run_cli
from .test_hooks_and_permissions import script, settings
from .test_request_layer import scenario

MARKUP = "[/x] closing [bold]tag[/bold] and [/]"


def test_text_output_of_a_file_holding_markup_shows_it_and_the_run_succeeds(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text(MARKUP + "\n")
    text = scenario("""  mock-primary:
    - reply: {content: [{tool_use: {name: Read, input: {file_path: notes.txt}}}]}
    - reply: {content: [{text: "read it"}]}
""")
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path, fmt="text")
    assert run.returncode == 0, run.stderr
    assert MARKUP in run.stderr and "MarkupError" not in run.stderr
    assert run.stdout == "read it\n"


def test_an_api_error_whose_text_holds_markup_is_printed_as_it_is(tmp_path: Path) -> None:
    text = scenario("""  mock-primary:
    - error: {status: 400, message: "bad [/bold] request [red]"}
""")
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path, fmt="text")
    assert run.returncode == 1
    assert "bad [/bold] request [red]" in run.stderr and "Traceback" not in run.stderr


def _offline(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    scenario_file = tmp_path / "tidy.yaml"
    scenario_file.write_text(
        scenario(
            """  mock-primary:
    - reply: {content: [{tool_use: {name: Bash, input: {command: "echo made > made.txt"}}}]}
    - reply: {content: [{text: "done"}]}
""",
            extra="cli: {permission_mode: bypassPermissions}\n",
        ).replace("scenario: t", "scenario: tidy")
    )
    temp = tmp_path / "temp"
    temp.mkdir()
    return subprocess.run(
        [sys.executable, "-m", "queryloop", "run", "--scenario", str(scenario_file), "-p", "go", *extra],
        capture_output=True,
        text=True,
        env=cli_env(None, TMPDIR=str(temp)),
        cwd=ROOT,
        timeout=HANG_GUARD_S,
    )


def test_a_scenario_run_removes_its_temporary_working_directory(tmp_path: Path) -> None:
    proc = _offline(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "offline run of scenario 'tidy'" in proc.stderr
    assert list((tmp_path / "temp").glob("queryloop-tidy-*")) == []


def test_a_scenario_run_keeps_the_working_directory_it_was_given(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    proc = _offline(tmp_path, "--cwd", str(work))
    assert proc.returncode == 0, proc.stderr
    assert (work / "made.txt").read_text() == "made\n"


def test_stream_json_reports_a_failing_hook_as_a_system_hook_error_line(tmp_path: Path) -> None:
    hook = script(tmp_path, "broken.sh", "echo 'cannot [/bold] check' >&2\nexit 1\n")
    text = scenario("""  mock-primary:
    - reply: {content: [{tool_use: {name: Bash, input: {command: "true"}}}]}
    - reply: {content: [{text: "done"}]}
""")
    hooks = settings(PreToolUse=[{"matcher": "Bash", "hooks": [{"type": "command", "command": hook}]}])
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary", "--settings", hooks], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    (line,) = run.of("system", "hook_error")
    assert line["hook_event_name"] == "PreToolUse"
    assert line["error"] == f"({hook}): exited with code 1: cannot [/bold] check"
    assert run.lines.index(line) < run.lines.index(run.of("user")[0]), "reported when it happens"


# The first reply stalls for an hour and only the request's deadline ends it: the run decides by that event,
# however busy the machine. The guard only stops a run whose deadline never fires (a hang, not a slow pass).
# The deadline is 3 s, not less: the retried request, answered at once, must still finish within it on a
# machine at load 20.


def test_the_request_timeout_flag_retries_a_request_past_its_deadline(tmp_path: Path) -> None:
    text = scenario("""  mock-primary:
    - reply: {content: [{text: "slow"}, {text: "er"}]}
      stall: {after_block: 1, seconds: 3600}
    - reply: {content: [{text: "quick"}]}
""")
    with MockApi(text) as api:
        run = run_cli(
            ["-p", "hi", "--model", "mock-primary", "--request-timeout", "3"],
            api=api,
            cwd=tmp_path,
            timeout=HANG_GUARD_S,
            QUERYLOOP_STREAM_IDLE_TIMEOUT_S="3600",
        )
    assert run.returncode == 0, run.stderr
    assert run.reasons == ["transient_error_backoff", "api_retry", "answer_recorded"]
    (failed, _) = run.of("system", "api_request")
    assert failed["error_kind"] == "retryable" and "deadline of 3 s" in failed["error"]
    assert run.result["result"] == "quick"


def test_the_request_timeout_flag_must_be_a_positive_number(tmp_path: Path) -> None:
    run = run_cli(["-p", "hi", "--request-timeout", "0"], api=None, cwd=tmp_path, fmt="text")
    assert run.returncode == 2 and "--request-timeout: expected a number of seconds > 0, got 0" in run.stderr


def test_the_request_timeout_can_come_from_the_environment(tmp_path: Path) -> None:
    text = scenario("""  mock-primary:
    - reply: {content: [{text: "slow"}, {text: "er"}]}
      stall: {after_block: 1, seconds: 3600}
    - reply: {content: [{text: "quick"}]}
""")
    with MockApi(text) as api:
        run = run_cli(
            ["-p", "hi", "--model", "mock-primary"],
            api=api,
            cwd=tmp_path,
            timeout=HANG_GUARD_S,
            QUERYLOOP_STREAM_IDLE_TIMEOUT_S="3600",
            QUERYLOOP_REQUEST_TIMEOUT_S="3",
        )
    assert run.returncode == 0, run.stderr
    assert json.dumps(run.result["result"]) == '"quick"'
