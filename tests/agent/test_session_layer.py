"""The session layer's parts on a real temporary filesystem: its logs, checkpoints, ledger and session choice.

End-to-end runs (resume, kill -9, rewind through the CLI) are in ``tests/e2e``; these pin
the rules each part keeps on its own: a torn or unreadable line is skipped with a warning,
a checkpoint keeps exact bytes (or absence) and at most its limit, a completed call is
"hidden" only when no message holds its result any more, and the session flags follow
Claude Code 2.1.235's rules and messages.
"""

from __future__ import annotations

import json
import os
import uuid
import weakref
from pathlib import Path

import attrs
import pytest

from queryloop.handlers.context.services import compaction
from queryloop.handlers.context.services.compaction import plan_clearing
from queryloop.handlers.messages import MessageView, ToolCall
from queryloop.handlers.request.services import media
from queryloop.handlers.request.services.media import media_totals
from queryloop.handlers.session import (
    CheckpointStore,
    LedgerEntry,
    SessionData,
    SessionPaths,
    encode_cwd,
    hidden_calls,
    input_hash,
    matching_entry,
    replayed_result,
)
from queryloop.handlers.session.services import ledger as ledger_module
from queryloop.handlers.session.services.store import JsonlLog, read_jsonl
from queryloop.handlers.session.services.transcript import INTERRUPTED_BEFORE_RECORDED, answer_dangling, load_history
from queryloop.run.sessions import SessionChoiceError, apply_rewind, choose_session, plan_rewind


def _paths(tmp_path: Path, session_id: str | None = None) -> SessionPaths:
    cwd = tmp_path / "work"
    cwd.mkdir(exist_ok=True)
    return SessionPaths(home=tmp_path / "home", cwd=cwd, session_id=session_id or str(uuid.uuid4()))


# ---- JSON Lines --------------------------------------------------------------------------------


def test_a_torn_last_line_is_skipped_with_a_warning_and_the_next_entry_starts_a_line_of_its_own(
    tmp_path: Path,
) -> None:
    path = tmp_path / "log.jsonl"
    log = JsonlLog(path)
    log.append({"n": 1})
    log.close()
    with path.open("ab") as f:
        f.write(b'{"n": 2, "cut')  # a kill -9 while writing
    entries, warnings = read_jsonl(path)
    assert entries == [{"n": 1}] and len(warnings) == 1 and "torn last line" in warnings[0]
    log = JsonlLog(path)
    log.append({"n": 3})
    log.close()
    entries, warnings = read_jsonl(path)
    assert entries == [{"n": 1}, {"n": 3}], "the torn bytes stay a line of their own, never glued to the next"
    assert len(warnings) == 1 and ":2:" in warnings[0], "now an unreadable line in the middle"


def test_a_missing_log_reads_as_empty(tmp_path: Path) -> None:
    assert read_jsonl(tmp_path / "none.jsonl") == ([], [])


def test_a_log_that_is_a_fifo_or_a_symlink_loop_reads_as_empty_with_a_warning_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo.jsonl")
    (tmp_path / "loop.jsonl").symlink_to("loop.jsonl")
    assert read_jsonl(tmp_path / "fifo.jsonl") == (
        [],
        [f"skipped {tmp_path / 'fifo.jsonl'}: is a FIFO (named pipe), not a regular file"],
    )
    assert read_jsonl(tmp_path / "loop.jsonl") == (
        [],
        [f"skipped {tmp_path / 'loop.jsonl'}: is a symlink loop (too many levels of symbolic links)"],
    )


def test_the_cwd_is_encoded_as_claude_code_names_its_project_folders() -> None:
    assert encode_cwd(Path("/tmp/refprobe/enc/a.b_c d/e-f~g+h@i")) == "-tmp-refprobe-enc-a-b-c-d-e-f-g-h-i"
    long = encode_cwd(Path("/tmp/refprobe/enc/" + "x" * 230 + "/deep"))
    assert len(long) == 207 and long.endswith("-h6l091"), "200 characters, then a hash of the raw path"


# ---- checkpoints -------------------------------------------------------------------------------


