"""End-to-end: the seed's failure chain, and what can and cannot be undone after it.

``machines/scenarios/seed_chain.yaml`` through the real CLI, the real SDK and the
embedded server: three 529s → fallback → an Edit of ``checkpoint.txt`` (checkpointed
first) → a side-effecting "deploy" that appends to ``deployments.log`` → a reactive
compaction that summarises it → the model proposes the deploy again → a ledger hit: the
log holds one line. ``queryloop rewind`` then restores ``checkpoint.txt`` with no model
request and names the deploy as what it cannot undo. The same chain killed with
SIGKILL right after the deploy completed (before its result reached the transcript)
resumes with the deploy's real result, and nothing is deployed twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from queryloop.handlers.context import SUMMARY_MARKER
from queryloop.handlers.messages import ledger_problem
from queryloop.handlers.session import SessionPaths
from queryloop.handlers.session.services.transcript import INTERRUPTED_BEFORE_RECORDED, load_history
from queryloop.machines import MACHINES_DIR

from .harness import HANG_GUARD_S, ROOT, MockApi, cli_env, run_cli

SCENARIO = (MACHINES_DIR / "scenarios" / "seed_chain.yaml").read_text()
DEPLOY = "echo dep-42 | tee -a deployments.log"
CHAIN_FLAGS = ["--model", "mock-primary", "--fallback-model", "mock-fallback", "--permission-mode", "acceptEdits"]
CHAIN_FLAGS += [
    "--allowed-tools",
    "Bash(echo dep-42:*)",
    "Bash(tee -a deployments.log)",
    "Read",
    "--",
    "go",
]  # the scenario's cli hints, as flags


def _home() -> Path:
    return Path(os.environ["QUERYLOOP_HOME"])


def _rewind(session_id: str, cwd: Path, *more: str) -> subprocess.CompletedProcess[str]:
    """``queryloop rewind`` with no API at all in its environment: it cannot send a request."""
    return subprocess.run(
        [sys.executable, "-m", "queryloop", "rewind", session_id, "--cwd", str(cwd), *more],
        capture_output=True,
        text=True,
        env=cli_env(None),
        cwd=ROOT,
        timeout=HANG_GUARD_S,
    )


def test_the_seed_chain_ends_in_a_ledger_hit_and_rewind_restores_the_checkpoint_but_not_the_deploy(
    tmp_path: Path,
) -> None:
    with MockApi(SCENARIO) as api:
        run = run_cli(CHAIN_FLAGS, api=api, cwd=_prepared(tmp_path))
    assert run.returncode == 0, run.stderr
    reasons = run.all_reasons
    for reason in ("model_fallback", "file_checkpoint_taken", "reactive_compact_succeeded", "ledger_hit_replayed"):
        assert reason in reasons, reasons
    assert reasons.index("reactive_compact_succeeded") < reasons.index("ledger_hit_replayed")
    assert (tmp_path / "deployments.log").read_text() == "dep-42\n", "deployed once, not twice"
    replayed = [line for line in run.of("user") if "Not run again" in str(line["message"]["content"][0]["content"])]
    assert len(replayed) == 1 and replayed[0]["message"]["content"][0]["is_error"] is False
    summaries = [r for r in api.requests if SUMMARY_MARKER in json.dumps(r.messages[-1:])]
    after = api.requests[api.requests.index(summaries[0]) + 1]
    assert DEPLOY in json.dumps(after.messages[0]), "the summary names the deploy it summarised, with its result"

    session_id = run.result["session_id"]
    assert (tmp_path / "checkpoint.txt").read_text() == "CHECKPOINT_MODIFIED\n"
    dry = _rewind(session_id, tmp_path, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "-CHECKPOINT_MODIFIED" in dry.stdout and "+CHECKPOINT_ORIGINAL" in dry.stdout
    assert (tmp_path / "checkpoint.txt").read_text() == "CHECKPOINT_MODIFIED\n", "a dry run changes nothing"
    done = _rewind(session_id, tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "checkpoint.txt").read_bytes() == b"CHECKPOINT_ORIGINAL\n"
    cannot = done.stdout.split("cannot undo", 1)[1]
    assert DEPLOY in cannot and "Edit" not in cannot, done.stdout
    assert (tmp_path / "deployments.log").read_text() == "dep-42\n", "a rewind does not touch a remote effect"


def _kill_group_of(pid_file: Path) -> None:
    """The orphaned ``sleep`` of a killed run (Bash runs each command in its own process group)."""
    try:
        os.killpg(int(pid_file.read_text().strip()), signal.SIGKILL)
    except (OSError, ValueError):
        pass


def _prepared(cwd: Path) -> Path:
    (cwd / "checkpoint.txt").write_text("CHECKPOINT_ORIGINAL\n")
    return cwd


KILLED_TURN = SCENARIO.replace(
    """              input: {command: "echo dep-42 | tee -a deployments.log", description: Deploy}
    - reply:
        content:
          - tool_use:
              name: Read
              input: {file_path: checkpoint.txt}""",
    """              input: {command: "echo dep-42 | tee -a deployments.log", description: Deploy}
          - tool_use:
              name: Bash
              input: {command: "echo $$ > slow.pid; sleep 60", description: Wait}
    - reply:
        content:
          - tool_use:
              name: Read
              input: {file_path: checkpoint.txt}""",
    1,
)
AFTER_RESUME = """schema_version: 1
scenario: after_resume
model: mock-fallback
models:
  mock-fallback:
    - reply: {content: [{text: "dep-42 is deployed; nothing to do again."}]}
