"""One reader for the files people write: lines kept, a key given twice named with both lines, aliases refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from queryloop.fsm import SpecError, load_machine, read_json, read_yaml, schema_problems
from queryloop.mockapi import ScenarioError, parse_scenario
from queryloop.run.settings import SettingsError, load_settings

ROOT = Path(__file__).resolve().parent.parent.parent


def test_yaml_lines_are_kept_for_every_node_by_its_path() -> None:
    source = read_yaml("a:\n  b: [1, 2]\n  c:\n    - x\n", "f.yaml")
    assert source.data == {"a": {"b": [1, 2], "c": ["x"]}}
    assert source.line_of(("a", "c", 0)) == 4
    assert source.line_of(("a", "c")) == 3, "a mapping entry is where its key is written"
    assert source.line_of(("a", "missing", 7)) == 1, "an unknown path falls back to its nearest parent"


def test_a_yaml_key_given_twice_is_an_error_naming_both_lines() -> None:
    with pytest.raises(SpecError) as info:
        read_yaml("states:\n  calling: {}\n  done: {}\n  calling: {}\n", "m.yaml")
    assert str(info.value.first).startswith("m.yaml:4: key 'calling' is given twice (lines 2 and 4)")


def test_yaml_aliases_are_refused_where_they_are_used() -> None:
    with pytest.raises(SpecError) as info:
        read_yaml("base: &b {cap: 3}\ncounters:\n  retries: *b\n", "m.yaml")
    assert str(info.value.first).startswith("m.yaml:3: alias *b is not allowed")


def test_a_yaml_syntax_error_names_line_and_column() -> None:
    with pytest.raises(SpecError) as info:
        read_yaml("a: [1, 2\nb: 3\n", "m.yaml")
    assert str(info.value.first).startswith("m.yaml:2:2: invalid YAML: ")


def test_json_lines_are_kept_and_a_key_given_twice_names_both_lines() -> None:
    source = read_json('{\n  "a": {\n    "b": [1,\n      2]\n  }\n}\n', "s.json")
    assert source.line_of(("a", "b", 1)) == 4
    with pytest.raises(SpecError) as info:
        read_json('{\n  "model": "a",\n  "env": {},\n  "model": "b"\n}\n', "s.json")
    assert str(info.value.first).startswith("s.json:4: key 'model' is given twice (lines 2 and 4)")


def test_json_duplicates_are_found_in_nested_objects_and_arrays() -> None:
    with pytest.raises(SpecError, match=r"key 'x' is given twice \(lines 1 and 2\)"):
        read_json('[{"x": 1,\n "x": 2}]', "s.json")


def test_json_syntax_errors_keep_the_standard_messages_with_line_and_column() -> None:
    with pytest.raises(SpecError) as info:
        read_json('{"model": x}', "s.json")
    assert str(info.value.first).startswith("s.json:1:11: invalid JSON: Expecting value")


def test_schema_problems_name_the_file_line_and_json_path_with_a_fix() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "additionalProperties": False}
    problems = schema_problems(schema, read_yaml("n: x\nm: 1\n", "f.yaml"))
    assert [str(p) for p in problems] == [
        'f.yaml:1: $.n: expected an integer, found "x" (write an integer here)',
        "f.yaml:2: $: unknown key 'm' (allowed keys here: n)",
    ]


def test_a_machine_with_a_state_declared_twice_fails_naming_both_lines(tmp_path: Path) -> None:
    text = (ROOT / "machines/examples/retry_fetch.yaml").read_text()
    doubled = text.replace("states:\n", "states:\n  done: {terminal: true}\n", 1)
    path = tmp_path / "m.yaml"
    path.write_text(doubled)
    with pytest.raises(SpecError, match=r"key 'done' is given twice \(lines \d+ and \d+\)"):
        load_machine(path)


def test_a_scenario_with_a_model_declared_twice_fails_naming_both_lines() -> None:
    text = "schema_version: 1\nscenario: s\nmodel: m\nmodels:\n  m: []\n  m: []\n"
    with pytest.raises(ScenarioError, match=r"^s.yaml:6: key 'm' is given twice \(lines 5 and 6\)"):
        parse_scenario(text, "s.yaml")


def test_a_settings_file_with_a_key_given_twice_fails_naming_both_lines(tmp_path: Path) -> None:
    (tmp_path / ".queryloop").mkdir()
    (tmp_path / ".queryloop" / "settings.json").write_text(
        '{\n  "permissions": {"allow": ["Read"]},\n  "permissions": {}\n}\n'
    )
    with pytest.raises(SettingsError) as info:
        load_settings(cwd=tmp_path, home=tmp_path / "home")
    assert str(info.value).startswith(".queryloop/settings.json:3: key 'permissions' is given twice (lines 2 and 3)")


def test_files_without_a_schema_version_are_refused_with_the_line_to_add(tmp_path: Path) -> None:
    text = (ROOT / "machines/examples/retry_fetch.yaml").read_text().replace("schema_version: 1\n", "")
    path = tmp_path / "m.yaml"
    path.write_text(text)
    with pytest.raises(SpecError, match=r'missing required key "schema_version" \(add `schema_version: 1` at the top'):
        load_machine(path)
    with pytest.raises(ScenarioError, match="add `schema_version: 1` at the top"):
        parse_scenario("scenario: s\nmodel: m\n", "s.yaml")
    path.write_text("schema_version: 2\n" + text)
    with pytest.raises(SpecError, match=r"\$.schema_version: expected 1, found 2"):
        load_machine(path)


def test_a_file_that_is_not_utf8_is_one_error_line_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("schema_version: 1\nmachine: caf\xe9\n".encode("latin-1"))
    with pytest.raises(SpecError, match=r"latin1.yaml: not UTF-8 text \(invalid continuation byte at byte \d+\)"):
        load_machine(path)
    with pytest.raises(ScenarioError, match=r"latin1.yaml: not UTF-8 text"):
        from queryloop.mockapi import load_scenario

        load_scenario(path)
    proc = subprocess.run(
        [sys.executable, "-m", "queryloop", "check", "--machine", str(path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr + proc.stdout


def test_an_alias_bomb_in_a_scenario_is_refused_at_once() -> None:
    bomb = "a: &a [x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a]\nc: [*b, *b, *b, *b, *b, *b]\n"
    with pytest.raises(ScenarioError, match=r"^bomb.yaml:5: alias \*a is not allowed"):
        parse_scenario("schema_version: 1\nscenario: s\nmodel: m\n" + bomb, "bomb.yaml")
