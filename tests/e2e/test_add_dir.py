"""End-to-end: ``--add-dir`` gives the tools more working directories, as Claude Code 2.1.235 takes the flag.

The real CLI against the embedded server; the tools touch real folders beside the
working directory. The flag is repeatable and takes several directories at once; a
relative one is resolved against the working directory; the directory added is one
more working directory for Read, Write, Edit and Bash, under the same gate (Write asks
there as in cwd); the flag is the user's own, so an untrusted folder does not narrow it
(its settings' ``additionalDirectories`` are what trust withholds).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .harness import CliRun, MockApi, run_cli


def _scenario(*calls: tuple[str, dict[str, Any]]) -> str:
    steps = [{"reply": {"content": [{"tool_use": {"name": n, "input": i}}]}} for n, i in calls]
    steps.append({"reply": {"content": [{"text": "done"}]}})
    return json.dumps({"schema_version": 1, "scenario": "add-dir", "model": "mock-primary", "default": steps})


def _run(
    base: Path, calls: tuple[tuple[str, dict[str, Any]], ...], *flags: str, settings: Any = None
) -> tuple[CliRun, list[Any]]:
    """``queryloop run`` in ``base/project`` with ``base/other`` and ``base/third`` beside it; its tool results."""
    (base / "project" / ".claude").mkdir(parents=True)
    if settings is not None:
        (base / "project" / ".claude" / "settings.json").write_text(json.dumps(settings))
    for name in ("other", "third"):
        (base / name).mkdir()
        (base / name / "o.txt").write_text(f"{name}\n")
    with MockApi(_scenario(*calls)) as api:
        run = run_cli(
            ["--permission-mode", "default", "--model", "mock-primary", *flags, "--", "go"],
            api=api,
            cwd=base / "project",
            QUERYLOOP_HOME=str(base / "home"),
        )
        results = [
            b
            for r in api.requests
            for m in r.messages
            if m["role"] == "user" and isinstance(m["content"], list)
            for b in m["content"]
            if b.get("type") == "tool_result"
        ]
        return run, results


def test_read_in_a_directory_added_with_add_dir_is_allowed(tmp_path: Path) -> None:
    run, results = _run(tmp_path, (("Read", {"file_path": "../other/o.txt"}),), "--add-dir", "../other")
    assert run.returncode == 0, run.stderr
    assert "--add-dir" not in run.stderr  # no longer "ignored"
    assert results[-1]["content"] == "1\tother\n2\t"


def test_add_dir_is_repeatable_and_takes_several_directories_at_once(tmp_path: Path) -> None:
    reads = (("Read", {"file_path": "../other/o.txt"}), ("Read", {"file_path": "../third/o.txt"}))
    for flags in (("--add-dir", "../other", "--add-dir", "../third"), ("--add-dir", "../other", "../third")):
        run, results = _run(tmp_path / str(len(flags)), reads, *flags)
        assert run.returncode == 0, run.stderr
        assert [r["content"] for r in results[-2:]] == ["1\tother\n2\t", "1\tthird\n2\t"]


def test_a_directory_not_added_stays_outside(tmp_path: Path) -> None:
    run, results = _run(tmp_path, (("Read", {"file_path": "../third/o.txt"}),), "--add-dir", "../other")
    assert results[-1]["is_error"] is True
    assert run.result["permission_denials"][0]["tool_name"] == "Read"


def test_write_in_an_added_directory_asks_as_in_the_working_directory(tmp_path: Path) -> None:
    write = (("Write", {"file_path": "../other/w.txt", "content": "x"}),)
    run, _ = _run(tmp_path / "a", write, "--add-dir", "../other")
    assert [d["tool_name"] for d in run.result["permission_denials"]] == ["Write"]
    assert not (tmp_path / "a" / "other" / "w.txt").exists()
    run, _ = _run(tmp_path / "b", write, "--add-dir", "../other", "--permission-mode", "acceptEdits")
    assert run.result["permission_denials"] == []
    assert (tmp_path / "b" / "other" / "w.txt").read_text() == "x"


def test_add_dir_is_honoured_in_an_untrusted_folder_whose_own_extra_directories_are_not(tmp_path: Path) -> None:
    reads = (("Read", {"file_path": "../other/o.txt"}), ("Read", {"file_path": "../third/o.txt"}))
    settings = {"permissions": {"additionalDirectories": ["../third"]}}
    run, results = _run(tmp_path, reads, "--add-dir", "../other", settings=settings)
    assert results[-2]["content"] == "1\tother\n2\t"
    assert results[-1]["is_error"] is True  # the untrusted settings' additionalDirectories: ignored
    assert "additionalDirectories" in run.stderr


def test_an_added_directory_that_does_not_exist_is_named_and_the_run_goes_on(tmp_path: Path) -> None:
    run, results = _run(tmp_path, (("Read", {"file_path": "../other/o.txt"}),), "--add-dir", "../nope")
    assert run.returncode == 0
    assert "--add-dir ../nope:" in run.stderr and "is not a directory" in run.stderr
    assert results[-1]["is_error"] is True
