"""End-to-end: the SessionEnd hook of a headless run — its ``reason`` and that an interrupted run still fires it."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

from .harness import MockApi, run_cli, signal_when_running
from .test_request_layer import scenario

COMMAND = "echo $$ > pgid.tmp && mv pgid.tmp pgid; sleep 30"
SLEEPER = scenario(f"""  mock-primary:
    - reply: {{content: [{{tool_use: {{name: Bash, input: {{command: "{COMMAND}"}}}}}}]}}
    - reply: {{content: [{{text: "never"}}]}}
""")
ANSWER = scenario("""  mock-primary:
    - reply: {content: [{text: "done"}]}
""")
REFUSED = scenario("""  mock-primary:
    - error: {status: 400, message: "messages: bad role"}
""")


def _home_with_hook(tmp_path: Path) -> dict[str, str]:
    """A home whose user settings run a SessionEnd hook that appends its input to ``ended.jsonl`` in the cwd."""
    home = tmp_path / "home"
    hook = {"type": "command", "command": "cat >> ended.jsonl; echo >> ended.jsonl"}
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / "settings.json").write_text(json.dumps({"hooks": {"SessionEnd": [{"hooks": [hook]}]}}))
    return {"HOME": str(home), "QUERYLOOP_HOME": str(tmp_path / "qhome")}


def _ended(cwd: Path) -> list[dict[str, object]]:
    path = cwd / "ended.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def test_session_end_reason_is_other_for_an_answer_and_for_an_error_as_in_claude_code(tmp_path: Path) -> None:
    env = _home_with_hook(tmp_path)
    for name, text in (("answered", ANSWER), ("refused", REFUSED)):
        cwd = tmp_path / name
        cwd.mkdir()
        with MockApi(text) as api:
            run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=cwd, **env)
        (ended,) = _ended(cwd)
        assert (ended["hook_event_name"], ended["reason"]) == ("SessionEnd", "other"), name


def test_an_interrupted_run_still_runs_its_session_end_hook(tmp_path: Path) -> None:
    env = _home_with_hook(tmp_path)
    with MockApi(SLEEPER) as api:
        cmd = [sys.executable, "-m", "queryloop", "run", "--output-format", "stream-json", "--verbose"]
        cmd += [
            "--cwd",
            str(tmp_path),
            "--permission-mode",
            "bypassPermissions",
            "-p",
            "sleep",
            "--model",
            "mock-primary",
        ]
        run = signal_when_running(cmd, api, tmp_path / "pgid", signal.SIGINT, **env)
    assert run.returncode == 130, run.stderr
    (ended,) = _ended(tmp_path)
    assert ended["reason"] == "other"
