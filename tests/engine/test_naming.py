"""Names say what they are: one kind of thing per name; machines declaring their reason kinds follow the convention."""

from __future__ import annotations

import pytest

from queryloop.fsm import SpecError, load_machine, parse_machine
from queryloop.machines import shipped_machines

BASE = """\
schema_version: 1
machine: naming
initial: calling
reason_kinds:
  retry: the same request again
  exhausted: the budget is spent
events: {ok: "", overloaded: "", abort: ""}
scopes: [request]
counters:
  retries: {cap: 2, scope: request}
states:
  calling: {effect: queryloop.fsm.testing.scripted, emits: [ok, overloaded]}
  done: {terminal: true}
  aborted: {terminal: true}
  internal_error: {terminal: true, result: {is_error: true, subtype: error_during_execution}}
transitions:
  - {from: calling, event: ok, to: done, reason: answered}
  - {from: calling, event: overloaded, to: calling, reason: overloaded_retry, counter: retries}
  - {from: calling, event: overloaded, to: done, reason: retries_exhausted}
  - {from: calling, event: abort, to: aborted, reason: cancelled}
"""


def _problems(text: str) -> str:
    with pytest.raises(SpecError) as info:
        parse_machine(text, "naming.yaml")
    return str(info.value)


def test_the_base_machine_follows_the_convention() -> None:
    assert parse_machine(BASE, "naming.yaml").spec.reason_kinds["retry"] == "the same request again"


def test_a_name_that_is_both_an_event_and_a_reason_is_refused() -> None:
    text = BASE.replace("reason: answered", "reason: ok")
    assert "'ok' is both an event (line 7) and a reason" in _problems(text)


def test_a_name_that_is_both_a_state_and_a_reason_is_refused_with_both_lines() -> None:
    message = _problems(BASE.replace("reason: cancelled", "reason: aborted"))
    assert "'aborted' is both a state (line 14) and a reason" in message


def test_a_ladder_reason_without_a_declared_kind_is_refused() -> None:
    message = _problems(BASE.replace("reason: retries_exhausted", "reason: gave_up"))
    assert "reason 'gave_up' of a recovery ladder has no declared kind" in message
    assert "end it with one of: _retry, _exhausted" in message


def test_a_state_that_is_not_an_activity_is_refused() -> None:
    text = BASE.replace("calling", "caller")
    assert "state 'caller' is not named as an activity" in _problems(text)


def test_a_machine_without_reason_kinds_is_held_only_to_one_name_per_thing() -> None:
    text = BASE.replace("reason_kinds:\n  retry: the same request again\n  exhausted: the budget is spent\n", "")
    assert parse_machine(text.replace("reason: retries_exhausted", "reason: gave_up"), "n.yaml").spec.reason_kinds == {}


@pytest.mark.parametrize("path", shipped_machines(), ids=lambda p: p.stem)
def test_every_shipped_machine_declares_its_reason_kinds(path) -> None:  # type: ignore[no-untyped-def]
    assert load_machine(path, bind=False).spec.reason_kinds
