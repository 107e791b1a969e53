"""Hostile inputs that are not commands: JSON too deep or too long, terminal escapes, MCP names, crafted sessions.

Each test names what someone else controls — a settings file, a transcript line, the
model's text, an MCP server's name or listing, a checkpoint index on disk — and checks
that it gives one clear line, is shown rather than obeyed, or changes nothing. The parts
are real: the readers, the renderer writing to buffers, a real MCP server over stdio,
real files. The same inputs through the CLI are in ``tests/e2e/test_hostile_inputs_e2e.py``.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import sys
import uuid
from pathlib import Path

import pytest

from queryloop.frontends.console import Renderer, renderer_for
from queryloop.fsm import SpecError, read_json
from queryloop.fsm.model.jsontext import MAX_JSON_DEPTH, JsonLimitError, loads_json
from queryloop.fsm.terminal import inert
from queryloop.handlers.mcp import McpConfigError, McpManager, parse_mcp_servers, server_name_problem, tool_name
from queryloop.handlers.messages import ToolCall
from queryloop.handlers.outcome import Notice
from queryloop.handlers.request import TextDelta
from queryloop.handlers.session import SessionPaths, is_session_id
from queryloop.handlers.session.services.store import read_jsonl
from queryloop.handlers.session.services.transcript import load_history
from queryloop.handlers.tools import ToolResultPublished
from queryloop.run.mcp_config import load_mcp_servers
from queryloop.run.sessions import SessionChoiceError, apply_rewind, choose_session, plan_rewind
from queryloop.run.settings import SettingsError, load_settings

ROOT = Path(__file__).resolve().parent.parent.parent
FLAKY = ROOT / "tests" / "fixtures" / "mcp" / "flaky_server.py"


def nested(depth: int) -> str:
    """A JSON object ``depth`` levels deep: {"a": {"a": ... 1 ...}}."""
    return '{"a":' * depth + "1" + "}" * depth


# ---- JSON: nesting and long numbers ----------------------------------------------------------------


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 3_000, 200_000])
def test_json_nested_past_the_limit_is_one_error_at_its_place_never_a_recursion_error(depth: int) -> None:
    with pytest.raises(JsonLimitError) as caught:
        loads_json(nested(depth))
    assert caught.value.msg == f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
    assert (caught.value.lineno, caught.value.pos) == (1, len('{"a":') * MAX_JSON_DEPTH), "the first level too many"


def test_json_nested_to_the_limit_is_read_and_brackets_inside_strings_do_not_count() -> None:
    assert loads_json("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH) is not None
    text = json.dumps({"text": "[{" * 10_000, "escaped": '\\"[[[' * 500})
    assert loads_json(text)["text"] == "[{" * 10_000
    assert loads_json(text.encode("utf-8")) == loads_json(text), "bytes are read as json.loads reads them"


def test_an_integer_past_pythons_digit_limit_is_one_error_naming_its_place() -> None:
    text = '{"ok": 1.' + "5" * 6_000 + ', "n": [1,\n -' + "9" * 5_000 + "]}"
    with pytest.raises(JsonLimitError) as caught:
        loads_json(text)
    assert caught.value.msg == "a number 5000 digits long (integers are read up to 4300 digits)"
    assert (caught.value.lineno, caught.value.colno) == (2, 2), "at the number, not at the long fraction before it"
    assert isinstance(caught.value, ValueError), "every reader that handles bad JSON handles this too"


def test_a_surrogate_alone_is_read_as_the_replacement_character_and_a_pair_as_its_character() -> None:
    text = r'{"k\ud800": ["a\udc00b", "\ud83d\ude00", "\\ud800"]}'
    assert loads_json(text) == {"k\ufffd": ["a\ufffdb", "\U0001f600", "\\ud800"]}
    assert loads_json('"x\ud800"'.encode("utf-8", "surrogatepass")) == "x\ufffd", "raw, from bytes"


def test_the_docs_state_the_depth_limit_the_reader_keeps() -> None:
    page = " ".join((ROOT / "docs" / "internals.md").read_text(encoding="utf-8").split())
    assert f"nested at most {MAX_JSON_DEPTH} levels" in page


def test_a_long_fraction_or_exponent_is_still_a_number() -> None:
    assert loads_json("[1." + "0" * 6_000 + ", 1e" + "0" * 6_000 + "5]") == [1.0, 1e5]


@pytest.mark.parametrize(
    ("text", "where", "what"),
    [
        (nested(5_000), "cfg.json:1:501", "JSON nested deeper than 100 levels"),
        ('{\n  "x": [\n    ' + "7" * 4_500 + "]}", "cfg.json:3:5", "a number 4500 digits long"),
    ],
    ids=["deep", "long-number"],
)
def test_the_declaration_reader_reports_a_limit_as_a_problem_at_its_line(text: str, where: str, what: str) -> None:
    with pytest.raises(SpecError) as caught:
        read_json(text, "cfg.json")
    assert str(caught.value.first).startswith(f"{where}: {what}")


def test_a_settings_file_nested_too_deep_is_one_line_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / ".queryloop").mkdir()
    (tmp_path / ".queryloop" / "settings.json").write_text('{"env": ' + nested(400) + "}")
    with pytest.raises(SettingsError) as caught:
        load_settings(cwd=tmp_path, home=tmp_path / "home")
    message = str(caught.value)
    assert message.startswith(".queryloop/settings.json:1:") and "nested deeper than 100 levels" in message
    assert "\n" not in message


def test_inline_settings_with_a_number_too_long_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(cwd=tmp_path, home=tmp_path / "home", settings_arg='{"model": ' + "1" * 9_999 + "}")
    assert str(caught.value).startswith("--settings:1:11: a number 9999 digits long")


@pytest.mark.parametrize(
    "document",
    [nested(2_000), '{"mcpServers": {"s": {"command": "x", "n": ' + "2" * 5_000 + "}}}"],
    ids=["deep", "long-number"],
)
def test_an_mcp_config_past_the_limits_is_a_config_error_naming_the_flag(tmp_path: Path, document: str) -> None:
    with pytest.raises(McpConfigError) as caught:
        load_mcp_servers(cwd=tmp_path, settings={}, mcp_config=[document])
    assert str(caught.value).startswith("--mcp-config:1:")


def test_a_transcript_line_nested_too_deep_is_skipped_with_a_note_and_the_history_resumes_around_it(
    tmp_path: Path,
) -> None:
    user = {"type": "user", "uuid": "u1", "parentUuid": None, "message": {"role": "user", "content": "hi"}}
    deep = '{"type": "assistant", "uuid": "x", "message": ' + nested(5_000) + "}"
    big = '{"type": "system", "n": ' + "3" * 5_000 + "}"
    answer = {"type": "assistant", "uuid": "a1", "parentUuid": "u1", "message": {"role": "assistant", "content": "ok"}}
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join([json.dumps(user), deep, big, json.dumps(answer)]) + "\n")
    history = load_history(path)
    assert [m["content"] for m in history.messages] == ["hi", "ok"]
    assert history.warnings == (
        f"{path}:2: skipped a line that cannot be read safely: JSON nested deeper than 100 levels",
        f"{path}:3: skipped a line that cannot be read safely: a number 5000 digits long "
        "(integers are read up to 4300 digits)",
    )


def test_a_log_line_that_is_not_utf8_is_still_only_skipped(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    path.write_bytes(b'{"a": 1}\n{"b": "\xff\xfe"}\n')
    assert read_jsonl(path) == ([{"a": 1}], [f"{path}:2: skipped a line that is not a JSON object"])


# ---- terminal escapes ---------------------------------------------------------------------------------

ESCAPES = "clear\x1b[2J title\x1b]0;pwned\x07 clip\x1b]52;c;cm0gLXJmIH4=\x1b\\ csi\x9b31m del\x7f nul\x00 back\x08"


def test_every_control_but_newline_and_tab_is_shown_not_obeyed() -> None:
    shown = inert(ESCAPES + "\ttab\nline\r\nwindows\rover")
    assert shown == (
        "clear\\x1b[2J title\\x1b]0;pwned\\x07 clip\\x1b]52;c;cm0gLXJmIH4=\\x1b\\ csi\\x9b31m del\\x7f nul\\x00 "
        "back\\x08\ttab\nline\nwindows\\x0dover"
    )
    assert all(ch.isprintable() or ch in "\n\t" for ch in shown)


def test_plain_text_passes_through_unchanged() -> None:
    text = "naïve café — 日本語 ✓ [/x] :smile:"
    assert inert(text) is text


def _renderer(fmt: str) -> tuple[Renderer, io.StringIO, io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    return renderer_for(fmt, session_id="s", verbose=True, stdout=out, stderr=err), out, err


def test_text_output_shows_the_escapes_in_model_text_tool_output_and_warnings() -> None:
    renderer, out, err = _renderer("text")
    renderer.observe(TextDelta(f"answer {ESCAPES}\n"))
    call = ToolCall(id="t1", name="mcp__srv__read", input={})
    renderer.observe(ToolResultPublished(call=call, result={"tool_use_id": "t1", "content": ESCAPES}))
    renderer.observe(Notice(f"warning: MCP server 'srv' server failure: {ESCAPES}"))
    for stream in (out.getvalue(), err.getvalue()):
        assert not any(ch in stream for ch in "\x1b\x07\x9b\x00\x08\x7f"), repr(stream)
    assert "answer clear\\x1b[2J title\\x1b]0;pwned\\x07" in out.getvalue()
    assert "mcp__srv__read: clear\\x1b[2J" in err.getvalue() and "server failure: clear\\x1b[2J" in err.getvalue()


def test_json_output_keeps_the_text_exact_as_json_escapes() -> None:
    renderer, out, _ = _renderer("stream-json")
    call = ToolCall(id="t1", name="Bash", input={})
    renderer.observe(ToolResultPublished(call=call, result={"tool_use_id": "t1", "content": "a\x1b[2Jb"}))
    line = out.getvalue()
    assert "\x1b" not in line and "\\u001b[2J" in line
    assert json.loads(line)["tool_use_result"] == "a\x1b[2Jb", "the program reading JSON gets the bytes as they were"


# ---- MCP names ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "what"),
    [
        ("trusted__evil", "may not contain '__'"),
        ("trusted_", "may not end with '_'"),
        ("__x", "may not contain '__'"),
    ],
)
def test_a_server_name_that_could_pass_for_another_s_is_refused_naming_the_server_and_the_file(
    name: str, what: str
) -> None:
    with pytest.raises(McpConfigError) as caught:
        parse_mcp_servers({"mcpServers": {"ok": {"command": "a"}, name: {"command": "b"}}}, ".mcp.json")
    message = str(caught.value)
    assert message.startswith(f".mcp.json: at .mcpServers.{name}: server name {name!r}") and what in message
    with pytest.raises(McpConfigError):
        tool_name(name, "x")  # nothing declared some other way (the SDK's, the Python API's) names tools with it


def test_a_name_spelled_with_characters_the_api_refuses_is_judged_as_tool_names_spell_it() -> None:
    problem = server_name_problem("a._b")  # an in-process server's name: not held to the file schema
    assert problem is not None and "(written 'a__b' in tool names)" in problem and "mcp__a would cover" in problem


def test_no_two_accepted_server_names_share_a_tool_name_prefix() -> None:
    """Every server name accepted over a small alphabet, against every other: a tool of one never starts with
    the ``mcp__<other>__`` a permission rule ``mcp__<other>`` covers."""
    names = ["".join(p) for n in range(1, 5) for p in itertools.product("a_-", repeat=n)]
    accepted = [n for n in names if server_name_problem(n) is None]
    assert "a_a" in accepted and "-_a" in accepted and "a__a" not in accepted and "a_" not in accepted
    tools = ["".join(p) for n in range(1, 4) for p in itertools.product("a_-.", repeat=n)]
    for server, other in itertools.permutations(accepted, 2):
        prefix = f"mcp__{other}__"
        clash = next((t for t in tools if tool_name(server, t).startswith(prefix)), None)
        assert clash is None, f"{tool_name(server, str(clash))} would be covered by mcp__{other}"


def test_a_listed_tool_whose_name_another_tool_has_is_not_offered_and_said_once(tmp_path: Path) -> None:
    (tmp_path / "plan.json").write_text(json.dumps({"tools": ["echo", "note"]}))
    config = parse_mcp_servers(
        {"mcpServers": {"flaky": {"command": sys.executable, "args": [str(FLAKY), str(tmp_path)]}}}, "test"
    )["flaky"]
    taken = {"mcp__flaky__echo"}  # a custom tool, or an in-process server's, already has the name

    async def listing() -> tuple[list[str], list[str]]:
        manager = McpManager([config], cwd=tmp_path, taken=taken.__contains__)
        try:
            await manager.start()
            return [t.name for t in manager.catalog() if t.server], manager.take_warnings()  # the resource tools aside
        finally:
            await manager.close()

    offered, warnings = asyncio.run(listing())
    assert offered == ["mcp__flaky__note"]
    assert warnings == [
        "MCP server 'flaky': tool 'echo' is not offered: its name as offered, 'mcp__flaky__echo', is another "
        "tool's (a custom or in-process tool)"
    ]


# ---- sessions: ids and rewinds -----------------------------------------------------------------------

SID = "0c5a5e55-1de0-4c0d-9e55-c4a5bad5e551"


@pytest.mark.parametrize(
    "text",
    [SID.upper(), "{" + SID + "}", "urn:uuid:" + SID, SID.replace("-", ""), "../../etc/passwd", "", SID + "\n"],
)
def test_only_the_canonical_spelling_is_a_session_id(text: str) -> None:
    assert is_session_id(SID) and not is_session_id(text)


def test_a_uuid_in_another_spelling_is_refused_with_claude_code_s_words_and_the_canonical_one(tmp_path: Path) -> None:
    hint = f" Session IDs are written in lowercase 8-4-4-4-12 form: {SID}"
    with pytest.raises(SessionChoiceError) as resumed:
        choose_session(cwd=tmp_path, resume=SID.upper(), home=tmp_path)
    assert str(resumed.value) == (
        "Error: --resume requires a valid session ID when used with --print. "
        f'Provided value "{SID.upper()}" is not a UUID.' + hint
    )
    with pytest.raises(SessionChoiceError) as given:
        choose_session(cwd=tmp_path, session_id="{" + SID + "}", home=tmp_path)
    assert str(given.value) == "Error: Invalid session ID. Must be a valid UUID." + hint


def test_continue_ignores_transcripts_whose_names_are_not_session_ids(tmp_path: Path) -> None:
    home, cwd = tmp_path / "home", tmp_path / "work"
    cwd.mkdir()
    kept = SessionPaths(home=home, cwd=cwd.resolve(), session_id=SID)
    kept.transcript.parent.mkdir(parents=True)
    kept.transcript.write_text('{"type": "user"}\n')
    (kept.project / "..%2f..%2fescape.jsonl").write_text('{"type": "user"}\n')  # newer, and no session id
    assert choose_session(cwd=cwd, continue_=True, home=home).session_id == SID


def _session(tmp_path: Path, *checkpoints: dict[str, object]) -> SessionPaths:
    """A stored session of ``tmp_path/work`` with one prompt and the checkpoint index given."""
    cwd = (tmp_path / "work").resolve()
    cwd.mkdir(exist_ok=True)
    paths = SessionPaths(home=tmp_path / "home", cwd=cwd, session_id=str(uuid.uuid4()))
    paths.folder.mkdir(parents=True)
    prompt = {"type": "user", "uuid": "p1", "reason": "session_started", "message": {"role": "user", "content": "x"}}
    paths.transcript.write_text(json.dumps(prompt) + "\n")
    lines = [{"seq": i, "prompt_id": "p1", "tool_use_id": f"t{i}", **c} for i, c in enumerate(checkpoints, 1)]
    paths.checkpoints.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return paths


def test_a_checkpoint_naming_a_file_outside_the_project_refuses_the_rewind_and_changes_nothing(
    tmp_path: Path,
) -> None:
    victim = tmp_path / "outside" / "victim.txt"
    victim.parent.mkdir()
    victim.write_text("keep me\n")
    made = tmp_path / "work" / "new.txt"
    paths = _session(tmp_path, {"path": str(made), "blob": None})
    made.write_text("made by the session\n")
    with paths.checkpoints.open("a") as index:  # the crafted entry: "the session created victim.txt"
        index.write(json.dumps({"seq": 2, "prompt_id": "p1", "tool_use_id": "t2", "path": str(victim), "blob": None}))
        index.write("\n")
    with pytest.raises(SessionChoiceError) as caught:
        plan_rewind(paths)
    assert str(caught.value) == (
        f"rewind refused: checkpoint 2 in {paths.checkpoints} names {victim}, outside the working directory "
        f"{paths.cwd}; no file was changed"
    )
    assert victim.read_text() == "keep me\n" and made.exists(), "not even the file inside was touched"


def test_a_checkpoint_whose_folder_became_a_symlink_out_of_the_project_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text("theirs\n")
    paths = _session(tmp_path, {"path": str(tmp_path / "work" / "sub" / "f.txt"), "blob": None})
    (tmp_path / "work" / "sub").symlink_to(outside)  # made after the checkpoint, by a command
    with pytest.raises(SessionChoiceError, match=r"names .*sub/f\.txt \(resolving to .*outside/f\.txt\), outside"):
        plan_rewind(paths)
    assert (outside / "f.txt").read_text() == "theirs\n"


@pytest.mark.parametrize(
    ("entry", "what"),
    [
        ({"path": "work/relative.txt", "blob": None}, "which is not an absolute path"),
        ({"path": "{work}/a.txt", "blob": "../../../../etc/passwd"}, "names the blob '../../../../etc/passwd'"),
    ],
)
def test_a_checkpoint_entry_queryloop_never_writes_is_refused(
    tmp_path: Path, entry: dict[str, str | None], what: str
) -> None:
    entry = {k: v.format(work=tmp_path / "work") if isinstance(v, str) else v for k, v in entry.items()}
    with pytest.raises(SessionChoiceError, match="rewind refused: checkpoint 1 ") as caught:
        plan_rewind(_session(tmp_path, entry))
    assert what in str(caught.value)


def test_a_checkpoint_inside_the_project_is_still_restored(tmp_path: Path) -> None:
    made = tmp_path / "work" / "made.txt"
    paths = _session(tmp_path, {"path": str(made), "blob": None})
    made.write_text("new\n")
    assert apply_rewind(plan_rewind(paths)) == [f"removed {made}"] and not made.exists()