def test_a_checkpoint_keeps_exact_bytes_and_absence_and_a_rewind_puts_them_back(tmp_path: Path) -> None:
    paths = _paths(tmp_path)
    store = CheckpointStore(paths)
    binary, created = paths.cwd / "b.bin", paths.cwd / "new.txt"
    binary.write_bytes(b"\xff\x00abc\n")
    store.save(prompt_id="p1", tool_use_id="t1", files=[binary])
    store.save(prompt_id="p1", tool_use_id="t2", files=[created])
    binary.write_bytes(b"changed")
    created.write_text("made")
    plan = plan_rewind(paths)
    assert {f.path.name: f.before for f in plan.files} == {"b.bin": b"\xff\x00abc\n", "new.txt": None}
    apply_rewind(plan)
    assert binary.read_bytes() == b"\xff\x00abc\n" and not created.exists()


def test_past_the_limit_the_oldest_checkpoints_are_dropped_and_a_rewind_says_it_is_incomplete(
    tmp_path: Path,
) -> None:
    paths = _paths(tmp_path)
    store = CheckpointStore(paths, limit=3)
    target = paths.cwd / "f.txt"
    for n in range(5):
        target.write_text(f"v{n}")
        store.save(prompt_id="p1", tool_use_id=f"t{n}", files=[target])
    entries, dropped, _ = store.entries()
    assert [e.seq for e in entries] == [3, 4, 5] and dropped == 2
    assert len(list(paths.blobs.iterdir())) == 3, "blobs nothing refers to are removed"
    plan = plan_rewind(paths)
    assert plan.incomplete and plan.dropped == 2
    assert plan.files[0].before == b"v2", "the oldest state still kept"


def test_a_checkpoint_of_a_directory_is_an_error_not_a_silent_gap(tmp_path: Path) -> None:
    paths = _paths(tmp_path)
    with pytest.raises(OSError, match="directory"):
        CheckpointStore(paths).save(prompt_id="p", tool_use_id="t", files=[paths.cwd])


# ---- the ledger --------------------------------------------------------------------------------


def _entry(tool_use_id: str, command: str, prompt_id: str = "p1") -> LedgerEntry:
    tool_input = {"command": command}
    return LedgerEntry(
        tool_use_id=tool_use_id,
        name="Bash",
        input_hash=input_hash("Bash", tool_input),
        input=tool_input,
        result={"type": "tool_result", "tool_use_id": tool_use_id, "content": "dep-42", "is_error": False},
        prompt_id=prompt_id,
    )


def test_a_completed_call_is_hidden_only_once_no_message_holds_its_result_and_only_in_its_user_turn() -> None:
    session = SessionData(prompt_id="p1", ledger=(_entry("a", "deploy"), _entry("b", "other"), _entry("c", "x", "p0")))
    shown = [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "b", "content": ""}]}]
    assert [e.tool_use_id for e in hidden_calls(session, shown)] == ["a"], "b is visible, c is an earlier turn's"


def test_a_call_a_resume_recovered_from_the_ledger_is_hidden_in_the_resumed_turn_though_its_result_is_shown() -> None:
    """The process died before the transcript held its result: the resumed run (a new prompt) still counts it."""
    session = SessionData(prompt_id="p2", ledger=(_entry("a", "deploy", "p1"), _entry("b", "ls", "p1")))
    shown = [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "dep-42"}]}]
    assert hidden_calls(session, shown) == [], "an earlier turn's calls, not recovered"
    recovered = attrs.evolve(session, recovered=frozenset({"a"}))
    assert [e.tool_use_id for e in hidden_calls(recovered, shown)] == ["a"]


def _result(tool_use_id: str) -> dict[str, object]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use_id, "content": "ok"}]}


