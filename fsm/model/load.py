"""Reading a machine declaration: YAML → validated :class:`~queryloop.fsm.model.spec.MachineSpec` + bound handlers.

Runs the passes in order: ``source``, ``templates``, the schema, ``build``, ``rules``,
``bind``. Each pass reports all its problems in one :class:`SpecError`, each with
``path:line`` and a fix.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..errors import SpecError, SpecProblem
from .bind import Machine, bind_machine, check_observers
from .build import build_spec
from .rules import INTERNAL_ERROR, validate_spec
from .schema import MACHINE_SCHEMA, SCHEMA_VERSION
from .spec import MachineSpec

__all__ = ["INTERNAL_ERROR", "Machine", "check_observers", "load_machine", "machine_from_spec", "parse_machine"]


def parse_machine(text: str, path: str = "<string>", *, bind: bool = True) -> Machine:
    """Build a machine from YAML text; ``path`` is used in messages. ``bind=False`` skips imports."""
    # Here, not at the top: a machine rebuilt from the cache (``cache``) never loads PyYAML or jsonschema.
    from .source import read_yaml, schema_problems
    from .templates import TEMPLATE_SCHEMA, expand_templates

    source = read_yaml(
        text, path, empty_fix="declare at least schema_version, machine, initial, events, states and transitions"
    )
    _refuse(schema_problems(TEMPLATE_SCHEMA, source))
    source, templates, instances, problems = expand_templates(source)
    _refuse(problems)
    fixes = {"schema_version": f"add `schema_version: {SCHEMA_VERSION}` at the top of the file"}
    _refuse(schema_problems(MACHINE_SCHEMA, source, fixes=fixes))
    spec, problems = build_spec(source, path, templates=templates, instances=instances)
    _refuse(problems)
    _refuse(validate_spec(spec, source.lines))
    if not bind:
        return Machine(spec=spec, effects={}, guards={}, handlers={})
    return bind_machine(spec, source.lines)


def _refuse(problems: Sequence[SpecProblem]) -> None:
    """A pass's problems end the load: the next pass reads what this one accepted."""
    if problems:
        raise SpecError(problems)


def load_machine(path: str | Path, *, bind: bool = True) -> Machine:
    """Read and build the machine declared in the YAML file at ``path``."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        problem = f"not UTF-8 text ({exc.reason} at byte {exc.start})"
        raise SpecError([SpecProblem(str(p), None, problem, "save the file as UTF-8")]) from None
    except OSError as exc:
        raise SpecError(
            [SpecProblem(str(p), None, f"cannot read the machine file: {exc.strerror}", "check the path")]
        ) from None
    return parse_machine(text, str(p), bind=bind)


def machine_from_spec(spec: MachineSpec) -> Machine:
    """The machine of a declaration read before (``cache``): every semantic rule checked again, its handlers bound.

    Raises :class:`SpecError` as :func:`parse_machine` would, without lines (the declaration's source is not read).
    """
    _refuse(validate_spec(spec))
    return bind_machine(spec, {})
