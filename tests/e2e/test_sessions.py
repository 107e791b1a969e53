"""End-to-end: stored sessions — resume, continue, fork, the session flags' errors, the transcript's
shape, hooks' transcript_path, a torn last line, ``queryloop sessions`` and ``queryloop rewind``.

Every run is the real CLI in a subprocess against the embedded server; the sessions are
kept in the test's own ``$QUERYLOOP_HOME`` (tests/conftest.py). ``sessions`` and ``rewind``
run as ``python -m queryloop`` in the working directory, ``rewind`` without any server or
credentials (it must send nothing).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from queryloop.handlers.messages import ledger_problem
from queryloop.handlers.session.services.store import SessionPaths, read_jsonl
from queryloop.handlers.session.services.transcript import load_history

from .harness import HANG_GUARD_S, MockApi, assert_ledger_closed, cli_env, run_cli
from .test_request_layer import scenario

pytestmark = pytest.mark.slow  # ~85 s in all: tools/test.sh --fast leaves the module out

ANSWER_ONE = scenario("""  mock-primary:
    - reply: {content: [{text: "answer one"}]}
""")
ANSWER_TWO = scenario("""  mock-primary:
    - reply: {content: [{text: "answer two"}]}
""")
ENTRY_KEYS = {"uuid", "parentUuid", "sessionId", "type", "timestamp", "cwd", "version"}
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def home() -> Path:
    return Path(os.environ["QUERYLOOP_HOME"])


def paths(cwd: Path, session_id: str) -> SessionPaths:
    return SessionPaths(home=home(), cwd=cwd.resolve(), session_id=session_id)


def entries(path: Path) -> list[dict[str, Any]]:
    found, warnings = read_jsonl(path)
    assert warnings == [], warnings
    return list(found)


def first_run(cwd: Path, prompt: str = "first prompt", text: str = ANSWER_ONE, *extra: str) -> str:
    """A completed run in ``cwd``; its session id."""
    with MockApi(text) as api:
        run = run_cli(["-p", prompt, "--model", "mock-primary", *extra], api=api, cwd=cwd)
    assert run.returncode == 0, run.stderr
    return str(run.result["session_id"])


def queryloop(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m queryloop ARGS`` in ``cwd``, with no server and no credentials unless ``env`` gives them."""
    return subprocess.run(
        [sys.executable, "-m", "queryloop", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=cli_env(None, **env),
        stdin=subprocess.DEVNULL,
        timeout=HANG_GUARD_S,
    )


# ---- resume, continue, fork ----------------------------------------------------------------------


def test_resume_sends_the_previous_history_then_the_new_prompt_and_appends_to_the_same_transcript(
    tmp_path: Path,
) -> None:
    session_id = first_run(tmp_path)
    transcript = paths(tmp_path, session_id).transcript
    before = transcript.read_bytes()
    leaf = [e for e in entries(transcript) if e["type"] in ("user", "assistant")][-1]["uuid"]
    with MockApi(ANSWER_TWO) as api:
        run = run_cli(["--resume", session_id, "-p", "second prompt", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.result["session_id"] == session_id
    assert run.result["result"] == "answer two"
    assert run.all_reasons[:2] == ["session_resumed", "prompt_submitted"]
    assert len(api.requests) == 1
    assert api.requests[0].messages == (
        {"role": "user", "content": "first prompt"},
        {"role": "assistant", "content": [{"type": "text", "text": "answer one"}]},
        {"role": "user", "content": "second prompt"},
    )
    after = transcript.read_bytes()
    assert after.startswith(before), "append-only: the first run's lines are untouched"
    assert [p.name for p in transcript.parent.glob("*.jsonl")] == [transcript.name], "no second transcript"
    new = entries(transcript)[len(before.splitlines()) :]
    assert {e["sessionId"] for e in new} == {session_id}
    assert new[0]["type"] == "user" and new[0]["message"]["content"] == "second prompt"
    assert new[0]["parentUuid"] == leaf, "the resumed prompt follows the stored leaf (not the result entry)"
    history = load_history(transcript)
    assert [m["content"] for m in history.messages][::2] == ["first prompt", "second prompt"]


def test_resume_finds_a_session_started_in_another_directory_and_keeps_writing_it(tmp_path: Path) -> None:
    first, elsewhere = tmp_path / "first", tmp_path / "elsewhere"
    first.mkdir()
    elsewhere.mkdir()
    session_id = first_run(first)
    with MockApi(ANSWER_TWO) as api:
        run = run_cli(
            ["--resume", session_id, "-p", "second prompt", "--model", "mock-primary"], api=api, cwd=elsewhere
        )
    assert run.returncode == 0, run.stderr
    assert run.result["session_id"] == session_id
    assert api.requests[0].messages[0] == {"role": "user", "content": "first prompt"}
    assert not paths(elsewhere, session_id).transcript.exists()
    texts = [e["message"]["content"] for e in entries(paths(first, session_id).transcript) if e["type"] == "user"]
    assert texts == ["first prompt", "second prompt"]


def test_continue_takes_the_newest_session_of_this_directory(tmp_path: Path) -> None:
    older = first_run(tmp_path, "older prompt")
    newer = first_run(tmp_path, "newer prompt")
    with MockApi(ANSWER_TWO) as api:
        run = run_cli(["--continue", "-p", "again", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.result["session_id"] == newer
    assert api.requests[0].messages[0]["content"] == "newer prompt"
    # newest by modification time: touch the older one and -c follows it
    os.utime(paths(tmp_path, older).transcript, (1e10, 1e10))
    with MockApi(ANSWER_TWO) as api:
        run = run_cli(["-c", "-p", "again", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.result["session_id"] == older
    assert api.requests[0].messages[0]["content"] == "older prompt"


def test_continue_without_any_session_starts_a_new_one_silently(tmp_path: Path) -> None:
    with MockApi(ANSWER_ONE) as api:
        run = run_cli(["--continue", "-p", "hello", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.all_reasons[0] == "session_started"
    assert api.requests[0].messages == ({"role": "user", "content": "hello"},)
    assert paths(tmp_path, str(run.result["session_id"])).transcript.is_file()


def test_fork_gives_a_new_id_with_the_same_history_and_leaves_the_original_unchanged(tmp_path: Path) -> None:
    original = first_run(tmp_path)
    stored = paths(tmp_path, original).transcript
    before = stored.read_bytes()
    with MockApi(ANSWER_TWO) as api:
        run = run_cli(
            ["--resume", original, "--fork-session", "-p", "second prompt", "--model", "mock-primary"],
            api=api,
            cwd=tmp_path,
        )
    assert run.returncode == 0, run.stderr
    fork = str(run.result["session_id"])
    assert fork != original and uuid.UUID(fork)
    assert [m["content"] for m in api.requests[0].messages][::2] == ["first prompt", "second prompt"]
    assert stored.read_bytes() == before, "the forked session's file is unchanged"
    forked = paths(tmp_path, fork).transcript
    assert forked.is_file()
    assert {e["sessionId"] for e in entries(forked)} == {fork}
    history = load_history(forked)
    assert [m["content"] for m in history.messages] == [
        "first prompt",
        [{"type": "text", "text": "answer one"}],
        "second prompt",
        [{"type": "text", "text": "answer two"}],
    ]


def test_fork_with_continue_and_a_chosen_session_id(tmp_path: Path) -> None:
    original = first_run(tmp_path)
    chosen = str(uuid.uuid4())
    with MockApi(ANSWER_TWO) as api:
        run = run_cli(
            ["-c", "--fork-session", "--session-id", chosen, "-p", "second prompt", "--model", "mock-primary"],
            api=api,
            cwd=tmp_path,
        )
    assert run.returncode == 0, run.stderr
    assert run.result["session_id"] == chosen
    assert api.requests[0].messages[0]["content"] == "first prompt"
    assert paths(tmp_path, chosen).transcript.is_file() and paths(tmp_path, original).transcript.is_file()


# ---- the flags' errors ------------------------------------------------------------------------------


def test_an_unknown_id_says_claude_code_s_message_exits_1_and_sends_nothing(tmp_path: Path) -> None:
    unknown = str(uuid.uuid4())
    with MockApi(ANSWER_ONE) as api:
        run = run_cli(["--resume", unknown, "-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path, fmt="text")
        assert run.returncode == 1
        assert run.stderr.strip().splitlines() == [f"No conversation found with session ID: {unknown}"]
        assert run.stdout == ""
        assert list(api.server.requests) == []
    assert not (home() / "projects").exists() or not any((home() / "projects").rglob("*.jsonl"))


def test_resume_with_something_not_a_uuid_is_an_error(tmp_path: Path) -> None:
    with MockApi(ANSWER_ONE) as api:
        run = run_cli(
            ["--resume", "not-a-uuid", "-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path, fmt="text"
        )
        assert run.returncode == 1
        assert "not-a-uuid" in run.stderr and "UUID" in run.stderr
        assert list(api.server.requests) == []


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--session-id", "nope"], "Error: Invalid session ID. Must be a valid UUID."),
        (
            ["--resume", "{used}", "--session-id", "{fresh}"],
            "Error: --session-id can only be used with --continue or --resume if --fork-session is also specified.",
        ),
        (
            ["--continue", "--session-id", "{fresh}"],
            "Error: --session-id can only be used with --continue or --resume if --fork-session is also specified.",
        ),
        (["--session-id", "{used}"], "Error: Session ID {used} is already in use."),
    ],
    ids=["not_a_uuid", "resume_without_fork", "continue_without_fork", "already_in_use"],
)
def test_the_session_id_errors_are_claude_code_s(tmp_path: Path, flags: list[str], message: str) -> None:
    used, fresh = first_run(tmp_path), str(uuid.uuid4())
    before = sorted(p.name for p in (home() / "projects").rglob("*"))
    with MockApi(ANSWER_ONE) as api:
        args = [f.format(used=used, fresh=fresh) for f in flags]
        run = run_cli([*args, "-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path, fmt="text")
        assert run.returncode == 1
        assert run.stderr.strip().splitlines() == [message.format(used=used)]
        assert list(api.server.requests) == []
    assert sorted(p.name for p in (home() / "projects").rglob("*")) == before, "nothing was written"


def test_a_chosen_session_id_names_the_transcript(tmp_path: Path) -> None:
    chosen = str(uuid.uuid4())
    assert first_run(tmp_path, "hi", ANSWER_ONE, "--session-id", chosen) == chosen
    assert {e["sessionId"] for e in entries(paths(tmp_path, chosen).transcript)} == {chosen}


def test_no_session_persistence_writes_nothing_under_queryloop_home(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("one\n")
    text = scenario("""  mock-primary:
    - reply: {content: [{tool_use: {name: Edit, input: {file_path: f.txt, old_string: "one", new_string: "two"}}}]}
    - reply: {content: [{tool_use: {name: Bash, input: {command: "echo ran >> ran.log"}}}]}
    - reply: {content: [{text: "done"}]}
""")
    with MockApi(text) as api:
        run = run_cli(["--no-session-persistence", "-p", "go", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "f.txt").read_text() == "two\n" and (tmp_path / "ran.log").read_text() == "ran\n"
    kept = [p for p in home().rglob("*") if p.is_file() and "cache" not in p.relative_to(home()).parts]
    assert kept == [], "no transcript, ledger or checkpoint (the machine cache is no session's)"
    assert not (home() / "projects").exists() or list((home() / "projects").iterdir()) == []


# ---- the transcript ---------------------------------------------------------------------------


TOOL_RUN = scenario("""  mock-primary:
    - reply: {content: [{text: "Let me look."}, {tool_use: {id: toolu_t1, name: Bash, input: {command: "echo hello"}}}]}
    - reply: {content: [{tool_use: {id: toolu_t2, name: Write, input: {file_path: out.txt, content: "x\\n"}}}]}
    - reply: {content: [{text: "All done."}]}
""")


def test_the_transcript_has_claude_code_s_entry_shape_and_chains_by_parent_uuid(tmp_path: Path) -> None:
    with MockApi(TOOL_RUN) as api:
        run = run_cli(["-p", "go", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    session_id = str(run.result["session_id"])
    written = entries(paths(tmp_path, session_id).transcript)
    for entry in written:
        assert ENTRY_KEYS <= entry.keys(), entry
        assert entry["sessionId"] == session_id and entry["cwd"] == str(tmp_path.resolve())
        assert TIMESTAMP.match(entry["timestamp"]), entry["timestamp"]
        assert isinstance(entry["version"], str) and entry["version"]
        assert uuid.UUID(entry["uuid"])
    assert len({e["uuid"] for e in written}) == len(written), "uuids are unique"
    main = [e for e in written if e["type"] in ("user", "assistant")]
    assert [e["type"] for e in main] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert main[0]["parentUuid"] is None
    for parent, child in itertools.pairwise(main):
        assert child["parentUuid"] == parent["uuid"]
    for entry in main:
        assert entry["message"]["role"] == entry["type"] and "content" in entry["message"]
        assert isinstance(entry["reason"], str) and entry["reason"]
    assert main[0]["reason"] == "session_started" and main[0]["message"]["content"] == "go"
    assert written[-1]["type"] == "system" and written[-1]["subtype"] == "result"
    assert written[-1]["terminal_reason"] == "completed" and written[-1]["num_turns"] == run.result["num_turns"]
    assert written[-1]["total_cost_usd"] == pytest.approx(run.result["total_cost_usd"])
    # the transcript's messages are exactly what the last request sent, plus the answer
    sent = [dict(m) for m in api.requests[-1].messages]
    assert [{"role": e["message"]["role"], "content": e["message"]["content"]} for e in main[:-1]] == sent
    assert ledger_problem(sent) is None


def test_credentials_never_reach_any_file_under_queryloop_home(tmp_path: Path) -> None:
    hook = f'{sys.executable} -c "import sys; sys.stdin.read()"'
    settings = json.dumps({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": hook}]}]}})
    text = scenario("""  mock-primary:
    - reply: {content: [{tool_use: {name: Bash, input: {command: "env | grep 'test-ke[y]' || echo no key here"}}}]}
    - reply: {content: [{tool_use: {name: Write, input: {file_path: w.txt, content: "w\\n"}}}]}
    - error: {status: 529}
    - reply: {content: [{text: "done"}]}
""")
    with MockApi(text) as api:
        run = run_cli(
            ["-p", "go", "--model", "mock-primary", "--settings", settings, "--verbose"],
            api=api,
            cwd=tmp_path,
            ANTHROPIC_AUTH_TOKEN="test-key-token",
        )
        assert run.returncode == 0, run.stderr
        session_id = str(run.result["session_id"])
        with MockApi(ANSWER_TWO) as api2:
            resumed = run_cli(["-r", session_id, "-p", "more", "--model", "mock-primary"], api=api2, cwd=tmp_path)
        assert resumed.returncode == 0, resumed.stderr
    files = [p for p in home().rglob("*") if p.is_file()]
    assert len(files) >= 3, files  # transcript, ledger, a checkpoint index (and no blob: w.txt was new)
    for path in files:
        data = path.read_bytes()
        assert b"test-key" not in data, path
        assert b"ANTHROPIC" not in data, path


def test_a_stop_hook_gets_the_real_transcript_path_and_the_file_exists_then(tmp_path: Path) -> None:
    probe = (
        "import json, os, sys; d = json.load(sys.stdin); p = d['transcript_path']; "
        "d['exists'] = os.path.isfile(p); d['lines'] = open(p).read().count(chr(10)) if d['exists'] else 0; "
        "open('stop.json', 'w').write(json.dumps(d))"
    )
    hook = f"{sys.executable} -c {json.dumps(probe)}"
    settings = json.dumps({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": hook}]}]}})
    with MockApi(ANSWER_ONE) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary", "--settings", settings], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    session_id = str(run.result["session_id"])
    seen = json.loads((tmp_path / "stop.json").read_text())
    assert seen["session_id"] == session_id
    assert seen["transcript_path"] == str(paths(tmp_path, session_id).transcript)
    assert seen["exists"] is True
    assert seen["lines"] == 2, "at Stop the transcript holds the prompt and the answer"


def _tear_last_line(path: Path, cut: int) -> None:
    data = path.read_bytes()
    assert data.endswith(b"\n")
    path.write_bytes(data[:-cut])


def test_a_torn_last_line_is_skipped_and_the_session_still_resumes(tmp_path: Path) -> None:
    session_id = first_run(tmp_path)
    transcript = paths(tmp_path, session_id).transcript
    lines = transcript.read_bytes().splitlines(keepends=True)
    # the process died while writing the answer: the result entry never came, the answer's line is torn
    transcript.write_bytes(b"".join(lines[:-2]) + lines[-2][: len(lines[-2]) // 2])
    history = load_history(transcript)
    assert [m["content"] for m in history.messages] == ["first prompt"]
    assert any("torn last line" in w for w in history.warnings), history.warnings
    with MockApi(ANSWER_TWO) as api:
        run = run_cli(["--resume", session_id, "-p", "second prompt", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.result["session_id"] == session_id
    assert api.requests[0].messages == (
        {"role": "user", "content": "first prompt"},
        {"role": "user", "content": "second prompt"},
    )
    after = load_history(transcript)
    assert [m["content"] for m in after.messages] == [
        "first prompt",
        "second prompt",
        [{"type": "text", "text": "answer two"}],
    ], "the new entries start a line of their own and chain to the last whole entry"


def test_a_torn_result_line_resumes_the_whole_history(tmp_path: Path) -> None:
    session_id = first_run(tmp_path)
    transcript = paths(tmp_path, session_id).transcript
    _tear_last_line(transcript, 30)
    with MockApi(ANSWER_TWO) as api:
        run = run_cli(["-r", session_id, "-p", "second prompt", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert [m["content"] for m in api.requests[0].messages][::2] == ["first prompt", "second prompt"]


@pytest.mark.parametrize("fmt", ["stream-json", "text"])
def test_a_torn_last_line_is_reported_on_stderr(tmp_path: Path, fmt: str) -> None:
    session_id = first_run(tmp_path)
    _tear_last_line(paths(tmp_path, session_id).transcript, 30)
    with MockApi(ANSWER_TWO) as api:
        run = run_cli(["-r", session_id, "-p", "again", "--model", "mock-primary"], api=api, cwd=tmp_path, fmt=fmt)
    assert run.returncode == 0, run.stderr
    assert re.search(r"warning:.*torn last line", run.stderr), run.stderr


def test_text_verbose_reports_the_torn_last_line_on_stderr(tmp_path: Path) -> None:
    session_id = first_run(tmp_path)
    _tear_last_line(paths(tmp_path, session_id).transcript, 30)
    with MockApi(ANSWER_TWO) as api:
        run = run_cli(
            ["-r", session_id, "-p", "again", "--model", "mock-primary", "--verbose"], api=api, cwd=tmp_path, fmt="text"
        )
    assert run.returncode == 0, run.stderr
    assert re.search(r"warning:.*torn last line", run.stderr), run.stderr


# ---- queryloop sessions -------------------------------------------------------------------------


def test_sessions_lists_this_directory_s_sessions_newest_first_with_how_they_ended_and_cost(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    work = tmp_path / "work"
    work.mkdir()
    elsewhere.mkdir()
    first_run(elsewhere)  # another directory's session is not listed
    with MockApi(ANSWER_ONE) as api:
        good = run_cli(["-p", "fine", "--model", "mock-primary"], api=api, cwd=work)
    bad_text = scenario("""  mock-primary:
    - error: {status: 400, message: "this request is malformed"}
""")
    with MockApi(bad_text) as api:
        bad = run_cli(["-p", "broken", "--model", "mock-primary"], api=api, cwd=work)
    assert good.returncode == 0 and bad.returncode == 1
    good_id, bad_id = str(good.result["session_id"]), str(bad.result["session_id"])

    def rows() -> list[list[str]]:
        listed = queryloop(["sessions"], cwd=work)
        assert listed.returncode == 0, listed.stderr
        lines = listed.stdout.splitlines()
        assert lines[0].split() == ["SESSION", "STARTED", "RUNS", "TURNS", "COST", "AGENTS", "ENDED"]
        return [line.split() for line in lines[1:]]

    table = rows()
    assert [r[0] for r in table] == [bad_id, good_id], "newest first; only this directory's"
    assert table[1][6] == good.result["terminal_reason"] == "completed"
    assert table[0][6] == bad.result["terminal_reason"]
    assert table[0][5] == table[1][5] == "0", "no sub-agents"
    assert table[1][4] == f"${good.result['total_cost_usd']:.4f}"
    assert table[1][2:4] == ["1", str(good.result["num_turns"])]
    # resuming the older one makes it the newest
    with MockApi(ANSWER_TWO) as api:
        again = run_cli(["-r", good_id, "-p", "more", "--model", "mock-primary"], api=api, cwd=work)
    assert again.returncode == 0, again.stderr
    table = rows()
    assert [r[0] for r in table] == [good_id, bad_id]
    assert table[0][2] == "2", "two runs (user prompts) in the session"
    assert table[0][4] == f"${good.result['total_cost_usd'] + again.result['total_cost_usd']:.4f}"
    # --cwd lists another directory's
    listed = queryloop(["sessions", "--cwd", str(elsewhere)], cwd=work)
    assert listed.returncode == 0 and len(listed.stdout.splitlines()) == 2


def test_sessions_with_none_says_so_on_stderr(tmp_path: Path) -> None:
    listed = queryloop(["sessions"], cwd=tmp_path)
    assert listed.returncode == 0 and listed.stdout == ""
    assert "no sessions" in listed.stderr


# ---- queryloop rewind ---------------------------------------------------------------------------

NOTES = "héllo\r\nold line\nno newline at the end".encode()
BLOB = b"\xff\x00abc"

CHANGES = scenario("""  mock-primary:
    - reply: {content: [
        {tool_use: {id: toolu_r_edit, name: Edit,
                    input: {file_path: notes.txt, old_string: "old line", new_string: "new line"}}},
        {tool_use: {id: toolu_r_blob, name: Write, input: {file_path: blob.bin, content: "text now\\n"}}},
        {tool_use: {id: toolu_r_new, name: Write, input: {file_path: sub/created.txt, content: "made by the run\\n"}}}]}
    - reply: {content: [{tool_use: {id: toolu_r_bash, name: Bash, input: {command: "echo deployed >> deploy.log"}}}]}
    - reply: {content: [{text: "Changed."}]}
""")


def snapshot(work: Path) -> dict[str, bytes]:
    return {str(p.relative_to(work)): p.read_bytes() for p in sorted(work.rglob("*")) if p.is_file()}


def changed_session(work: Path) -> str:
    (work / "notes.txt").write_bytes(NOTES)
    (work / "blob.bin").write_bytes(BLOB)
    with MockApi(CHANGES) as api:
        run = run_cli(["-p", "change things", "--model", "mock-primary"], api=api, cwd=work)
    assert run.returncode == 0, run.stderr
    assert_ledger_closed(api.requests)
    assert (work / "notes.txt").read_bytes() == NOTES.replace(b"old line", b"new line")
    assert (work / "blob.bin").read_bytes() == b"text now\n"
    assert (work / "sub" / "created.txt").is_file() and (work / "deploy.log").read_text() == "deployed\n"
    return str(run.result["session_id"])


def test_rewind_dry_run_shows_the_diff_and_what_it_cannot_undo_and_changes_nothing(tmp_path: Path) -> None:
    session_id = changed_session(tmp_path)
    before_files, before_home = snapshot(tmp_path), snapshot(home())
    done = queryloop(["rewind", session_id, "--dry-run"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    notes = tmp_path.resolve() / "notes.txt"
    assert f"--- {notes} (now)" in out and f"+++ {notes} (restored)" in out
    assert "-new line\n" in out and "+old line\n" in out
    assert f"--- {tmp_path.resolve() / 'sub' / 'created.txt'} (now)" in out and "+++ /dev/null" in out
    assert "cannot undo" in out and "echo deployed >> deploy.log" in out and "toolu_r_bash" in out
    assert "dry run: nothing was changed" in out
    assert snapshot(tmp_path) == before_files
    assert snapshot(home()) == before_home


def test_rewind_restores_the_exact_bytes_removes_created_files_and_lists_the_bash_call(tmp_path: Path) -> None:
    session_id = changed_session(tmp_path)
    with MockApi(ANSWER_ONE) as api:  # a live server and credentials in the environment: still no request
        done = queryloop(["rewind", session_id], cwd=tmp_path, ANTHROPIC_BASE_URL=api.url, ANTHROPIC_API_KEY="test-key")
        assert list(api.server.requests) == [], "rewind sends no model request"
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "notes.txt").read_bytes() == NOTES
    assert (tmp_path / "blob.bin").read_bytes() == BLOB
    assert not (tmp_path / "sub" / "created.txt").exists()
    assert not (tmp_path / "deploy.log").exists(), "the file a Bash redirection created is checkpointed too"
    out = done.stdout
    undo = out[out.index("cannot undo") :].splitlines()
    listed = [line for line in undo[1:] if line.startswith("  - ")]
    assert len(listed) == 1 and "Bash" in listed[0] and "toolu_r_bash" in listed[0], out
    assert "toolu_r_edit" not in "".join(listed) and "toolu_r_new" not in "".join(listed)
    assert f"removed {tmp_path.resolve() / 'sub' / 'created.txt'}" in out
    assert f"removed {tmp_path.resolve() / 'deploy.log'}" in out
    assert f"restored {tmp_path.resolve() / 'notes.txt'}" in out
    # nothing left to do: a second rewind restores nothing
    again = queryloop(["rewind", session_id], cwd=tmp_path)
    assert again.returncode == 0 and "0 file(s) to restore" in again.stdout


def test_rewind_of_an_unknown_session_says_so(tmp_path: Path) -> None:
    unknown = str(uuid.uuid4())
    done = queryloop(["rewind", unknown], cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.strip() == f"No conversation found with session ID: {unknown}"


def test_rewind_to_the_second_prompt_undoes_only_the_resumed_run_s_changes(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_bytes(b"v0\n")
    run1 = scenario("""  mock-primary:
    - reply: {content: [{tool_use: {id: toolu_one_edit, name: Edit,
                                    input: {file_path: notes.txt, old_string: "v0", new_string: "v1"}}}]}
    - reply: {content: [{tool_use: {id: toolu_one_bash, name: Bash, input: {command: "echo one >> deploy.log"}}}]}
    - reply: {content: [{text: "first done"}]}
""")
    run2 = scenario("""  mock-primary:
    - reply: {content: [{tool_use: {id: toolu_two_edit, name: Edit,
                                    input: {file_path: notes.txt, old_string: "v1", new_string: "v2"}}}]}
    - reply: {content: [{tool_use: {id: toolu_two_new, name: Write, input: {file_path: second.txt, content: "2\\n"}}}]}
    - reply: {content: [{tool_use: {id: toolu_two_bash, name: Bash, input: {command: "echo two >> deploy.log"}}}]}
    - reply: {content: [{text: "second done"}]}
""")
    session_id = first_run(tmp_path, "first prompt", run1)
    with MockApi(run2) as api:
        run = run_cli(["-r", session_id, "-p", "second prompt", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "notes.txt").read_bytes() == b"v2\n" and (tmp_path / "second.txt").exists()
    transcript = paths(tmp_path, session_id).transcript
    second = [e for e in entries(transcript) if e["type"] == "user" and e["message"]["content"] == "second prompt"]
    assert len(second) == 1
    done = queryloop(["rewind", session_id, "--to", second[0]["uuid"]], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "notes.txt").read_bytes() == b"v1\n", "back to the state after the first run"
    assert not (tmp_path / "second.txt").exists()
    assert (tmp_path / "deploy.log").read_text() == "one\n", "the redirection's file went back with the prompt"
    assert "toolu_two_bash" in done.stdout and "toolu_one_bash" not in done.stdout, "what else Bash did is listed"
    # the default goes back before the session's first change
    done = queryloop(["rewind", session_id], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "notes.txt").read_bytes() == b"v0\n"
    assert "toolu_one_bash" in done.stdout and "toolu_two_bash" in done.stdout


def test_rewind_to_a_message_that_is_not_a_prompt_is_refused(tmp_path: Path) -> None:
    session_id = changed_session(tmp_path)
    before = snapshot(tmp_path)
    done = queryloop(["rewind", session_id, "--to", str(uuid.uuid4())], cwd=tmp_path)
    assert done.returncode == 1 and "no user message" in done.stderr
    assert snapshot(tmp_path) == before


# ---- more edges -------------------------------------------------------------------------------


def test_resume_with_no_session_persistence_sends_the_history_and_writes_nothing(tmp_path: Path) -> None:
    session_id = first_run(tmp_path)
    before = snapshot(home())
    with MockApi(ANSWER_TWO) as api:
        run = run_cli(
            ["-r", session_id, "--no-session-persistence", "-p", "second prompt", "--model", "mock-primary"],
            api=api,
            cwd=tmp_path,
        )
    assert run.returncode == 0, run.stderr
    assert [m["content"] for m in api.requests[0].messages][::2] == ["first prompt", "second prompt"]
    assert snapshot(home()) == before, "nothing is written: the stored session is as it was"


def test_a_hook_of_a_run_resumed_from_another_directory_gets_the_stored_transcript_s_path(tmp_path: Path) -> None:
    first, elsewhere = tmp_path / "first", tmp_path / "elsewhere"
    first.mkdir()
    elsewhere.mkdir()
    session_id = first_run(first)
    probe = (
        "import json, os, sys; d = json.load(sys.stdin); "
        "d['exists'] = os.path.isfile(d['transcript_path']); open('stop.json', 'w').write(json.dumps(d))"
    )
    hook = f"{sys.executable} -c {json.dumps(probe)}"
    settings = json.dumps({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": hook}]}]}})
    with MockApi(ANSWER_TWO) as api:
        run = run_cli(
            ["-r", session_id, "-p", "again", "--model", "mock-primary", "--settings", settings],
            api=api,
            cwd=elsewhere,
        )
    assert run.returncode == 0, run.stderr
    seen = json.loads((elsewhere / "stop.json").read_text())
    assert seen["transcript_path"] == str(paths(first, session_id).transcript)
    assert seen["exists"] is True


def test_a_rewind_past_the_checkpoint_limit_says_so_and_restores_what_it_still_has(tmp_path: Path) -> None:
    (tmp_path / "first.txt").write_bytes(b"first original\n")
    (tmp_path / "many.txt").write_bytes(b"many original\n")
    text = scenario("""  mock-primary:
    - reply: {content: [{tool_use: {name: Write, input: {file_path: first.txt, content: "changed\\n"}}}]}
    - reply: {content: [{tool_use: {name: Write, input: {file_path: many.txt, content: "changed\\n"}}}]}
      repeat: 100
    - reply: {content: [{text: "done"}]}
""")
    with MockApi(text) as api:
        run = run_cli(["-p", "go", "--model", "mock-primary", "--max-turns", "200"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    checkpoints, _ = read_jsonl(paths(tmp_path, str(run.result["session_id"])).checkpoints)
    assert len([c for c in checkpoints if "path" in c]) == 100, "at most 100 checkpoints are kept"
    done = queryloop(["rewind", str(run.result["session_id"])], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "1 older checkpoint(s) were dropped" in done.stdout
    assert (tmp_path / "many.txt").read_bytes() == b"many original\n"
    assert (tmp_path / "first.txt").read_bytes() == b"changed\n", "its checkpoint was dropped: left as it is"
