"""The typed observation channel: a closed set of items, observers that declare what they read of the machine.

A rename in the YAML must fail loudly for every observer that compares steps with the
old name: the declared reads are checked against the machine (as handlers' ``@uses``
are), and a scan of the observers' modules finds any state or reason name they use
without declaring it.
"""

from __future__ import annotations

import ast
import gc
import io
from pathlib import Path

import pytest

from queryloop.frontends import console, sdk_protocol, status_line
from queryloop.fsm import Program, SpecError, Step, check_observers, load_machine, uses
from queryloop.fsm.model.contract import reads_of
from queryloop.handlers.session.services.transcript import TranscriptWriter
from queryloop.machines import MACHINES_DIR
from queryloop.run.agent import OBSERVER_CHECKS, AgentRun, ObserverChecks, query_loop_program
from queryloop.run.config import AgentOptions, RequestSettings, SessionSettings
from queryloop.run.observe import OBSERVATION_TYPES
from queryloop.testing import ScriptedBackend, scripted_reply

ROOT = Path(__file__).resolve().parents[2]
SPEC = query_loop_program(str(MACHINES_DIR / "query_loop.yaml")).spec
STATES = {s.name for s in SPEC.states}
REASONS = {t.reason for t in SPEC.transitions}

OBSERVERS = {
    "queryloop/frontends/console.py": (console.TextRenderer, console.JsonRenderer, console.StreamJsonRenderer),
    "queryloop/frontends/renderer.py": (console.TextRenderer, console.JsonRenderer, console.StreamJsonRenderer),
    "queryloop/frontends/stream_json.py": (console.TextRenderer, console.JsonRenderer, console.StreamJsonRenderer),
    "queryloop/frontends/interactive.py": (status_line.TerminalRenderer,),
    "queryloop/frontends/status_line.py": (status_line.TerminalRenderer,),
    "queryloop/frontends/sdk_protocol.py": (sdk_protocol._SessionRenderer,),
    "handlers/session/services/transcript.py": (TranscriptWriter,),
    "queryloop/run/agent.py": (AgentRun,),
}
# strings that equal a machine name by coincidence: what they mean in their module
NOT_A_STEP = {
    ("queryloop/frontends/console.py", "prompt_too_long"): "an error kind a request log carries",
    ("queryloop/frontends/console.py", "api_retry"): "the subtype of Claude Code's system/api_retry line",
    (
        "queryloop/frontends/console.py",
        "permission_denied",
    ): "the subtype of Claude Code's system/permission_denied line",
    ("queryloop/frontends/stream_json.py", "api_retry"): "the subtype of Claude Code's system/api_retry line",
    (
        "queryloop/frontends/stream_json.py",
        "permission_denied",
    ): "the subtype of Claude Code's system/permission_denied line",
    ("queryloop/frontends/sdk_protocol.py", "internal_error"): "a control response's error code",
}


def test_every_shipped_observer_reads_only_what_the_machine_declares() -> None:
    check_observers(SPEC, [cls for classes in OBSERVERS.values() for cls in classes])


def test_an_observer_reading_a_renamed_state_is_refused_when_attached(tmp_path: Path) -> None:
    @uses(states=("calling_the_model",), reasons=("api_retry_again",))
    class Stale:
        def observe(self, item: object) -> None: ...

    options = AgentOptions(
        prompt="hi", cwd=tmp_path, request=RequestSettings(model="m"), session=SessionSettings(persist=False)
    )
    backend = ScriptedBackend(lambda call: scripted_reply([{"type": "text", "text": "ok"}]))
    with pytest.raises(SpecError) as refused:
        AgentRun(options, backend, observers=(Stale(),))
    text = str(refused.value)
    assert "state 'calling_the_model'" in text and "did you mean 'calling_model'" in text
    assert "reason 'api_retry_again'" in text


def test_observer_checks_are_held_per_program_object_and_forgotten_with_it() -> None:
    """Keyed by the program itself, not its id(): a later program that reuses a freed id is checked again."""
    checks = ObserverChecks()

    class Reader:
        def observe(self, item: object) -> None: ...

    program = Program(load_machine(MACHINES_DIR / "examples" / "retry_fetch.yaml"))
    checks.check(program, [Reader()])
    assert checks.checked(program) == {Reader}
    other = Program(load_machine(MACHINES_DIR / "examples" / "retry_fetch.yaml"))
    assert checks.checked(other) == frozenset(), "another program's observers are checked on their own"
    del program
    gc.collect()
    assert len(checks._checked) == 0, "a program gone takes its record with it"
    checks.check(other, [Reader()])
    checks.clear()
    assert checks.checked(other) == frozenset()


