"""Loading reports every malformed declaration as a SpecError with path:line and a fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from queryloop.fsm import SpecError, load_machine

GOOD = """\
schema_version: 1
machine: tiny
initial: calling
params:
  max_retries: {default: 3, max: 10}
events: {ok: "", overloaded: "", abort: ""}
guards: {can_retry: queryloop.fsm.testing.flag_a}
scopes: [request, turn]
counters:
  retries: {cap: max_retries, scope: request}
states:
  calling: {effect: queryloop.fsm.testing.scripted, emits: [ok, overloaded]}
  done: {terminal: true, result: {is_error: false}}
  aborted: {terminal: true}
  internal_error: {terminal: true, result: {is_error: true, subtype: error_during_execution}}
transitions:
  - {from: calling, event: ok, to: done, reason: answered}
  - {from: calling, event: overloaded, to: calling, reason: api_retry, counter: retries, guards: [can_retry]}
  - {from: calling, event: overloaded, to: done, reason: gave_up}
  - {from: calling, event: abort, to: aborted, reason: cancelled}
"""


def _error(write_machine, text: str) -> SpecError:  # type: ignore[no-untyped-def]
    with pytest.raises(SpecError) as info:
        load_machine(write_machine(text))
    return info.value


def test_a_valid_machine_loads_with_every_handler_resolved(write_machine) -> None:  # type: ignore[no-untyped-def]
    machine = load_machine(write_machine(GOOD))
    assert machine.spec.name == "tiny"
    assert set(machine.effects) == {"calling"}
    assert set(machine.guards) == {"can_retry"}
    assert machine.spec.counter_map["retries"].cap == "max_retries"


def test_on_as_a_key_is_rejected_as_a_yaml11_boolean(write_machine) -> None:  # type: ignore[no-untyped-def]
    text = GOOD.replace("- {from: calling, event: ok,", "- {from: calling, on: ok,")
    err = _error(write_machine, text)
    assert "key 'on' is read as a YAML 1.1 boolean" in str(err)
    assert "write `event:` instead of `on:`" in str(err)
    assert err.first.line == 17


def test_yes_as_a_value_is_rejected(write_machine) -> None:  # type: ignore[no-untyped-def]
    err = _error(write_machine, GOOD.replace("terminal: true, result", "terminal: yes, result"))
    assert "value 'yes' is read as a YAML 1.1 boolean" in str(err)


def test_unknown_guard_names_the_transition_and_close_matches(write_machine) -> None:  # type: ignore[no-untyped-def]
    err = _error(write_machine, GOOD.replace("guards: [can_retry]", "guards: [can_retryy]"))
    assert str(err) == (
        f"{err.first.path}:18: transition 'api_retry' names guard 'can_retryy', which is not registered "
        "(did you mean 'can_retry'?)"
    )


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "to: done, reason: answered",
            "to: donee, reason: answered",
            "names state 'donee', which is not declared (did you mean 'done'?)",
        ),
        (
            "counter: retries,",
            "counter: retriess,",
            "names counter 'retriess', which is not declared (did you mean 'retries'?)",
        ),
        (
            "cap: max_retries",
            "cap: max_retry",
            "names param 'max_retry', which is not declared (did you mean 'max_retries'?)",
        ),
        ("reason: gave_up", "reason: answered", "reason 'answered' is used twice"),
        ("emits: [ok, overloaded]", "emits: [ok, overloaded, slow]", "names event 'slow', which is not declared"),
        (
            "{from: calling, event: abort, to: aborted, reason: cancelled}",
            "{from: aborted, event: abort, to: done, reason: cancelled}",
            "leaves terminal state 'aborted'",
        ),
        ("  - {from: calling, event: ok, to: done, reason: answered}\n", "", "emits 'ok' but no transition handles it"),
        (
            "  - {from: calling, event: abort, to: aborted, reason: cancelled}\n",
            "",
            "has no transition for the abort event 'abort'",
        ),
        ("reason: gave_up", "reason: gave_up, counter: retries", "which is guarded"),
        ("scope: request", "scope: forever", "counter 'retries' has scope 'forever', which is not declared"),
    ],
)
def test_each_semantic_problem_has_a_precise_message(write_machine, old: str, new: str, expected: str) -> None:  # type: ignore[no-untyped-def]
    assert old in GOOD
    err = _error(write_machine, GOOD.replace(old, new))
    assert expected in str(err)
    assert err.first.line is not None


def test_unknown_key_lists_the_allowed_keys(write_machine) -> None:  # type: ignore[no-untyped-def]
    err = _error(write_machine, GOOD.replace("reason: gave_up}", "reason: gave_up, guard: [x]}"))
    assert "unknown key 'guard'" in str(err) and "allowed keys here:" in str(err) and "guards" in str(err)
    assert err.first.line == 19


def test_unresolvable_handler_fails_at_load_with_close_matches(write_machine) -> None:  # type: ignore[no-untyped-def]
    err = _error(
        write_machine, GOOD.replace("effect: queryloop.fsm.testing.scripted", "effect: queryloop.fsm.testing.scriptd")
    )
    assert "module 'queryloop.fsm.testing' has no callable 'scriptd' (did you mean 'scripted'?)" in str(err)
    err = _error(
        write_machine, GOOD.replace("effect: queryloop.fsm.testing.scripted", "effect: queryloop.fsm.testin.scripted")
    )
    assert "cannot import module 'queryloop.fsm.testin' (did you mean 'queryloop.fsm.testing'?)" in str(err)


def test_an_effect_that_is_not_async_is_rejected(write_machine) -> None:  # type: ignore[no-untyped-def]
    err = _error(
        write_machine, GOOD.replace("effect: queryloop.fsm.testing.scripted", "effect: queryloop.fsm.testing.flag_a")
    )
    assert "is not an `async def`" in str(err)


def test_invalid_yaml_syntax_names_the_line(write_machine) -> None:  # type: ignore[no-untyped-def]
    err = _error(write_machine, GOOD.replace("events: {ok", "events: [ok"))
    assert "invalid YAML" in str(err) and err.first.line is not None


def test_a_missing_file_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read the machine file"):
        load_machine(tmp_path / "nope.yaml")


def test_all_problems_are_reported_together(write_machine) -> None:  # type: ignore[no-untyped-def]
    text = GOOD.replace("to: done, reason: answered", "to: donee, reason: answered").replace(
        "counter: retries,", "counter: retriess,"
    )
    err = _error(write_machine, text)
    assert len(err.problems) == 2
