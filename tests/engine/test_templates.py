"""Templates: a ladder declared once and instantiated, expanded at load into the flat machine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest

from queryloop.fsm import SpecError, parse_machine
from queryloop.fsm.model.spec import MachineSpec

ROOT = Path(__file__).resolve().parents[2]

HEAD = """\
schema_version: 1
machine: tiny
initial: calling
events: {ok: "", overloaded: "", elapsed: "", abort: ""}
scopes: [request, turn]
counters:
  retries: {cap: 3, scope: request}
"""
TEMPLATES = """\
templates:
  retry_ladder:
    params:
      state: the waiting state
      caller: the state sent again
      retry: the reason of a retry
      give_up_doc: {default: "", doc: the doc of giving up}
    states:
      "{state}": {effect: queryloop.fsm.testing.scripted, emits: [elapsed]}
    transitions:
      - {from: "{state}", event: elapsed, to: "{caller}", reason: "{retry}", counter: retries}
      - {from: "{state}", event: elapsed, to: done, reason: "{retry}_exhausted", doc: "{give_up_doc}"}
instances:
  calling_retries:
    template: retry_ladder
    with: {state: backing_off, caller: calling, retry: api_retry}
"""
STATES = """\
states:
  calling: {effect: queryloop.fsm.testing.scripted, emits: [ok, overloaded]}
  backing_off: {instance: calling_retries}
  done: {terminal: true, result: {is_error: false}}
  aborted: {terminal: true}
  internal_error: {terminal: true, result: {is_error: true, subtype: error_during_execution}}
transitions:
  - {from: calling, event: ok, to: done, reason: answered}
  - {from: calling, event: overloaded, to: backing_off, reason: api_backoff}
  - instance: calling_retries
  - {from: [calling, backing_off], event: abort, to: aborted, reason: cancelled}
"""
FLAT = """\
states:
  calling: {effect: queryloop.fsm.testing.scripted, emits: [ok, overloaded]}
  backing_off: {effect: queryloop.fsm.testing.scripted, emits: [elapsed]}
  done: {terminal: true, result: {is_error: false}}
  aborted: {terminal: true}
  internal_error: {terminal: true, result: {is_error: true, subtype: error_during_execution}}
transitions:
  - {from: calling, event: ok, to: done, reason: answered}
  - {from: calling, event: overloaded, to: backing_off, reason: api_backoff}
  - {from: backing_off, event: elapsed, to: calling, reason: api_retry, counter: retries}
  - {from: backing_off, event: elapsed, to: done, reason: api_retry_exhausted}
  - {from: [calling, backing_off], event: abort, to: aborted, reason: cancelled}
