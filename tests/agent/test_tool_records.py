"""What the file tools keep for PostToolUse hooks, and the settings' additional directories, in process."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from queryloop.handlers.messages import ToolCall
from queryloop.handlers.tools.services.base import ToolContext
from queryloop.handlers.tools.services.dispatch import run_tool_calls
from queryloop.handlers.tools.services.files import structured_patch
from queryloop.handlers.tools.services.registry import default_registry


@pytest.fixture()
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "work").mkdir()
    (tmp_path / "extra").mkdir()
    return tmp_path / "work", tmp_path / "extra"


def _run(ctx: ToolContext, name: str, tool_input: dict[str, Any]) -> tuple[str, bool]:
    (block,) = asyncio.run(
        run_tool_calls([ToolCall(id="toolu_1", name=name, input=tool_input)], default_registry(), ctx)
    )
    return str(block["content"]), bool(block["is_error"])


def test_a_read_past_its_limit_counts_the_lines_it_did_not_show_for_the_hook(dirs: tuple[Path, Path]) -> None:
    work, _ = dirs
    (work / "f.txt").write_text("".join(f"{n}\n" for n in range(1, 101)))
    ctx = ToolContext(cwd=work, responses={})
    _run(ctx, "Read", {"file_path": "f.txt", "offset": 10, "limit": 3})
    assert ctx.responses == {
        "toolu_1": {
            "type": "text",
            "file": {
                "filePath": "f.txt",
                "content": "10\n11\n12",
                "numLines": 3,
                "startLine": 10,
                "totalLines": 101,
            },
        }
    }


@pytest.mark.parametrize(("command", "stdout"), [("true", ""), ("echo out; echo err >&2", "out\nerr")])
def test_bash_keeps_its_output_itself_for_the_hook_and_an_empty_one_is_empty(
    dirs: tuple[Path, Path], command: str, stdout: str
) -> None:
    work, _ = dirs
    ctx = ToolContext(cwd=work, responses={})
    content, failed = _run(ctx, "Bash", {"command": command})
    assert not failed and (content == "(Bash completed with no output)") is (stdout == "")
    assert ctx.responses == {
        "toolu_1": {"stdout": stdout, "stderr": "", "interrupted": False, "isImage": False, "noOutputExpected": False}
    }


def test_without_a_post_tool_use_hook_no_record_is_kept(dirs: tuple[Path, Path]) -> None:
    work, _ = dirs
    ctx = ToolContext(cwd=work)
    assert _run(ctx, "Write", {"file_path": "n.txt", "content": "x"})[1] is False
    assert ctx.responses is None


def test_a_patch_marks_a_last_line_without_a_newline_on_either_side() -> None:
    assert structured_patch("a\nb", "a\nb\n") == [
        {
            "oldStart": 1,
            "oldLines": 2,
            "newStart": 1,
            "newLines": 2,
            "lines": [" a", "-b", "\\ No newline at end of file", "+b"],
        }
    ]
    assert structured_patch("same\n", "same\n") == []


def test_file_tools_reach_an_additional_directory_and_nothing_beside_it(dirs: tuple[Path, Path]) -> None:
    work, extra = dirs
    (extra / "e.txt").write_text("x\n")
    (work.parent / "outside.txt").write_text("no\n")
    ctx = ToolContext(cwd=work, additional_dirs=(extra,))
    assert _run(ctx, "Read", {"file_path": str(extra / "e.txt")}) == ("1\tx\n2\t", False)
    text, is_error = _run(ctx, "Read", {"file_path": str(work.parent / "outside.txt")})
    assert is_error and f"outside the working directories '{work}', '{extra}'" in text
