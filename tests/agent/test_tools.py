"""Built-in tools and their dispatcher, on a real temporary filesystem with real subprocesses."""

from __future__ import annotations

import asyncio
import collections
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import queryloop.handlers.tools.services.registry as tools_module
from queryloop.handlers.messages import ToolCall, ToolResultBlock, synthetic_error_results
from queryloop.handlers.tools import (
    ToolContext,
    ToolOutput,
    ToolRegistry,
    ToolSpec,
    default_registry,
    default_tools,
    run_tool_calls,
)
from queryloop.handlers.tools.services.bash import _OutputCapture
from queryloop.handlers.tools.services.names import (
    BASH_TOOLS,
    CHANGES_CODE,
    CLEARABLE_TOOLS,
    DEFAULT_READ_ONLY_TOOLS,
    EDIT_TOOLS,
    KNOWN_TOOLS,
    READ_TOOLS,
)
from queryloop.handlers.tools.services.search import glob_to_regex

# ---------------------------------------------------------------------------- helpers


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    work = tmp_path / "work"
    work.mkdir()
    return ToolContext(cwd=work)


def call(
    ctx: ToolContext, name: str, tool_input: dict[str, Any], registry: ToolRegistry | None = None
) -> ToolResultBlock:
    """Run a single call through the dispatcher and return its result block."""
    blocks = asyncio.run(
        run_tool_calls([ToolCall(id="toolu_1", name=name, input=tool_input)], registry or default_registry(), ctx)
    )
    assert len(blocks) == 1
    assert blocks[0]["tool_use_id"] == "toolu_1"
    assert blocks[0]["type"] == "tool_result"
    return blocks[0]


def ok(block: ToolResultBlock) -> str:
    assert block["is_error"] is False, block["content"]
    return block["content"]


def err(block: ToolResultBlock) -> str:
    assert block["is_error"] is True, block["content"]
    return block["content"]