def test_what_the_layers_work_out_about_a_history_is_kept_with_it_and_no_module_keeps_a_table_of_histories() -> None:
    """The ledger's hidden calls, the media totals and the clearing plan remember what they found for a
    history: in that history's own memos (gone with the run's views), never in a table the process keeps."""
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    view = MessageView.of([{"role": "user", "content": [{"type": "text", "text": "go"}, image]}])
    view = view.append({"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "Read", "input": {}}]})
    view = view.append(_result("a"))
    assert hidden_calls(SessionData(prompt_id="p1", ledger=(_entry("a", "deploy"),)), view) == []
    assert media_totals(view) == (1, 4)
    assert not plan_clearing(view).tool_use_ids
    assert len(view.memos) == 4, "the ledger's check, the media totals, the clearable results and their fold"
    longer = view.append({"role": "assistant", "content": [{"type": "text", "text": "done"}]})
    assert longer.memos is view.memos, "a longer view of the same history extends what was found"
    assert MessageView.of(view.to_list()).memos == {}, "another history starts with none"
    tables = [
        f"{module.__name__}.{name}"
        for module in (compaction, ledger_module, media)
        for name, value in vars(module).items()
        if isinstance(value, weakref.WeakKeyDictionary)
    ]
    assert tables == []


def test_the_history_checked_turn_by_turn_gives_what_a_check_from_scratch_gives() -> None:
    """hidden_calls remembers what it found for a history and looks only at what is new; it must agree with the
    list it is given (checked from scratch) as the history grows, branches and is rebuilt."""
    view, ledger = MessageView.of([{"role": "user", "content": "go"}]), ()

    def agree(view: MessageView, ledger: tuple[LedgerEntry, ...], expected: list[str]) -> None:
        session = SessionData(prompt_id="p1", ledger=ledger)
        assert [e.tool_use_id for e in hidden_calls(session, view)] == expected
        assert [e.tool_use_id for e in hidden_calls(session, view.to_list())] == expected

    for n in range(3):  # each call recorded, then its result appended: nothing hidden
        ledger = (*ledger, _entry(f"t{n}", f"cmd {n}"))
        agree(view, ledger, [f"t{n}"])  # recorded, its result not appended yet
        view = view.append(_result(f"t{n}"))
        agree(view, ledger, [])
    earlier = view
    ledger = (*ledger, _entry("t3", "cmd 3"))
    view = view.append({"role": "assistant", "content": "no result for t3"})
    agree(view, ledger, ["t3"])
    view = view.append(_result("t3"))
    agree(view, ledger, [])
    agree(earlier, ledger, ["t3"])  # an earlier view of the same history still lacks it
    branch = earlier.append(_result("t9"))  # a branch copies its prefix
    agree(branch, ledger, ["t3"])
    rebuilt = MessageView.of([{"role": "user", "content": "summary"}, _result("t1")])  # a compaction
    agree(rebuilt, ledger, ["t0", "t2", "t3"])


def test_an_identical_call_matches_its_hidden_entry_and_gets_the_recorded_result_marked() -> None:
    hidden = [_entry("a", "deploy")]
    again = ToolCall(id="z", name="Bash", input={"command": "deploy"})
    assert matching_entry(again, hidden) == hidden[0]
    assert matching_entry(ToolCall(id="y", name="Bash", input={"command": "deploy "}), hidden) is None
    result = replayed_result(again, hidden[0])
    assert result["tool_use_id"] == "z" and result["is_error"] is False
    assert result["content"].startswith("Not run again") and result["content"].endswith("dep-42")


def test_dangling_calls_get_the_ledger_result_when_recorded_else_the_interrupted_error() -> None:
    history = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "a", "name": "Bash", "input": {"command": "deploy"}},
                {"type": "tool_use", "id": "b", "name": "Bash", "input": {"command": "sleep 9"}},
            ],
        },
    ]
    answers, found = answer_dangling(history, [_entry("a", "deploy")])
    assert found == ("a",)
    assert answers[0]["content"] == "dep-42" and answers[1]["content"] == INTERRUPTED_BEFORE_RECORDED
    assert answer_dangling(history[:1], []) == ([], ())


# ---- the transcript read back ------------------------------------------------------------------