"""


def test_killed_right_after_the_deploy_the_resumed_session_has_its_real_result_and_deploys_nothing_again(
    tmp_path: Path,
) -> None:
    assert KILLED_TURN != SCENARIO
    cwd = _prepared(tmp_path)
    session_id = str(uuid.uuid4())
    ledger = SessionPaths(home=_home(), cwd=cwd.resolve(), session_id=session_id).ledger
    args = ["-p", "go", "--model", "mock-primary", "--fallback-model", "mock-fallback", "--session-id", session_id]
    args += ["--permission-mode", "bypassPermissions", "--output-format", "stream-json", "--verbose", "--cwd", str(cwd)]
    with MockApi(KILLED_TURN) as api:
        proc = subprocess.Popen(
            [sys.executable, "-m", "queryloop", "run", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=cli_env(api),
            cwd=ROOT,
        )
        try:
            deadline = time.monotonic() + HANG_GUARD_S  # bounds a hang only: the files are the events
            while not (ledger.is_file() and "Deploy" in ledger.read_text() and (cwd / "deployments.log").exists()):
                assert time.monotonic() < deadline and proc.poll() is None, "the deploy never completed"
                time.sleep(0.005)
            while not (cwd / "slow.pid").is_file() or not (cwd / "slow.pid").read_text().strip():
                assert time.monotonic() < deadline and proc.poll() is None, "the second call never started"
                time.sleep(0.005)
            proc.send_signal(signal.SIGKILL)  # the deploy completed, the second call runs: no result written yet
            proc.communicate(timeout=HANG_GUARD_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
            _kill_group_of(cwd / "slow.pid")
    paths = SessionPaths(home=_home(), cwd=cwd.resolve(), session_id=session_id)
    history = load_history(paths.transcript)
    last = history.messages[-1]
    assert last["role"] == "assistant" and sum(b["type"] == "tool_use" for b in last["content"]) == 2, (
        "killed between the calls' completion and their results' write"
    )
    deploy_id = last["content"][0]["id"]
    assert deploy_id in ledger.read_text(), "the completed deploy is in the ledger"

    with MockApi(AFTER_RESUME) as api:
        resumed = run_cli(["--resume", session_id, "-p", "continue", "--model", "mock-fallback"], api=api, cwd=cwd)
    assert resumed.returncode == 0, resumed.stderr
    assert "dangling_calls_answered" in resumed.all_reasons
    (request,) = api.requests
    assert ledger_problem(request.messages) is None, "every tool_use is paired"
    answers = {
        b["tool_use_id"]: b
        for m in request.messages
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    }
    assert answers[deploy_id]["is_error"] is False and answers[deploy_id]["content"] == "dep-42", (
        "the deploy that completed gets its real, recorded result"
    )
    slow_id = last["content"][1]["id"]
    assert answers[slow_id]["content"] == INTERRUPTED_BEFORE_RECORDED and answers[slow_id]["is_error"] is True
    assert (cwd / "deployments.log").read_text() == "dep-42\n", "deployed once; nothing ran again on resume"
    done = _rewind(session_id, cwd)
    assert (cwd / "checkpoint.txt").read_bytes() == b"CHECKPOINT_ORIGINAL\n", done.stdout + done.stderr
