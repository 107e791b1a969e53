"""The machine cache: a declaration read once is kept as plain data and read back only when it is safe.

A file comes back as the very declaration the YAML gives, or not at all: one that names
a class outside the declaration's records, one another user could have written, one for
another YAML or malformed is passed over (the YAML is read, the file written again), and
what is read back is checked and bound as any declaration is.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from queryloop.fsm import SpecError, load_machine
from queryloop.fsm.model import cache
from queryloop.machines import shipped_machines

ROOT = Path(__file__).resolve().parent.parent.parent

SMALL = """
schema_version: 1
machine: small
initial: working
events: {done: finished, abort: cancelled}
states:
  working: {effect: asyncio.sleep, emits: [done]}
  finished: {terminal: true}
  aborted: {terminal: true}
  internal_error: {terminal: true, result: {is_error: true, subtype: error_during_execution}}
transitions:
  - {from: working, event: done, to: finished, reason: work_done}
  - {from: working, event: abort, to: aborted, reason: work_aborted}
"""


def _entry(folder: Path) -> Path:
    files = list(folder.glob("machine-v*.json"))
    assert len(files) == 1, files
    return files[0]


@pytest.mark.parametrize("path", shipped_machines(), ids=lambda p: p.name)
def test_a_shipped_machine_read_back_from_the_cache_is_the_one_its_yaml_declares(path: Path, tmp_path: Path) -> None:
    first = cache.load_machine_cached(path, tmp_path)
    entry = _entry(tmp_path)
    again = cache.load_machine_cached(path, tmp_path)
    assert again.spec == first.spec == load_machine(path).spec
    assert again.effects == first.effects and again.guards == first.guards and again.handlers == first.handlers
    assert os.stat(entry).st_mode & 0o777 == 0o600 and os.stat(tmp_path).st_uid == os.geteuid()


def test_a_second_process_builds_the_machine_without_reading_its_yaml(tmp_path: Path) -> None:
    code = (
        "import sys, pathlib; from queryloop.fsm.model.cache import load_machine_cached; "
        "from queryloop.machines import MACHINES_DIR; "
        f"load_machine_cached(MACHINES_DIR / 'query_loop.yaml', pathlib.Path({str(tmp_path)!r})); "
        "print(sorted(m for m in ('queryloop.fsm.model.source', 'queryloop.fsm.model.templates') if m in sys.modules))"
    )
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True) for _ in "12"]
    assert runs[0].stdout.strip() == "['queryloop.fsm.model.source', 'queryloop.fsm.model.templates']"
    assert runs[1].stdout.strip() == "[]"


def _machine(tmp_path: Path, text: str = SMALL) -> Path:
    path = tmp_path / "small.yaml"
    path.write_text(text)
    return path


def _plant(entry: Path, change: str, into: str) -> None:
    text = entry.read_text()
    assert change in text
    entry.write_text(text.replace(change, into))


def test_a_file_naming_a_class_that_is_no_record_of_a_declaration_is_passed_over(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    path = _machine(tmp_path)
    cache.load_machine_cached(path, folder)
    entry = _entry(folder)
    _plant(entry, '"__r":"StateSpec"', '"__r":"Popen"')
    machine = cache.load_machine_cached(path, folder)
    assert [s.name for s in machine.spec.states] == ["working", "finished", "aborted", "internal_error"]
    assert '"Popen"' not in entry.read_text()  # written again from the YAML


@pytest.mark.parametrize("opened", ["file", "folder"])
def test_a_file_another_user_could_have_written_is_never_read(tmp_path: Path, opened: str) -> None:
    folder = tmp_path / "cache"
    path = _machine(tmp_path)
    cache.load_machine_cached(path, folder)
    entry = _entry(folder)
    _plant(entry, '"finished"', '"finished_elsewhere"')
    os.chmod(entry if opened == "file" else folder, 0o666 if opened == "file" else 0o777)
    assert [s.name for s in cache.load_machine_cached(path, folder).spec.states] == [
        "working",
        "finished",
        "aborted",
        "internal_error",
    ]


def test_a_symlink_in_place_of_a_file_is_never_followed(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    path = _machine(tmp_path)
    cache.load_machine_cached(path, folder)
    entry = _entry(folder)
    elsewhere = tmp_path / "planted.json"
    elsewhere.write_text(entry.read_text().replace('"finished"', '"finished_elsewhere"'))
    entry.unlink()
    entry.symlink_to(elsewhere)
    assert [s.name for s in cache.load_machine_cached(path, folder).spec.states] == [
        "working",
        "finished",
        "aborted",
        "internal_error",
    ]


def test_what_a_file_gives_is_checked_and_bound_as_any_declaration(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    path = _machine(tmp_path)
    cache.load_machine_cached(path, folder)
    entry = _entry(folder)
    _plant(entry, "asyncio.sleep", "os.system")  # not an async effect: refused when bound
    machine = cache.load_machine_cached(path, folder)
    assert machine.effects["working"] is asyncio.sleep


@pytest.mark.parametrize(
    "junk", ["", "{", "[]", '{"__t": [1]}', json.dumps({"__d": [[[1], 2]]}), "[" * 5000], ids=range(6)
)
def test_a_malformed_file_is_passed_over(tmp_path: Path, junk: str) -> None:
    folder = tmp_path / "cache"
    path = _machine(tmp_path)
    cache.load_machine_cached(path, folder)
    _entry(folder).write_text(junk)
    assert cache.load_machine_cached(path, folder).effects["working"] is asyncio.sleep


def test_an_edited_yaml_is_read_again_and_a_broken_one_still_gets_its_error(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    path = _machine(tmp_path)
    cache.load_machine_cached(path, folder)
    _machine(tmp_path, SMALL.replace("finished: {terminal: true}", "finished: {terminal: true, doc: edited}"))
    assert cache.load_machine_cached(path, folder).spec.state("finished").doc == "edited"
    _machine(tmp_path, SMALL.replace("to: finished", "to: finishd"))
    with pytest.raises(SpecError, match="finishd"):
        cache.load_machine_cached(path, folder)
    assert len(list(folder.glob("machine-v*.json"))) == 2  # the broken one is not kept


def test_a_folder_that_cannot_be_written_leaves_the_run_as_it_was(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert cache.load_machine_cached(_machine(tmp_path), blocked / "cache").effects["working"] is asyncio.sleep