def test_history_is_the_chain_from_the_newest_leaf_to_its_compact_boundary_past_tombstones(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    lines = [
        {"type": "user", "uuid": "1", "parentUuid": None, "message": {"role": "user", "content": "old"}},
        {"type": "assistant", "uuid": "2", "parentUuid": "1", "message": {"role": "assistant", "content": "a"}},
        {"type": "system", "subtype": "compact_boundary", "uuid": "3", "parentUuid": None, "logicalParentUuid": "2"},
        {"type": "user", "uuid": "4", "parentUuid": "3", "message": {"role": "user", "content": "summary"}},
        {"type": "tombstone", "uuid": "5", "parentUuid": "4", "message": {"role": "assistant", "content": "cut"}},
        {"type": "assistant", "uuid": "6", "parentUuid": "4", "message": {"role": "assistant", "content": "b"}},
        {"type": "user", "uuid": "7", "parentUuid": "6", "isMeta": True, "message": {"role": "user", "content": "m"}},
        {"type": "system", "subtype": "result", "uuid": "8", "parentUuid": "7"},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    history = load_history(path)
    assert [m["content"] for m in history.messages] == ["summary", "b", "m"]
    assert history.meta == (False, False, True) and history.leaf == "7" and history.warnings == ()


# ---- choosing the session ----------------------------------------------------------------------


def _stored(home: Path, cwd: Path, session_id: str, *, project: str | None = None) -> None:
    paths = SessionPaths(home=home, cwd=cwd, session_id=session_id, project_name=project)
    paths.transcript.parent.mkdir(parents=True, exist_ok=True)
    paths.transcript.write_text('{"type": "user"}\n')


def test_resume_keeps_the_id_and_finds_a_session_of_another_directory(tmp_path: Path) -> None:
    home, cwd, sid = tmp_path / "home", tmp_path, str(uuid.uuid4())
    _stored(home, cwd, sid, project="-elsewhere")
    choice = choose_session(cwd=cwd, resume=sid, home=home)
    assert choice.session_id == sid and choice.resume_from == choice.stored_as and choice.start_source == "resume"
    assert choice.stored_as.project.name == "-elsewhere", "appended where it was started"


def test_fork_gets_a_new_id_here_and_continue_takes_the_newest(tmp_path: Path) -> None:
    home, cwd = tmp_path / "home", tmp_path
    old, new = str(uuid.uuid4()), str(uuid.uuid4())
    _stored(home, cwd, old)
    _stored(home, cwd, new)
    stamp = SessionPaths(home=home, cwd=cwd, session_id=old).transcript
    os.utime(stamp, (1, 1))
    assert choose_session(cwd=cwd, continue_=True, home=home).session_id == new
    fork = choose_session(cwd=cwd, resume=old, fork=True, home=home)
    assert fork.session_id not in (old, new) and fork.resume_from is not None
    assert fork.resume_from.session_id == old and fork.start_source == "fork"
    assert choose_session(cwd=tmp_path / "home", continue_=True, home=home).resume_from is None, "none: a new one"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"resume": str(uuid.UUID(int=1))}, f"No conversation found with session ID: {uuid.UUID(int=1)}"),
        ({"session_id": "nope"}, "Error: Invalid session ID. Must be a valid UUID."),
        ({"resume": "nope"}, 'Provided value "nope" is not a UUID'),
        (
            {"continue_": True, "session_id": str(uuid.UUID(int=2))},
            "Error: --session-id can only be used with --continue or --resume if --fork-session is also specified.",
        ),
    ],
)
def test_session_flags_refused_with_claude_codes_messages(
    tmp_path: Path, flags: dict[str, object], message: str
) -> None:
    with pytest.raises(SessionChoiceError) as info:
        choose_session(cwd=tmp_path, home=tmp_path / "home", **flags)  # type: ignore[arg-type]
    assert message in str(info.value)


def test_a_session_id_in_use_here_is_refused(tmp_path: Path) -> None:
    sid = str(uuid.uuid4())
    _stored(tmp_path / "home", tmp_path, sid)
    with pytest.raises(SessionChoiceError, match=f"Error: Session ID {sid} is already in use."):
        choose_session(cwd=tmp_path, session_id=sid, home=tmp_path / "home")