"""
GOOD = HEAD + TEMPLATES + STATES


def _error(text: str) -> SpecError:
    with pytest.raises(SpecError) as info:
        parse_machine(text, "tiny.yaml", bind=False)
    return info.value


def _without_lines(value: Any) -> Any:
    """A spec as plain data, source lines and the template records left out."""
    if attrs.has(type(value)):
        return {
            f.name: _without_lines(getattr(value, f.name))
            for f in attrs.fields(type(value))
            if f.name not in ("line", "instances", "templates")
        }
    if isinstance(value, tuple | list):
        return [_without_lines(v) for v in value]
    if isinstance(value, dict):
        return {k: _without_lines(v) for k, v in value.items()}
    return value


def _flat(spec: MachineSpec) -> str:
    return json.dumps(_without_lines(spec), sort_keys=True)


def test_an_instance_expands_to_the_machine_written_flat_edges_in_place() -> None:
    templated = parse_machine(GOOD, "tiny.yaml", bind=False).spec
    flat = parse_machine(HEAD + FLAT, "tiny.yaml", bind=False).spec
    assert _flat(templated) == _flat(flat)
    assert [t.reason for t in templated.transitions][1:4] == ["api_backoff", "api_retry", "api_retry_exhausted"]
    (instance,) = templated.instances
    assert (instance.template, instance.states, instance.reasons) == (
        "retry_ladder",
        ("backing_off",),
        ("api_retry", "api_retry_exhausted"),
    )


def test_an_expanded_edge_keeps_the_line_of_its_template() -> None:
    spec = parse_machine(GOOD, "tiny.yaml", bind=False).spec
    retry = next(t for t in spec.transitions if t.reason == "api_retry")
    assert (
        retry.line
        == GOOD.splitlines().index(
            '      - {from: "{state}", event: elapsed, to: "{caller}", reason: "{retry}", counter: retries}'
        )
        + 1
    )


def test_the_shipped_query_loop_declares_its_compaction_and_request_ladders_once() -> None:
    from queryloop.fsm import load_machine

    spec = load_machine(ROOT / "machines" / "query_loop.yaml", bind=False).spec
    uses = {i.name: i.template for i in spec.instances}
    assert uses == {
        "api_retries": "retry_ladder",
        "auto_compaction": "compaction_ladder",
        "reactive_compaction": "compaction_ladder",
        "manual_compaction": "compaction_ladder",
    }
    manual = next(i for i in spec.instances if i.name == "manual_compaction")
    assert manual.states == ("manual_compacting", "backing_off_manual_summary")
    assert "manual_summary_retry" in manual.reasons


def test_an_unknown_parameter_is_refused_with_the_declared_ones() -> None:
    err = _error(GOOD.replace("retry: api_retry}", "retry: api_retry, retries: 3}"))
    assert "instance 'calling_retries' gives 'retries', which template 'retry_ladder' does not declare" in str(err)
    assert "its params are: state, caller, retry, give_up_doc" in str(err)
    assert (
        err.first.line
        == GOOD.splitlines().index("    with: {state: backing_off, caller: calling, retry: api_retry}") + 1
    )


def test_a_missing_parameter_is_refused_with_the_fix() -> None:
    err = _error(GOOD.replace(", caller: calling", ""))
    assert "instance 'calling_retries' does not give 'caller', a param of template 'retry_ladder'" in str(err)
    assert "add `caller: …` under its `with:`" in str(err)
    assert err.first.path == "tiny.yaml"
    assert err.first.line is not None


def test_a_template_using_an_undeclared_parameter_is_refused_at_its_line() -> None:
    text = GOOD.replace('reason: "{retry}_exhausted"', 'reason: "{retyr}_exhausted"')
    err = _error(text)
    assert "template 'retry_ladder' uses {retyr}, which it does not declare" in str(err)
    assert "declare 'retyr' under its `params:`" in str(err)
    assert (
        err.first.line
        == text.splitlines().index(
            '      - {from: "{state}", event: elapsed, to: done, reason: "{retyr}_exhausted", doc: "{give_up_doc}"}'
        )
        + 1
    )


def test_an_instance_state_colliding_with_a_hand_written_one_is_refused() -> None:
    text = GOOD.replace(
        "  backing_off: {instance: calling_retries}",
        "  backing_off: {effect: queryloop.fsm.testing.scripted, emits: [elapsed]}",
    )
    err = _error(text)
    assert "state 'backing_off' is written by hand and declared by instance 'calling_retries' too" in str(err)


def test_an_instance_reason_colliding_with_a_hand_written_one_is_refused() -> None:
    err = _error(GOOD.replace("reason: answered", "reason: api_retry"))
    assert "instance 'calling_retries' declares reason 'api_retry', which a hand-written transition has too" in str(err)


def test_two_instances_declaring_one_state_are_refused() -> None:
    text = GOOD.replace(
        "instances:\n",
        "instances:\n  again:\n    template: retry_ladder\n"
        "    with: {state: backing_off, caller: calling, retry: other_retry}\n",
    )
    err = _error(text)
    assert "declares state 'backing_off', which instance" in str(err)


def test_an_unknown_template_is_refused_with_the_declared_ones() -> None:
    err = _error(GOOD.replace("template: retry_ladder", "template: retry_laddr"))
    assert "instance 'calling_retries' uses template 'retry_laddr', which is not declared" in str(err)
    assert "declared: retry_ladder" in str(err)


def test_placing_an_undeclared_instance_is_refused() -> None:
    err = _error(GOOD.replace("  - instance: calling_retries", "  - instance: caling_retries"))
    assert "`instance: caling_retries` does not name an instance declared under `instances:`" in str(err)
    assert "declared instances: calling_retries" in str(err)


def test_placing_a_state_the_instance_does_not_declare_is_refused() -> None:
    err = _error(
        GOOD.replace("  done: {terminal: true,", "  waiting: {instance: calling_retries}\n  done: {terminal: true,")
    )
    assert "state 'waiting' is placed from instance 'calling_retries', which declares no such state" in str(err)
    assert "its states are: backing_off" in str(err)


def test_a_template_that_uses_itself_is_refused() -> None:
    text = GOOD.replace(
        '      - {from: "{state}", event: elapsed, to: done,',
        "      - use: retry_ladder\n        with: {state: x, caller: y, retry: z}\n"
        '      - {from: "{state}", event: elapsed, to: done,',
    )
    err = _error(text)
    assert "template 'retry_ladder' uses itself (retry_ladder → retry_ladder)" in str(err)


def test_an_expanded_edge_that_breaks_the_schema_points_into_the_template() -> None:
    text = GOOD.replace("counter: retries}", "counter: retries, progres: true}")
    err = _error(text)
    assert "progres" in str(err)
    assert err.first.line == next(i for i, line in enumerate(text.splitlines(), 1) if "progres: true" in line)


def test_a_mistake_in_a_template_is_reported_once_whatever_the_number_of_instances() -> None:
    text = GOOD.replace('reason: "{retry}_exhausted"', 'reason: "{retyr}_exhausted"').replace(
        "instances:\n",
        "instances:\n  again:\n    template: retry_ladder\n    with: {state: waiting, caller: calling, retry: again}\n",
    )
    err = _error(text)
    assert str(err).count("uses {retyr}") == 1


def test_a_default_built_from_other_params_takes_each_instances_values() -> None:
    text = GOOD.replace(
        'give_up_doc: {default: "", doc: the doc of giving up}',
        'give_up_doc: {default: "{retry}s spent, back from {state}", doc: the doc of giving up}',
    )
    spec = parse_machine(text, "tiny.yaml", bind=False).spec
    exhausted = next(t for t in spec.transitions if t.reason == "api_retry_exhausted")
    assert exhausted.doc == "api_retrys spent, back from backing_off"
    (instance,) = spec.instances
    assert dict(instance.values)["give_up_doc"] == "api_retrys spent, back from backing_off"
    (template,) = spec.templates
    assert dict(template.params)["give_up_doc"] == "the doc of giving up (default: {retry}s spent, back from {state})"


def test_a_default_may_name_a_param_that_has_a_default_itself() -> None:
    text = GOOD.replace(
        '      give_up_doc: {default: "", doc: the doc of giving up}',
        '      give_up_doc: {default: "{exhausted}", doc: the doc of giving up}\n'
        '      exhausted: {default: "{retry}_exhausted", doc: the reason of giving up}',
    ).replace('reason: "{retry}_exhausted"', 'reason: "{exhausted}"')
    spec = parse_machine(text, "tiny.yaml", bind=False).spec
    exhausted = spec.transitions[3]
    assert (exhausted.reason, exhausted.doc) == ("api_retry_exhausted", "api_retry_exhausted")


def test_a_default_naming_an_undeclared_param_is_refused_at_its_line() -> None:
    text = GOOD.replace(
        'give_up_doc: {default: "", doc: the doc of giving up}',
        'give_up_doc: {default: "{retyr} spent", doc: the doc of giving up}',
    )
    err = _error(text)
    assert (
        "the default of param 'give_up_doc' of template 'retry_ladder' uses {retyr},"
        " which the template does not declare" in str(err)
    )
    assert "declare 'retyr' under its `params:` (declared: state, caller, retry, give_up_doc)" in str(err)
    assert err.first.line == next(i for i, line in enumerate(text.splitlines(), 1) if "{retyr} spent" in line)
    assert str(err).count("{retyr}") == 1  # once, though no instance leaves the param out


def test_defaults_naming_each_other_are_refused_with_the_cycle() -> None:
    text = GOOD.replace(
        '      give_up_doc: {default: "", doc: the doc of giving up}',
        '      give_up_doc: {default: "{give_up}", doc: the doc of giving up}\n'
        '      give_up: {default: "after {give_up_doc}", doc: where the run goes}',
    )
    err = _error(text)
    assert "the defaults of template 'retry_ladder' use each other (give_up_doc → give_up → give_up_doc)" in str(err)
    assert "give one of them a default naming none of the others, or no default" in str(err)


def test_no_instance_of_the_shipped_query_loop_gives_a_param_its_default() -> None:
    import yaml

    data = yaml.safe_load((ROOT / "machines" / "query_loop.yaml").read_text(encoding="utf-8"))
    for name, instance in data["instances"].items():
        declared = data["templates"][instance["template"]]["params"]
        for param, value in instance["with"].items():
            spec = declared[param]
            if isinstance(spec, dict) and "{" not in str(spec["default"]):
                assert value != spec["default"], f"instance {name!r} gives {param!r} its default: leave it out"
