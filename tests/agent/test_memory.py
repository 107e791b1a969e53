"""Project instructions: which CLAUDE.md files are read, in which order, and how a request carries them.

The rules are Claude Code 2.1.235's, observed against the embedded server (the
end-to-end test in tests/e2e/test_cli_shape.py drives them through the program).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from queryloop.handlers.messages import MessageView
from queryloop.handlers.request import ModelCall, ModelFailure, ModelReply, TokenCount
from queryloop.run.memory import (
    InstructionFile,
    instructions_block,
    instructions_tokens,
    load_instructions,
    memory_paths,
    with_instructions,
)
from queryloop.testing import scripted_reply


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def names(files: tuple[InstructionFile, ...], root: Path) -> list[str]:
    return [str(f.path.relative_to(root)) for f in files]


def test_imports_follow_their_file_depth_first_at_most_four_deep_and_each_file_is_read_once(tmp_path: Path) -> None:
    write(tmp_path / "CLAUDE.md", "top @d/a.md\n")
    write(tmp_path / "d/a.md", "a @b.md @../CLAUDE.md\n")  # the cycle back to the top is read once
    for this, following in zip("bcde", "cdef", strict=True):
        write(tmp_path / f"d/{this}.md", f"{this} @{following}.md")
    write(tmp_path / "d/f.md", "f")
    files = load_instructions(tmp_path, home=tmp_path / "home")
    assert names(files, tmp_path) == ["CLAUDE.md", "d/a.md", "d/b.md", "d/c.md", "d/d.md"]
    assert files[1].imported_by == tmp_path / "CLAUDE.md" and files[1].kind == "project"


def test_imports_in_code_are_not_followed_and_missing_ones_are_skipped(tmp_path: Path) -> None:
    write(
        tmp_path / "CLAUDE.md", "```\n@fenced.md\n```\nrun `@inline.md`, mail me@mail.md, @missing.md, @real\\ name.md"
    )
    for name in ("fenced.md", "inline.md", "mail.md", "real name.md"):
        write(tmp_path / name, name)
    assert names(load_instructions(tmp_path, home=tmp_path / "home"), tmp_path) == ["CLAUDE.md", "real name.md"]


def test_a_project_file_imports_only_inside_the_working_directory_a_user_file_anything(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "repo" / "work"
    write(home / ".claude/CLAUDE.md", "mine @../notes/style.md")
    write(home / "notes/style.md", "style")
    write(tmp_path / "repo/CLAUDE.md", "repo @work/inside.md @outside.md @~/notes/style.md")
    write(work / "inside.md", "inside")
    write(tmp_path / "repo/outside.md", "outside")
    files = load_instructions(work, home=home)
    assert [f.path for f in files] == [
        home / ".claude/CLAUDE.md",
        home / "notes/style.md",
        tmp_path / "repo/CLAUDE.md",
        work / "inside.md",
    ]
    assert [f.kind for f in files] == ["user", "user", "project", "project"]


def test_rules_are_read_in_path_order_without_front_matter_and_path_scoped_ones_wait(tmp_path: Path) -> None:
    rules = tmp_path / ".claude/rules"
    write(rules / "b.md", "---\ndescription: second\n---\nrule b\n")
    write(rules / "a.md", "rule a")
    write(rules / "nested/c.md", "rule c")
    write(rules / "scoped.md", "---\npaths: ['src/**/*.py']\n---\nonly for python files\n")
    write(rules / "notes.txt", "not a rule")
    files = load_instructions(tmp_path, home=tmp_path / "home")
    assert names(files, tmp_path) == [".claude/rules/a.md", ".claude/rules/b.md", ".claude/rules/nested/c.md"]
    assert files[1].content == "rule b"


def test_empty_and_binary_files_are_skipped_and_the_home_directory_is_not_read_twice(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write(home / ".claude/CLAUDE.md", "user")
    write(home / "CLAUDE.md", "home as a parent directory")
    write(home / "p/CLAUDE.md", "  \n\n")
    (home / "p/CLAUDE.local.md").write_bytes(b"\x00\x01binary")
    files = load_instructions(home / "p", home=home)
    assert [(f.kind, f.path) for f in files] == [("user", home / ".claude/CLAUDE.md"), ("project", home / "CLAUDE.md")]


def test_our_files_follow_claude_codes_in_each_place_and_local_ones_come_last(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for path in (
        ".claude/CLAUDE.md",
        ".queryloop/QUERYLOOP.md",
        ".queryloop/rules/r.md",
    ):
        write(home / path, path)
    for path in ("QUERYLOOP.local.md", "CLAUDE.local.md", ".queryloop/QUERYLOOP.md", "QUERYLOOP.md", "CLAUDE.md"):
        write(tmp_path / "p" / path, path)
    files = load_instructions(tmp_path / "p", home=home)
    assert [f.content for f in files] == [
        ".claude/CLAUDE.md",
        ".queryloop/QUERYLOOP.md",
        ".queryloop/rules/r.md",
        "CLAUDE.md",
        "QUERYLOOP.md",
        ".queryloop/QUERYLOOP.md",
        "CLAUDE.local.md",
        "QUERYLOOP.local.md",
    ]
    assert memory_paths(files)["local"] == [str(tmp_path / "p/CLAUDE.local.md"), str(tmp_path / "p/QUERYLOOP.local.md")]
    only = load_instructions(tmp_path / "p", home=home, sources=("user",))
    assert [f.kind for f in only] == ["user"] * 3


class Recording:
    """A backend that keeps the calls it is given."""

    def __init__(self) -> None:
        self.calls: list[ModelCall] = []

    async def send(self, call: ModelCall, on_text: Callable[[str], None] | None) -> ModelReply | ModelFailure:
        self.calls.append(call)
        return scripted_reply([{"type": "text", "text": "ok"}])

    async def count_tokens(self, call: ModelCall) -> TokenCount:
        self.calls.append(call)
        return TokenCount(tokens=1)


def call(messages: MessageView) -> ModelCall:
    return ModelCall(
        model="m", messages=messages, system=None, tools=(), max_tokens=10, stream=False, attempt=1, idle_timeout_s=1
    )


def test_every_request_carries_the_instructions_ahead_of_the_first_user_message_and_the_transcript_does_not() -> None:
    files = (InstructionFile(path=Path("/p/CLAUDE.md"), kind="project", content="Use tabs."),)
    inner = Recording()
    backend = with_instructions(inner, files)
    transcript = MessageView().append({"role": "user", "content": "hi"}).append({"role": "assistant", "content": "yo"})
    asyncio.run(backend.send(call(transcript), None))
    asyncio.run(backend.count_tokens(call(transcript)))
    block = {"type": "text", "text": instructions_block(files)}
    for sent in inner.calls:
        assert sent.messages.to_list() == [
            {"role": "user", "content": [block, {"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": "yo"},
        ]
    assert transcript.to_list()[0] == {"role": "user", "content": "hi"}, "the run's own messages are untouched"
    assert "/p/CLAUDE.md" in block["text"] and "Use tabs." in block["text"]
    assert instructions_tokens(files) > 0


def test_a_transcript_that_starts_with_an_assistant_message_gets_a_user_message_in_front() -> None:
    files = (InstructionFile(path=Path("/p/CLAUDE.md"), kind="project", content="x"),)
    inner = Recording()
    asyncio.run(
        with_instructions(inner, files).send(call(MessageView().append({"role": "assistant", "content": "a"})), None)
    )
    sent = inner.calls[0].messages
    assert [m["role"] for m in sent] == ["user", "assistant"] and sent.is_meta(0)


def test_without_instruction_files_the_backend_is_unchanged() -> None:
    inner = Recording()
    assert with_instructions(inner, ()) is inner
    assert instructions_block(()) is None and instructions_tokens(()) == 0
    assert memory_paths(()) == {"user": [], "project": [], "local": []}