def test_the_process_record_of_checked_observers_is_the_one_runs_use(tmp_path: Path) -> None:
    OBSERVER_CHECKS.clear()
    options = AgentOptions(
        prompt="hi", cwd=tmp_path, request=RequestSettings(model="m"), session=SessionSettings(persist=False)
    )
    backend = ScriptedBackend(lambda call: scripted_reply([{"type": "text", "text": "ok"}]))
    run = AgentRun(options, backend)
    assert AgentRun in OBSERVER_CHECKS.checked(run.program)


def test_the_observers_name_no_state_or_reason_they_do_not_declare() -> None:
    """A state or reason named anywhere in an observer's module is one a class there declares it reads."""
    undeclared = []
    for rel, classes in OBSERVERS.items():
        declared = {name for cls in classes for kind in ("states", "reasons") for name in getattr(reads_of(cls), kind)}
        tree = ast.parse((ROOT / rel).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in STATES | REASONS:
                if node.value not in declared and (rel, node.value) not in NOT_A_STEP:
                    undeclared.append(f"{rel}:{node.lineno}: {node.value!r}")
    assert not undeclared, "declare it with @uses(states=..., reasons=...) on the class that reads it:\n" + "\n".join(
        undeclared
    )


def test_effects_publish_only_the_observations_the_channel_declares() -> None:
    """Every item an effect hands to ``publish`` is one of the closed set (the runner adds the Step)."""
    names = {t.__name__ for t in OBSERVATION_TYPES}
    published = []
    for path in sorted((ROOT / "handlers").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", getattr(node.func, "id", None)) == "publish"
                and node.args
                and isinstance(node.args[0], ast.Call)
            ):
                made = node.args[0].func
                published.append((path, node.lineno, getattr(made, "id", getattr(made, "attr", "?"))))
    assert published, "the scan found no publish(...) call: it no longer reads the effects"
    strays = [f"{p.relative_to(ROOT)}:{line}: {name}" for p, line, name in published if name not in names]
    assert not strays, "add the type to queryloop.run.observe.Observation:\n" + "\n".join(strays)


def test_observers_are_told_every_step_in_order_and_the_items_between(tmp_path: Path) -> None:
    seen: list[object] = []

    class Recorder:
        def observe(self, item: object) -> None:
            seen.append(item)

    options = AgentOptions(
        prompt="hi", cwd=tmp_path, request=RequestSettings(model="m"), session=SessionSettings(persist=False)
    )
    backend = ScriptedBackend(lambda call: scripted_reply([{"type": "text", "text": "ok"}]))
    run = AgentRun(options, backend, observers=(Recorder(),))

    async def drive() -> list[object]:
        return [item async for item in run.events()]

    import asyncio

    yielded = asyncio.run(drive())
    steps = [item for item in seen if isinstance(item, Step)]
    assert steps == list(run.steps) and steps[-1].dest == "completed"
    assert all(isinstance(item, OBSERVATION_TYPES) for item in seen)
    assert all(isinstance(item, Step) for item in yielded), "published items go to the observers, not the loop"
    assert any(not isinstance(item, Step) for item in seen)


def test_one_renderer_class_per_format_with_no_private_overrides() -> None:
    assert set(console.RENDERERS) == {"text", "json", "stream-json"}
    assert len(set(console.RENDERERS.values())) == 3
    subclasses = (status_line.TerminalRenderer, sdk_protocol._SessionRenderer, *console.RENDERERS.values())
    for cls in subclasses:
        for name in vars(cls):
            if name.startswith("_") and not name.startswith("__"):
                assert not any(name in vars(base) for base in cls.__mro__[1:]), f"{cls.__name__} overrides {name}"
    out = io.StringIO()
    console.renderer_for("json", session_id="s", stdout=out).show_result({"type": "result"})
    assert out.getvalue().startswith('{"type": "result"')