def alive(pid: int) -> bool:
    """True if ``pid`` is a running (not zombie) process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def dies_within(pid: int, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.02)
    return False


def read_pid(path: Path) -> int:
    return int(path.read_text().strip())


def probe_tool(name: str, *, safe: bool, log: list[str], events: Mapping[str, asyncio.Event]) -> ToolSpec:
    """A test tool logging start/end; with ``after`` it waits until that label has ended."""

    async def run(tool_input: Mapping[str, Any], _ctx: ToolContext) -> ToolOutput:
        label = tool_input["label"]
        log.append(f"start {label}")
        try:
            await asyncio.sleep(0)
            if "after" in tool_input:
                await asyncio.wait_for(events[tool_input["after"]].wait(), 5)
        except asyncio.CancelledError:
            log.append(f"cancelled {label}")
            raise
        log.append(f"end {label}")
        events[label].set()
        return ToolOutput(content=f"done {label}")

    return ToolSpec(
        name=name,
        description="Test probe.",
        input_schema={
            "type": "object",
            "properties": {"label": {"type": "string"}, "after": {"type": "string"}},
            "required": ["label"],
        },
        concurrency_safe=safe,
        read_only=True,
        idempotent=True,
        run=run,
    )


def probe_calls(*specs: tuple[str, str] | tuple[str, str, str]) -> list[ToolCall]:
    calls = []
    for spec in specs:
        tool_input = {"label": spec[1]} | ({"after": spec[2]} if len(spec) == 3 else {})
        calls.append(ToolCall(id=f"toolu_{spec[1]}", name=spec[0], input=tool_input))
    return calls


# ---------------------------------------------------------------------------- records and registry


def test_default_tools_have_claude_code_names_and_scheduling_flags() -> None:
    flags = {t.name: (t.concurrency_safe, t.read_only, t.idempotent) for t in default_tools()}
    assert flags == {
        "Read": (True, True, True),
        "Write": (False, False, False),
        "Edit": (False, False, False),
        "Bash": (False, False, False),
        "Glob": (True, True, True),
        "Grep": (True, True, True),
        "WebFetch": (True, True, True),
        "WebSearch": (True, True, True),
    }


def test_each_built_in_tool_is_what_the_table_of_tool_names_says_it_is() -> None:
    """The built-ins' own flags and the one table of tool names agree: a read-only built-in is one the Read rules
    cover and that runs without asking, a built-in that changes a file is one the Edit rules cover, and the file it
    changes is the field a path rule is matched against. The web tools change nothing here but reach the network:
    no rule family covers them and they ask."""
    for tool in default_tools():
        known = KNOWN_TOOLS[tool.name]
        if tool.name in ("WebFetch", "WebSearch"):
            assert tool.read_only and known.rules is None and not known.never_asks, tool.name
            continue
        assert tool.read_only == (known.rules == "Read") == known.never_asks, tool.name
        assert (tool.changes_file is not None) == (known.rules == "Edit"), tool.name
        assert tool.changes_file in (None, known.path_field), tool.name


def test_the_tool_families_are_claude_codes() -> None:
    assert READ_TOOLS == {"Read", "Glob", "Grep", "LS", "NotebookRead"}
    assert EDIT_TOOLS == {"Edit", "Write", "MultiEdit", "NotebookEdit"}
    assert BASH_TOOLS == {"Bash"}
    assert DEFAULT_READ_ONLY_TOOLS == READ_TOOLS | {
        "ListMcpResourcesTool",
        "ReadMcpResourceTool",
        "Agent",
        "StructuredOutput",  # --json-schema's answer: it changes nothing and runs nothing
    }
    assert CLEARABLE_TOOLS == {"Read", "Bash", "PowerShell", "Grep", "Glob", "WebFetch", "WebSearch", "Edit", "Write"}
    assert CHANGES_CODE == ("Edit", "Write", "NotebookEdit")


def test_api_definitions_are_name_description_and_schema_built_once() -> None:
    registry = default_registry()
    first, second = registry.api_definitions(), registry.api_definitions()
    assert [d["name"] for d in first] == ["Read", "Write", "Edit", "Bash", "Glob", "Grep", "WebFetch", "WebSearch"]
    assert all(set(d) == {"name", "description", "input_schema"} for d in first)
    assert all(a is b for a, b in zip(first, second, strict=True))
    assert first is not second
    assert default_tools() is default_tools()


def test_registry_restricted_to_allowed_names_keeps_registration_order() -> None:
    registry = default_registry({"Grep", "Read"})
    assert registry.names == ("Read", "Grep")
    assert "Bash" not in registry and registry.get("Bash") is None
    assert [d["name"] for d in registry.api_definitions()] == ["Read", "Grep"]


def test_registry_rejects_an_unknown_allowed_name_and_suggests_a_close_one() -> None:
    with pytest.raises(ValueError, match=r"'Reed' \(did you mean 'Read'\?\)"):
        default_registry({"Reed"})


def test_registry_rejects_two_tools_with_the_same_name() -> None:
    read = default_registry()["Read"]
    with pytest.raises(ValueError, match="two tools are named 'Read'"):
        ToolRegistry(tools=(read, read))


def test_registry_lookup_of_a_missing_name_lists_registered_tools() -> None:
    with pytest.raises(KeyError, match="no tool named 'Nope'; registered tools: Read"):
        default_registry()["Nope"]


def test_tool_spec_rejects_a_schema_that_is_not_an_object_and_a_bad_name() -> None:
    read = default_registry()["Read"]
    with pytest.raises(ValueError, match="must have type 'object'"):
        attrs.evolve(read, input_schema={"type": "string"})
    with pytest.raises(ValueError, match="must match"):
        attrs.evolve(read, name="has space")


def test_tool_context_resolves_cwd_and_checks_its_limits(tmp_path: Path) -> None:
    assert ToolContext(cwd=tmp_path / "." / "x" / "..").cwd == tmp_path.resolve()
    with pytest.raises(ValueError, match=r"bash_max_timeout_s \(5\) must be >= bash_default_timeout_s \(10\)"):
        ToolContext(cwd=tmp_path, bash_default_timeout_s=10, bash_max_timeout_s=5)
    with pytest.raises(ValueError, match="must be an existing directory"):
        ToolContext(cwd=tmp_path / "missing")
    with pytest.raises(ValueError, match="'max_output_chars' must be >= 1000: 999"):
        ToolContext(cwd=tmp_path, max_output_chars=999)


def test_tool_call_is_built_from_a_tool_use_block() -> None:
    block = {"type": "tool_use", "id": "toolu_9", "name": "Read", "input": {"file_path": "a"}}
    assert ToolCall.from_block(block) == ToolCall(id="toolu_9", name="Read", input={"file_path": "a"})
    with pytest.raises(ValueError, match="expected a 'tool_use' block, got type 'text'"):
        ToolCall.from_block({"type": "text"})


def test_tools_module_all_is_sorted() -> None:
    assert tools_module.__all__ == sorted(tools_module.__all__)
    assert all(hasattr(tools_module, name) for name in tools_module.__all__)


# ---------------------------------------------------------------------------- Read


def test_read_numbers_lines_like_cat_n(ctx: ToolContext) -> None:
    (ctx.cwd / "a.txt").write_text("alpha\nbeta\r\n\ngamma")
    assert ok(call(ctx, "Read", {"file_path": "a.txt"})) == "1\talpha\n2\tbeta\n3\t\n4\tgamma"


def test_read_accepts_an_absolute_path_inside_cwd(ctx: ToolContext) -> None:
    (ctx.cwd / "a.txt").write_text("x\n")
    assert ok(call(ctx, "Read", {"file_path": str(ctx.cwd / "a.txt")})) == "1\tx\n2\t"


def test_read_offset_and_limit_page_through_the_file_with_a_hint_to_continue(ctx: ToolContext) -> None:
    (ctx.cwd / "a.txt").write_text("".join(f"line{i}\n" for i in range(1, 11)))
    # The model's own limit gets no note (as in Claude Code); the default limit does.
    assert ok(call(ctx, "Read", {"file_path": "a.txt", "offset": 4, "limit": 2})) == "4\tline4\n5\tline5"
    assert ok(call(ctx, "Read", {"file_path": "a.txt", "offset": 10})) == "10\tline10\n11\t"
    (ctx.cwd / "long.txt").write_text("".join(f"{i}\n" for i in range(1, 2_101)))
    content = ok(call(ctx, "Read", {"file_path": "long.txt", "offset": 100}))
    assert content.endswith(
        "\n2099\t2099\n[long.txt continues after line 2099; call Read with offset=2100 to see more]"
    )


def test_read_stops_at_the_output_limit_and_says_where_to_continue(tmp_path: Path) -> None:
    small = ToolContext(cwd=tmp_path, max_output_chars=1_000)
    (tmp_path / "a.txt").write_text(("y" * 40 + "\n") * 100)
    content = ok(call(small, "Read", {"file_path": "a.txt"}))
    assert len(content) <= 1_000
    last = int(re.findall(r"^(\d+)\t", content, re.M)[-1])
    assert f"call Read with offset={last + 1} to continue" in content


def test_read_of_a_directory_is_an_error(ctx: ToolContext) -> None:
    (ctx.cwd / "d").mkdir()
    assert "d is a directory, not a file" in err(call(ctx, "Read", {"file_path": "d"}))


def test_read_of_a_missing_file_is_an_error(ctx: ToolContext) -> None:
    assert "file nope.txt does not exist" in err(call(ctx, "Read", {"file_path": "nope.txt"}))


def test_read_of_a_binary_file_is_an_error(ctx: ToolContext) -> None:
    (ctx.cwd / "b.bin").write_bytes(b"\x7fELF\x00\x01\x02")
    assert "appears to be a binary file" in err(call(ctx, "Read", {"file_path": "b.bin"}))


def test_read_with_offset_past_the_end_is_a_reminder_naming_the_line_count(ctx: ToolContext) -> None:
    (ctx.cwd / "a.txt").write_text("1\n2\n3\n")
    message = ok(call(ctx, "Read", {"file_path": "a.txt", "offset": 9}))
    assert message.startswith("<system-reminder>") and message.endswith("</system-reminder>")
    assert "offset 9 is past the end of a.txt, which has 4 lines" in message  # split on "\n", as Claude Code


def test_read_of_an_empty_file_says_it_is_empty(ctx: ToolContext) -> None:
    (ctx.cwd / "e.txt").write_text("")
    assert (
        ok(call(ctx, "Read", {"file_path": "e.txt"}))
        == "<system-reminder>Note: e.txt exists and is empty.</system-reminder>"
    )


# ---------------------------------------------------------------------------- Write


def test_write_creates_missing_parent_directories(ctx: ToolContext) -> None:
    content = ok(call(ctx, "Write", {"file_path": "deep/er/new.txt", "content": "a\nb\n"}))
    assert content == "Created deep/er/new.txt (2 lines, 4 characters)"
    assert (ctx.cwd / "deep/er/new.txt").read_text() == "a\nb\n"


def test_write_overwrites_an_existing_file_byte_for_byte(ctx: ToolContext) -> None:
    (ctx.cwd / "f.txt").write_text("old")
    assert ok(call(ctx, "Write", {"file_path": "f.txt", "content": "new\r\n"})).startswith("Overwrote f.txt")
    assert (ctx.cwd / "f.txt").read_bytes() == b"new\r\n"


def test_write_to_a_directory_is_an_error(ctx: ToolContext) -> None:
    (ctx.cwd / "d").mkdir()
    assert "d is a directory; Write needs a file path" in err(call(ctx, "Write", {"file_path": "d", "content": ""}))


# ---------------------------------------------------------------------------- Edit


def test_edit_replaces_the_single_occurrence(ctx: ToolContext) -> None:
    (ctx.cwd / "m.py").write_text("def f():\n    return 1\n")
    content = ok(call(ctx, "Edit", {"file_path": "m.py", "old_string": "return 1", "new_string": "return 2"}))
    assert content == "Edited m.py: replaced 1 occurrence of old_string"
    assert (ctx.cwd / "m.py").read_text() == "def f():\n    return 2\n"


def test_edit_with_several_matches_fails_says_how_many_and_leaves_the_file_alone(ctx: ToolContext) -> None:
    (ctx.cwd / "m.py").write_text("x = 1\nx = 1\nx = 1\n")
    message = err(call(ctx, "Edit", {"file_path": "m.py", "old_string": "x = 1", "new_string": "x = 2"}))
    assert "old_string occurs 3 times in m.py, but must occur exactly once" in message
    assert "set replace_all to true" in message
    assert (ctx.cwd / "m.py").read_text() == "x = 1\nx = 1\nx = 1\n"


def test_edit_with_replace_all_replaces_every_occurrence(ctx: ToolContext) -> None:
    (ctx.cwd / "m.py").write_text("x = 1\nx = 1\n")
    tool_input = {"file_path": "m.py", "old_string": "x = 1", "new_string": "x = 2", "replace_all": True}
    assert ok(call(ctx, "Edit", tool_input)) == "Edited m.py: replaced 2 occurrences of old_string"
    assert (ctx.cwd / "m.py").read_text() == "x = 2\nx = 2\n"


def test_edit_with_no_match_fails_and_says_to_copy_the_exact_text(ctx: ToolContext) -> None:
    (ctx.cwd / "m.py").write_text("x = 1\n")
    message = err(call(ctx, "Edit", {"file_path": "m.py", "old_string": "x=1", "new_string": "x=2"}))
    assert "old_string was not found in m.py" in message
    assert "including whitespace and indentation" in message


def test_edit_with_identical_strings_is_an_error(ctx: ToolContext) -> None:
    (ctx.cwd / "m.py").write_text("x = 1\n")
    message = err(call(ctx, "Edit", {"file_path": "m.py", "old_string": "x", "new_string": "x"}))
    assert "old_string and new_string are identical" in message


def test_edit_of_a_missing_file_suggests_write(ctx: ToolContext) -> None:
    message = err(call(ctx, "Edit", {"file_path": "no.py", "old_string": "a", "new_string": "b"}))
    assert "file no.py does not exist; Edit only changes existing files; use Write to create it" in message


def test_edit_matches_a_crlf_file_from_text_copied_with_plain_newlines(ctx: ToolContext) -> None:
    (ctx.cwd / "w.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    ok(call(ctx, "Edit", {"file_path": "w.txt", "old_string": "one\ntwo", "new_string": "1\n2"}))
    assert (ctx.cwd / "w.txt").read_bytes() == b"1\r\n2\r\nthree\r\n"


# ---------------------------------------------------------------------------- Bash


def test_bash_returns_stdout_and_stderr_and_runs_in_cwd(ctx: ToolContext) -> None:
    content = ok(call(ctx, "Bash", {"command": "pwd; echo oops >&2", "description": "show cwd"}))
    assert content == f"{ctx.cwd}\noops"


def test_bash_output_loses_its_leading_blank_lines_and_trailing_whitespace_as_in_claude_code(ctx: ToolContext) -> None:
    assert ok(call(ctx, "Bash", {"command": "echo hi"})) == "hi"
    assert ok(call(ctx, "Bash", {"command": "printf '\\n \\n  x  \\n\\n'"})) == "  x"
    assert ok(call(ctx, "Bash", {"command": "printf '\\n'"})) == "(Bash completed with no output)"


def test_bash_nonzero_exit_is_an_error_with_the_exit_code(ctx: ToolContext) -> None:
    assert err(call(ctx, "Bash", {"command": "echo partial; exit 7"})) == "Exit code 7\npartial"
    assert err(call(ctx, "Bash", {"command": "exit 3"})) == "Exit code 3"  # as Claude Code 2.1.235: no output, no line


def test_bash_command_killed_by_a_signal_is_an_error_naming_it(ctx: ToolContext) -> None:
    assert err(call(ctx, "Bash", {"command": "kill -TERM $$"})) == "Command was killed by signal SIGTERM\n(no output)"


def test_bash_command_without_output_says_so(ctx: ToolContext) -> None:
    assert ok(call(ctx, "Bash", {"command": "true"})) == "(Bash completed with no output)"


def test_bash_long_output_keeps_start_and_end_with_a_marker_counting_dropped_chars(ctx: ToolContext) -> None:
    content = ok(call(ctx, "Bash", {"command": "printf S; head -c 100000 /dev/zero | tr '\\0' x; printf E"}))
    assert len(content) <= ctx.max_output_chars
    assert content.startswith("Sxxx") and content.endswith("xxxE")
    kept = content.count("x") + 2
    assert f"output truncated: {100002 - kept} characters omitted" in content


def test_bash_failure_with_long_output_keeps_the_status_line_and_the_end(ctx: ToolContext) -> None:
    content = err(call(ctx, "Bash", {"command": "head -c 100000 /dev/zero | tr '\\0' x; echo LAST; exit 3"}))
    assert len(content) <= ctx.max_output_chars
    assert content.startswith("Exit code 3\nxxx")
    assert content.endswith("xxxLAST")


def test_bash_timeout_kills_the_whole_process_group(ctx: ToolContext) -> None:
    command = "sleep 30 & echo $! > child.pid; echo $$ > bash.pid; echo started; wait"
    message = err(call(ctx, "Bash", {"command": command, "timeout": 500}))
    assert message.startswith("Command timed out after 0.5 s; its process group was killed")
    assert "started" in message
    assert dies_within(read_pid(ctx.cwd / "child.pid"))
    assert dies_within(read_pid(ctx.cwd / "bash.pid"))


def test_bash_timeout_is_clamped_to_the_maximum_and_defaults_from_the_context(tmp_path: Path) -> None:
    fast = ToolContext(cwd=tmp_path, bash_default_timeout_s=0.2, bash_max_timeout_s=0.3)
    assert err(call(fast, "Bash", {"command": "sleep 10", "timeout": 9_999_999})).startswith(
        "Command timed out after 0.3 s"
    )
    assert err(call(fast, "Bash", {"command": "sleep 10"})).startswith("Command timed out after 0.2 s")


def test_bash_background_job_holding_the_output_pipe_is_killed_when_bash_exits(ctx: ToolContext) -> None:
    # The job inherits stdout; waiting for the pipe to close would wait for the job.
    content = ok(call(ctx, "Bash", {"command": "sleep 30 & echo $! > child.pid; echo done", "timeout": 10_000}))
    assert content == "done"
    assert dies_within(read_pid(ctx.cwd / "child.pid"))


def test_bash_returns_when_a_detached_process_keeps_the_output_pipe_open(ctx: ToolContext) -> None:
    command = "setsid sleep 5 & echo $! > detached.pid; echo done"
    try:
        assert ok(call(ctx, "Bash", {"command": command, "timeout": 10_000})) == "done"
    finally:
        os.kill(read_pid(ctx.cwd / "detached.pid"), 9)


def test_bash_non_positive_timeout_is_invalid_input(ctx: ToolContext) -> None:
    message = err(call(ctx, "Bash", {"command": "true", "timeout": 0}))
    assert "field 'timeout': 0 is less than or equal to the minimum of 0" in message


@settings(database=None)
@given(chunks=st.lists(st.text(max_size=300), max_size=20), limit=st.integers(min_value=200, max_value=600))
def test_output_capture_keeps_all_text_under_the_limit_and_start_plus_end_over_it(
    chunks: list[str], limit: int
) -> None:
    capture = _OutputCapture(limit)
    for chunk in chunks:
        capture.feed(chunk)
    whole = "".join(chunks)
    result = capture.text()
    if len(whole) <= limit:
        assert result == whole
        return
    assert len(result) <= limit
    match = re.search(r"\n\[\.\.\. output truncated: (\d+) characters omitted; [^\]]*\]\n", result)
    assert match is not None
    head, tail = result[: match.start()], result[match.end() :]
    assert whole.startswith(head) and whole.endswith(tail)
    assert len(head) + int(match.group(1)) + len(tail) == len(whole)


# ---------------------------------------------------------------------------- Glob


def _touch(path: Path, mtime: float, text: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.utime(path, (mtime, mtime))


def test_glob_lists_matching_files_newest_first_relative_to_cwd(ctx: ToolContext) -> None:
    _touch(ctx.cwd / "old.py", 1_000)
    _touch(ctx.cwd / "pkg/new.py", 3_000)
    _touch(ctx.cwd / "pkg/mid.py", 2_000)
    _touch(ctx.cwd / "pkg/notes.txt", 4_000)
    assert ok(call(ctx, "Glob", {"pattern": "**/*.py"})).splitlines() == ["pkg/new.py", "pkg/mid.py", "old.py"]
    assert ok(call(ctx, "Glob", {"pattern": "*.py"})).splitlines() == ["old.py"]
    assert ok(call(ctx, "Glob", {"pattern": "*.py", "path": "pkg"})).splitlines() == ["pkg/new.py", "pkg/mid.py"]


def test_glob_skips_the_git_directory_and_supports_braces(ctx: ToolContext) -> None:
    _touch(ctx.cwd / ".git/config.ts", 1_000)
    _touch(ctx.cwd / "src/a.ts", 2_000)
    _touch(ctx.cwd / "src/b.tsx", 1_000)
    _touch(ctx.cwd / "src/c.js", 1_000)
    assert ok(call(ctx, "Glob", {"pattern": "**/*.{ts,tsx}"})).splitlines() == ["src/a.ts", "src/b.tsx"]


def test_glob_caps_the_result_count_with_a_marker(ctx: ToolContext) -> None:
    for i in range(105):
        _touch(ctx.cwd / f"f{i:03}.txt", 1_000 + i)
    lines = ok(call(ctx, "Glob", {"pattern": "*.txt"})).splitlines()
    assert lines[0] == "f104.txt" and len(lines) == 101
    assert lines[-1].startswith("[Showing the 100 most recently modified of 105 matching files")


def test_glob_without_matches_is_not_an_error(ctx: ToolContext) -> None:
    assert ok(call(ctx, "Glob", {"pattern": "*.rs"})) == "No files match '*.rs' in ."


def test_glob_on_a_missing_or_file_path_is_an_error(ctx: ToolContext) -> None:
    (ctx.cwd / "f.txt").write_text("")
    assert "path nope does not exist" in err(call(ctx, "Glob", {"pattern": "*", "path": "nope"}))
    assert "is a file, not a directory" in err(call(ctx, "Glob", {"pattern": "*", "path": "f.txt"}))


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("*.py", "a.py", True),
        ("*.py", "d/a.py", False),
        ("**/*.py", "a.py", True),
        ("**/*.py", "d/e/a.py", True),
        ("src/**", "src/x/y", True),
        ("a/**/b.txt", "a/b.txt", True),
        ("a/**/b.txt", "a/x/y/b.txt", True),
        ("{a,b/c}.txt", "b/c.txt", True),
        ("{a,b}.txt", "c.txt", False),
        ("[!x]?.md", "ab.md", True),
        ("[!x]?.md", "xb.md", False),
        ("*", ".env", True),
        ("f(1)+.txt", "f(1)+.txt", True),
    ],
)
def test_glob_patterns_follow_the_documented_dialect(pattern: str, path: str, matches: bool) -> None:
    assert bool(glob_to_regex(pattern).match(path)) is matches


# ---------------------------------------------------------------------------- Grep


def test_grep_files_with_matches_is_the_default_and_lists_newest_first(ctx: ToolContext) -> None:
    _touch(ctx.cwd / "a.py", 1_000, "import os\n")
    _touch(ctx.cwd / "b/c.py", 2_000, "import sys\n")
    _touch(ctx.cwd / "d.py", 3_000, "print()\n")
    assert ok(call(ctx, "Grep", {"pattern": r"^import \w+"})).splitlines() == ["Found 2 files", "b/c.py", "a.py"]


def test_grep_content_mode_shows_path_line_number_and_text(ctx: ToolContext) -> None:
    (ctx.cwd / "a.txt").write_text("zero\nfoo one\r\ntwo\nfoo three\n")
    content = ok(call(ctx, "Grep", {"pattern": "foo", "output_mode": "content"}))
    assert content.splitlines() == ["a.txt:2:foo one", "a.txt:4:foo three"]


def test_grep_count_mode_counts_matching_lines_per_file(ctx: ToolContext) -> None:
    (ctx.cwd / "a.txt").write_text("foo foo\nfoo\nbar\n")
    (ctx.cwd / "b.txt").write_text("foo\n")
    content = ok(call(ctx, "Grep", {"pattern": "foo", "output_mode": "count"}))
    assert content.splitlines() == ["a.txt:2", "b.txt:1", "Found 3 matching lines in 2 files"]


def test_grep_ignores_case_with_the_i_flag(ctx: ToolContext) -> None:
    (ctx.cwd / "a.txt").write_text("Hello\n")
    assert ok(call(ctx, "Grep", {"pattern": "hello"})).startswith("No files under . match")
    assert ok(call(ctx, "Grep", {"pattern": "hello", "-i": True})) == "Found 1 files\na.txt"


def test_grep_skips_binary_files_and_the_git_directory(ctx: ToolContext) -> None:
    (ctx.cwd / "bin.dat").write_bytes(b"needle\x00\x01")
    (ctx.cwd / ".git").mkdir()
    (ctx.cwd / ".git/HEAD").write_text("needle\n")
    (ctx.cwd / "text.txt").write_text("needle\n")
    assert ok(call(ctx, "Grep", {"pattern": "needle"})) == "Found 1 files\ntext.txt"


def test_grep_glob_filters_file_names_or_paths(ctx: ToolContext) -> None:
    (ctx.cwd / "a.py").write_text("needle\n")
    (ctx.cwd / "sub").mkdir()
    (ctx.cwd / "sub/b.py").write_text("needle\n")
    (ctx.cwd / "sub/c.md").write_text("needle\n")
    by_name = ok(call(ctx, "Grep", {"pattern": "needle", "glob": "*.py", "output_mode": "count"}))
    assert by_name.splitlines()[:2] == ["a.py:1", "sub/b.py:1"]
    by_path = ok(call(ctx, "Grep", {"pattern": "needle", "glob": "sub/*", "output_mode": "count"}))
    assert by_path.splitlines()[:2] == ["sub/b.py:1", "sub/c.md:1"]


def test_grep_searches_a_single_file_given_as_path(ctx: ToolContext) -> None:
    (ctx.cwd / "a.txt").write_text("needle\n")
    (ctx.cwd / "b.txt").write_text("needle\n")
    assert ok(call(ctx, "Grep", {"pattern": "needle", "path": "b.txt", "output_mode": "content"})) == "b.txt:1:needle"


def test_grep_with_an_invalid_regex_is_an_error(ctx: ToolContext) -> None:
    message = err(call(ctx, "Grep", {"pattern": "(unclosed"}))
    assert "pattern '(unclosed' is not a valid Python regular expression" in message


def test_grep_content_output_is_capped_with_a_marker(tmp_path: Path) -> None:
    small = ToolContext(cwd=tmp_path, max_output_chars=1_000)
    (tmp_path / "big.txt").write_text("needle here\n" * 5_000)
    content = ok(call(small, "Grep", {"pattern": "needle", "output_mode": "content"}))
    assert len(content) <= 1_000
    assert content.startswith("big.txt:1:needle here\n")
    assert "narrow the pattern, path or glob" in content


# ---------------------------------------------------------------------------- working-directory confinement


@pytest.mark.parametrize(
    ("name", "tool_input"),
    [
        ("Read", {"file_path": "../secret.txt"}),
        ("Write", {"file_path": "../evil.txt", "content": "x"}),
        ("Edit", {"file_path": "sub/../../secret.txt", "old_string": "s", "new_string": "t"}),
        ("Glob", {"pattern": "*", "path": ".."}),
        ("Grep", {"pattern": "s", "path": "../secret.txt"}),
    ],
)
def test_a_dotdot_path_outside_cwd_is_refused(ctx: ToolContext, name: str, tool_input: dict[str, Any]) -> None:
    (ctx.cwd.parent / "secret.txt").write_text("secret\n")
    assert "outside the working directory" in err(call(ctx, name, tool_input))
    assert not (ctx.cwd.parent / "evil.txt").exists()
    assert (ctx.cwd.parent / "secret.txt").read_text() == "secret\n"


def test_a_symlink_pointing_outside_cwd_is_refused(ctx: ToolContext) -> None:
    outside = ctx.cwd.parent / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret\n")
    (ctx.cwd / "link.txt").symlink_to(outside / "secret.txt")
    (ctx.cwd / "linkdir").symlink_to(outside)
    assert "outside the working directory" in err(call(ctx, "Read", {"file_path": "link.txt"}))
    assert "outside the working directory" in err(call(ctx, "Write", {"file_path": "linkdir/new", "content": "x"}))
    assert not (outside / "new").exists()
    assert ok(call(ctx, "Grep", {"pattern": "secret"})).startswith("No files under . match")


def test_a_symlink_inside_cwd_is_followed(ctx: ToolContext) -> None:
    (ctx.cwd / "real.txt").write_text("hi\n")
    (ctx.cwd / "alias.txt").symlink_to(ctx.cwd / "real.txt")
    assert ok(call(ctx, "Read", {"file_path": "alias.txt"})) == "1\thi\n2\t"


# ---------------------------------------------------------------------------- dispatcher failures


def test_invalid_input_names_the_field_and_the_problem_and_the_tool_does_not_run(ctx: ToolContext) -> None:
    message = err(call(ctx, "Write", {"file_path": "w.txt", "content": 5}))
    assert message == (
        "<tool_use_error>InputValidationError: Invalid input for tool Write; it was not run:\n"
        "- field 'content': 5 is not of type 'string'</tool_use_error>"
    )
    assert not (ctx.cwd / "w.txt").exists()


def test_missing_and_unexpected_fields_are_both_reported(ctx: ToolContext) -> None:
    message = err(call(ctx, "Read", {"path": "a.txt"}))
    assert "- input: missing required field 'file_path'" in message
    assert "('path' was unexpected)" in message


def test_unknown_tool_is_claude_codes_no_such_tool_error(ctx: ToolContext) -> None:
    message = err(call(ctx, "Bash", {"command": "true"}, registry=default_registry({"Read", "Grep"})))
    assert message == "<tool_use_error>Error: No such tool available: Bash</tool_use_error>"


def test_an_exception_raised_by_a_tool_becomes_an_error_with_its_type_and_text(ctx: ToolContext) -> None:
    async def explode(_input: Mapping[str, Any], _ctx: ToolContext) -> ToolOutput:
        raise ValueError("the flux capacitor is empty")

    boom = attrs.evolve(default_registry()["Glob"], name="Boom", run=explode)
    message = err(call(ctx, "Boom", {"pattern": "*"}, registry=ToolRegistry(tools=(boom,))))
    assert message == "Boom failed with ValueError: the flux capacitor is empty"


def test_a_tool_returning_the_wrong_type_is_an_error(ctx: ToolContext) -> None:
    async def wrong(_input: Mapping[str, Any], _ctx: ToolContext) -> ToolOutput:
        return "plain string"  # type: ignore[return-value]

    bad = attrs.evolve(default_registry()["Glob"], name="Bad", run=wrong)
    message = err(call(ctx, "Bad", {"pattern": "*"}, registry=ToolRegistry(tools=(bad,))))
    assert message == "Bad returned str instead of ToolOutput; this is a bug in the tool"


def test_output_of_a_tool_that_does_not_bound_it_is_truncated_by_the_dispatcher(tmp_path: Path) -> None:
    async def chatty(_input: Mapping[str, Any], _ctx: ToolContext) -> ToolOutput:
        return ToolOutput(content="z" * 5_000)

    tool = attrs.evolve(default_registry()["Glob"], name="Chatty", run=chatty)
    small = ToolContext(cwd=tmp_path, max_output_chars=1_000)
    content = ok(call(small, "Chatty", {"pattern": "*"}, registry=ToolRegistry(tools=(tool,))))
    assert len(content) <= 1_000
    assert f"output truncated: {5_000 - content.count('z')} characters omitted" in content


# ---------------------------------------------------------------------------- scheduling


def test_consecutive_concurrency_safe_calls_run_at_the_same_time(ctx: ToolContext) -> None:
    log: list[str] = []

    async def scenario() -> list[ToolResultBlock]:
        events: collections.defaultdict[str, asyncio.Event] = collections.defaultdict(asyncio.Event)
        registry = ToolRegistry(tools=(probe_tool("Safe", safe=True, log=log, events=events),))
        # a and b wait for c, which comes after them: run one by one, they would time out.
        calls = probe_calls(("Safe", "a", "c"), ("Safe", "b", "c"), ("Safe", "c"))
        return await run_tool_calls(calls, registry, ctx)

    results = asyncio.run(scenario())
    assert [ok(block) for block in results] == ["done a", "done b", "done c"]
    first_end = min(i for i, entry in enumerate(log) if entry.startswith("end"))
    assert {"start a", "start b", "start c"} <= set(log[:first_end])


def test_a_call_that_is_not_concurrency_safe_runs_alone_between_parallel_batches(ctx: ToolContext) -> None:
    log: list[str] = []

    async def scenario() -> None:
        events: collections.defaultdict[str, asyncio.Event] = collections.defaultdict(asyncio.Event)
        registry = ToolRegistry(
            tools=(
                probe_tool("Safe", safe=True, log=log, events=events),
                probe_tool("Unsafe", safe=False, log=log, events=events),
            )
        )
        calls = probe_calls(("Safe", "a"), ("Safe", "b"), ("Unsafe", "u"), ("Safe", "c"), ("Safe", "d"))
        await run_tool_calls(calls, registry, ctx)

    asyncio.run(scenario())
    at = log.index
    assert at("start b") < at("end a")  # a and b overlapped
    assert max(at("end a"), at("end b")) < at("start u") < at("end u") < min(at("start c"), at("start d"))
    assert at("start d") < at("end c")  # c and d overlapped


def test_results_follow_the_model_order_and_on_result_fires_in_completion_order(ctx: ToolContext) -> None:
    reported: list[str] = []

    async def scenario() -> list[ToolResultBlock]:
        events: collections.defaultdict[str, asyncio.Event] = collections.defaultdict(asyncio.Event)
        registry = ToolRegistry(tools=(probe_tool("Safe", safe=True, log=[], events=events),))
        calls = probe_calls(("Safe", "slow", "fast"), ("Safe", "fast"))
        calls.append(ToolCall(id="toolu_bad", name="Missing", input={}))
        return await run_tool_calls(
            calls, registry, ctx, on_result=lambda c, block: reported.append(f"{c.id}:{block['tool_use_id']}")
        )

    results = asyncio.run(scenario())
    assert [block["tool_use_id"] for block in results] == ["toolu_slow", "toolu_fast", "toolu_bad"]
    assert reported == ["toolu_fast:toolu_fast", "toolu_slow:toolu_slow", "toolu_bad:toolu_bad"]


def test_cancelling_during_a_slow_bash_kills_it_and_propagates_cancelled_error(ctx: ToolContext) -> None:
    pid_file = ctx.cwd / "child.pid"

    async def scenario() -> None:
        command = "echo $$ > bash.pid; sleep 30 & echo $! > child.pid.tmp; mv child.pid.tmp child.pid; wait"
        calls = [ToolCall(id="toolu_1", name="Bash", input={"command": command})]
        task = asyncio.create_task(run_tool_calls(calls, default_registry(), ctx))
        deadline = time.monotonic() + 10
        while not pid_file.exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert dies_within(read_pid(pid_file))
    assert dies_within(read_pid(ctx.cwd / "bash.pid"))


def test_cancelling_a_parallel_batch_cancels_every_running_call_before_propagating(ctx: ToolContext) -> None:
    log: list[str] = []

    async def scenario() -> None:
        events: collections.defaultdict[str, asyncio.Event] = collections.defaultdict(asyncio.Event)
        registry = ToolRegistry(tools=(probe_tool("Safe", safe=True, log=log, events=events),))
        calls = probe_calls(("Safe", "a", "never"), ("Safe", "b", "never"))
        task = asyncio.create_task(run_tool_calls(calls, registry, ctx))
        while len(log) < 2:
            await asyncio.sleep(0)
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert sorted(log) == ["cancelled a", "cancelled b", "start a", "start b"]

    asyncio.run(scenario())


def test_synthetic_error_results_cover_the_calls_in_order() -> None:
    calls = [ToolCall(id=f"toolu_{i}", name="Bash", input={}) for i in range(3)]
    assert synthetic_error_results(calls, "Interrupted by the user") == [
        {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": "Interrupted by the user", "is_error": True}
        for i in range(3)
    ]
    with pytest.raises(ValueError, match="non-empty message"):
        synthetic_error_results(calls, "")


def test_an_empty_list_of_calls_gives_no_results(ctx: ToolContext) -> None:
    assert asyncio.run(run_tool_calls([], default_registry(), ctx)) == []
