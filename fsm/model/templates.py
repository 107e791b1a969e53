"""Sub-machines: expanding ``templates:`` and ``instances:`` into the flat declaration every other pass reads.

Owns the expansion only, each expanded node keeping its template node's line; the schema
and :mod:`queryloop.fsm.model.rules` validate the result. The rules: docs/machines.md, "Templates".
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

import attrs

from ..errors import SpecProblem
from .source import Source
from .spec import InstanceSpec, StateSpec, TemplateSpec, TransitionSpec

__all__ = ["TEMPLATE_SCHEMA", "expand_templates"]

_Path = tuple[Any, ...]
_Lines = Mapping[_Path, list[tuple[_Path, int]]]
_PARAM = re.compile(r"\{([a-z][a-z0-9_]*)\}")
_NAME = {"type": "string", "pattern": "^[a-z][a-z0-9_]*$"}
_USE = {
    "type": "object",
    "required": ["use", "with"],
    "additionalProperties": False,
    "properties": {"use": _NAME, "with": {"type": "object", "propertyNames": _NAME}},
}

TEMPLATE_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "queryloop machine templates",
    "type": "object",
    "properties": {
        "templates": {
            "type": "object",
            "propertyNames": _NAME,
            "additionalProperties": {
                "type": "object",
                "required": ["params"],
                "additionalProperties": False,
                "properties": {
                    "doc": {"type": "string"},
                    "params": {
                        "type": "object",
                        "propertyNames": _NAME,
                        "additionalProperties": {
                            "oneOf": [
                                {"type": "string"},
                                {
                                    "type": "object",
                                    "required": ["default"],
                                    "additionalProperties": False,
                                    "properties": {"default": {}, "doc": {"type": "string"}},
                                },
                            ]
                        },
                    },
                    "states": {"type": "object"},
                    "transitions": {"type": "array", "items": {"type": "object"}},
                },
            },
        },
        "instances": {
            "type": "object",
            "propertyNames": _NAME,
            "additionalProperties": {
                "type": "object",
                "required": ["template", "with"],
                "additionalProperties": False,
                "properties": {
                    "template": _NAME,
                    "with": {"type": "object", "propertyNames": _NAME},
                    "doc": {"type": "string"},
                },
            },
        },
    },
}
"""The shape of ``templates:`` and ``instances:``; what a template expands to meets the machine schema."""


@attrs.frozen(kw_only=True)
class Instance:
    """An instance as expanded: its states and transitions (each with the path of the node it came from)."""

    name: str
    template: str
    values: Mapping[str, Any]
    states: tuple[tuple[str, Any, _Path], ...]  # (name, body, path of the body)
    transitions: tuple[tuple[Any, _Path], ...]  # (transition, path of the transition)


class _Expander:
    def __init__(self, source: Source) -> None:
        self.source = source
        self.templates: Mapping[str, Any] = source.data.get("templates") or {}
        self.problems: list[SpecProblem] = []
        self.old_lines = _by_node(source.lines)

    def problem(self, where: _Path, message: str, fix: str) -> None:
        self.problems.append(self.source.problem(where, message, fix))

    def values(self, template: str, given: Mapping[str, object], where: _Path, who: str) -> dict[str, Any] | None:
        """The values of ``template``'s params for one use: given, else the param's default (its
        ``{param}``s filled in from the others)."""
        declared: Mapping[str, object] = self.templates[template]["params"]
        ok = True
        for name in given:
            if name not in declared:
                known = ", ".join(declared) or "none"
                self.problem(
                    (*where, name),
                    f"{who} gives {name!r}, which template {template!r} does not declare",
                    f"its params are: {known}",
                )
                ok = False
        out: dict[str, object] = {name: given[name] for name in declared if name in given}
        for name, spec in declared.items():
            if name not in given and not isinstance(spec, dict):
                self.problem(
                    where,
                    f"{who} does not give {name!r}, a param of template {template!r}",
                    f"add `{name}: …` under its `with:`",
                )
                ok = False
        if not ok:
            return None
        for name in declared:
            self.default(template, name, out)
        return {name: out[name] for name in declared}

    def default(self, template: str, name: str, out: dict[str, Any]) -> None:
        """Fill ``out[name]`` from its default, the params it names first (checked acyclic and declared)."""
        if name in out:
            return
        value = self.templates[template]["params"][name]["default"]
        for used in _params_in(value):
            self.default(template, used, out)
        out[name] = self.substitute(value, out, ("templates", template, "params", name, "default"), template)

    def check_defaults(self, template: str) -> None:
        """Refuse a default naming a ``{param}`` the template does not declare, or defaults naming each other."""
        declared: Mapping[str, object] = self.templates[template]["params"]
        uses = {name: _params_in(spec["default"]) for name, spec in declared.items() if isinstance(spec, dict)}
        for name, used in uses.items():
            for other in used:
                if other not in declared:
                    self.problem(
                        ("templates", template, "params", name, "default"),
                        f"the default of param {name!r} of template {template!r} uses {{{other}}},"
                        " which the template does not declare",
                        f"declare {other!r} under its `params:` (declared: {', '.join(declared)})",
                    )
        cycle = _cycle(uses)
        if cycle:
            self.problem(
                ("templates", template, "params", cycle[0], "default"),
                f"the defaults of template {template!r} use each other ({' → '.join(cycle)})",
                "give one of them a default naming none of the others, or no default",
            )

    def substitute(self, value: object, values: Mapping[str, object], where: _Path, template: str) -> Any:
        """``value`` with every ``{param}`` replaced; a string that is one ``{param}`` takes the value as is."""
        if isinstance(value, dict):
            return {
                self.substitute(k, values, where, template): self.substitute(v, values, (*where, k), template)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [self.substitute(v, values, (*where, i), template) for i, v in enumerate(value)]
        if not isinstance(value, str):
            return value
        whole = _PARAM.fullmatch(value)
        if whole and whole.group(1) in values:
            return copy.deepcopy(values[whole.group(1)])  # each use its own copy: no node is shared

        def one(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in values:
                known = ", ".join(values) or "none"
                self.problem(
                    where,
                    f"template {template!r} uses {{{name}}}, which it does not declare",
                    f"declare {name!r} under its `params:` (declared: {known})",
                )
                return match.group(0)
            return str(values[name])

        return _PARAM.sub(one, value)

    def expand(
        self, template: str, given: Mapping[str, object], where: _Path, who: str, stack: tuple[str, ...]
    ) -> Instance | None:
        """One use of ``template``: its states and transitions, nested uses expanded in place."""
        if template not in self.templates:
            known = ", ".join(self.templates) or "none"
            self.problem(
                where,
                f"{who} uses template {template!r}, which is not declared",
                f"declare it under `templates:` (declared: {known})",
            )
            return None
        if template in stack:
            self.problem(
                where,
                f"template {template!r} uses itself ({' → '.join((*stack, template))})",
                "a template may use other templates, never itself",
            )
            return None
        values = self.values(template, given, (*where, "with"), who)
        if values is None:
            return None
        body = self.templates[template]
        here: _Path = ("templates", template)
        states: list[tuple[str, object, _Path]] = []
        for key, state in (body.get("states") or {}).items():
            at = (*here, "states", key)
            name = self.substitute(key, values, at, template)
            if not isinstance(name, str):
                self.problem(at, f"{who} names a state of template {template!r} {name!r}", "give a state name")
                continue
            states.append((name, self.substitute(state, values, at, template), at))
        transitions: list[tuple[object, _Path]] = []
        for i, t in enumerate(body.get("transitions") or ()):
            at = (*here, "transitions", i)
            if "use" in t:
                nested = self.substitute(t.get("with") or {}, values, (*at, "with"), template)
                inner = self.expand(t["use"], nested, at, f"template {template!r}", (*stack, template))
                if inner is not None:
                    states.extend(inner.states)
                    transitions.extend(inner.transitions)
                continue
            transitions.append((self.substitute(t, values, at, template), at))
        return Instance(
            name=who, template=template, values=values, states=tuple(states), transitions=tuple(transitions)
        )


def expand_templates(
    source: Source,
) -> tuple[Source, tuple[TemplateSpec, ...], tuple[InstanceSpec, ...], list[SpecProblem]]:
    """The flat machine ``source`` declares: templates instantiated where the file places them.

    Returns the flat source (no ``templates:``/``instances:`` keys, lines remapped so each
    expanded node keeps its template's line), the templates in their generic form, the
    instances, and the problems found (the rest is meaningless when there are any).
    """
    data = source.data
    if not isinstance(data, dict) or ("templates" not in data and "instances" not in data):
        return source, (), (), []
    ex = _Expander(source)
    for name in ex.templates:
        ex.check_defaults(name)
    if ex.problems:
        return source, (), (), _once(ex.problems)
    instances: dict[str, Instance] = {}
    for name, inst in (data.get("instances") or {}).items():
        expanded = ex.expand(inst["template"], inst["with"], ("instances", name), f"instance {name!r}", ())
        if expanded is not None:
            instances[name] = attrs.evolve(expanded, name=name)
    if ex.problems:
        return source, (), (), _once(ex.problems)
    flat = {k: v for k, v in data.items() if k not in ("templates", "instances", "states", "transitions")}
    lines: dict[_Path, int] = {p: n for p, n in source.lines.items() if p[:1] not in (("states",), ("transitions",))}
    flat["states"] = _place_states(ex, data.get("states") or {}, instances, lines)
    flat["transitions"] = _place_transitions(ex, data.get("transitions") or [], instances, lines)
    if ex.problems:
        return source, (), (), _once(ex.problems)
    templates = tuple(_generic(ex, name) for name in ex.templates)
    uses = tuple(
        InstanceSpec(
            name=i.name,
            template=i.template,
            doc=data["instances"][i.name].get("doc", ""),
            values=tuple(i.values.items()),
            states=tuple(name for name, _, _ in i.states),
            reasons=tuple(t["reason"] for t, _ in i.transitions),
        )
        for i in instances.values()
    )
    return attrs.evolve(source, data=flat, lines=lines), templates, uses, _once(ex.problems)


def _once(problems: list[SpecProblem]) -> list[SpecProblem]:
    """Each problem once: a template's mistake is met by each of its instances."""
    return list({str(p): p for p in problems}.values())


def _params_in(value: object) -> list[str]:
    """The ``{param}``s a value names, each once, in order."""
    if isinstance(value, str):
        return list(dict.fromkeys(_PARAM.findall(value)))
    if isinstance(value, dict):
        return list(dict.fromkeys(p for k, v in value.items() for p in (*_params_in(k), *_params_in(v))))
    if isinstance(value, list):
        return list(dict.fromkeys(p for v in value for p in _params_in(v)))
    return []


def _cycle(uses: Mapping[str, list[str]]) -> list[str]:
    """A cycle among the defaults (``[a, b, a]``: a's default names b, b's names a), else ``[]``."""
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> list[str]:
        if name in path:
            return [*path[path.index(name) :], name]
        if name in done or name not in uses:
            return []
        for used in uses[name]:
            found = visit(used, [*path, name])
            if found:
                return found
        done.add(name)
        return []

    for name in uses:
        found = visit(name, [])
        if found:
            return found
    return []


def _names(value: Any) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value or ())


def _generic(ex: _Expander, name: str) -> TemplateSpec:
    """``name`` expanded with each param standing for itself (``{kind}_compacting``), for the diagrams."""
    declared = ex.templates[name]["params"]
    own = {p: "{" + p + "}" for p in declared}
    doc = ex.templates[name].get("doc", "")
    params = tuple((p, _param_doc(v)) for p, v in declared.items())
    inst = ex.expand(name, own, ("templates", name), f"template {name!r}", ())
    if inst is None:  # a template no instance uses, broken: its problem is recorded
        return TemplateSpec(name=name, doc=doc, params=params)
    states = tuple(
        StateSpec(
            name=state,
            doc=str(body.get("doc", "")),
            layer=str(body.get("layer", "")),
            effect=body.get("effect"),
            emits=_names(body.get("emits")),
            exit=body.get("exit"),
            terminal=bool(body.get("terminal", False)),
        )
        for state, body, _ in inst.states
    )
    transitions = tuple(
        TransitionSpec(
            source=origin,
            event=t["event"],
            dest=t["to"],
            reason=t["reason"],
            guards=_names(t.get("guards")),
            counter=t.get("counter"),
            resets=_names(t.get("resets")),
            do=t.get("do"),
            progress=bool(t.get("progress", False)),
            ends=t.get("ends"),
        )
        for t, _ in inst.transitions
        for origin in _names(t["from"])
    )
    return TemplateSpec(name=name, doc=doc, params=params, states=states, transitions=transitions)


def _param_doc(spec: Any) -> str:
    """A param's doc as the diagrams and docs show it: with its default, unless that is empty."""
    if isinstance(spec, str):
        return spec
    doc, default = spec.get("doc", ""), spec["default"]
    if default in ("", [], None):
        return str(doc)
    shown = ", ".join(map(str, default)) if isinstance(default, list) else str(default)
    return f"{doc} (default: {shown})" if doc else f"default: {shown}"


def _copy_lines(lines: dict[_Path, int], old: _Lines, src: _Path, dst: _Path) -> None:
    for path, line in old.get(src, ()):
        lines[(*dst, *path[len(src) :])] = line


def _by_node(lines: Mapping[_Path, int]) -> _Lines:
    """The lines under each state, transition, template state and template transition, keyed by its path."""
    out: dict[_Path, list[tuple[_Path, int]]] = {}
    for path, line in lines.items():
        for size in (2, 4):  # ("states", name), ("templates", name, "transitions", i), …
            if len(path) >= size:
                out.setdefault(path[:size], []).append((path, line))
    return out


def _is_placeholder(value: object) -> bool:
    return isinstance(value, dict) and set(value) == {"instance"}


def _place_states(
    ex: _Expander, written: Mapping[str, Any], instances: Mapping[str, Instance], lines: dict[_Path, int]
) -> dict[str, object]:
    """The states in order: hand-written ones and placed instance states where written, the rest after."""
    old = ex.old_lines
    owner: dict[str, tuple[str, Any, _Path]] = {}
    for inst in instances.values():
        for name, body, at in inst.states:
            if name in owner:
                other = owner[name][0]
                ex.problem(
                    at,
                    f"instance {inst.name!r} declares state {name!r}, which instance {other!r} declares too",
                    "give the instances different names in their `with:`",
                )
            elif name in written and not _is_placeholder(written[name]):
                ex.problem(
                    ("states", name),
                    f"state {name!r} is written by hand and declared by instance {inst.name!r} too",
                    "rename one of them",
                )
            owner[name] = (inst.name, body, at)
    out: dict[str, Any] = {}
    for name, body in written.items():
        if not _is_placeholder(body):
            out[name] = body
            _copy_lines(lines, old, ("states", name), ("states", name))
        elif name not in owner or owner[name][0] != body["instance"]:
            known = [s for i in instances.values() if i.name == body["instance"] for s, _, _ in i.states]
            fix = f"its states are: {', '.join(known)}" if known else "name a declared instance"
            ex.problem(
                ("states", name),
                f"state {name!r} is placed from instance {body['instance']!r}, which declares no such state",
                fix,
            )
        else:
            out[name] = owner[name][1]
            _copy_lines(lines, old, owner[name][2], ("states", name))
    for name, (_, body, at) in owner.items():
        if name not in out and name not in written:
            out[name] = body
            _copy_lines(lines, old, at, ("states", name))
    return out


def _place_transitions(
    ex: _Expander, written: list[Any], instances: Mapping[str, Instance], lines: dict[_Path, int]
) -> list[object]:
    """The transitions in order: each ``- instance: NAME`` replaced by that instance's, unplaced ones last."""
    old = ex.old_lines
    out: list[object] = []
    placed: set[str] = set()

    def add(t: object, src: _Path) -> None:
        _copy_lines(lines, old, src, ("transitions", len(out)))
        out.append(t)

    for i, t in enumerate(written):
        if not (isinstance(t, dict) and "instance" in t):
            add(t, ("transitions", i))
        elif _placeable(ex, t, ("transitions", i), instances, placed):
            placed.add(t["instance"])
            for edge, src in instances[t["instance"]].transitions:
                add(edge, src)
    for name, inst in instances.items():
        if name not in placed:
            for edge, src in inst.transitions:
                add(edge, src)
    _check_instance_reasons(ex, written, instances)
    return out


def _placeable(
    ex: _Expander, t: Mapping[str, object], at: _Path, instances: Mapping[str, Instance], placed: set[str]
) -> bool:
    """Whether ``- instance: NAME`` at ``at`` places a declared instance not placed before (else a problem)."""
    name = t["instance"]
    if set(t) != {"instance"} or name not in instances:
        fix = (
            f"declared instances: {', '.join(instances) or 'none'}"
            if set(t) == {"instance"}
            else "write `- instance: NAME` alone"
        )
        ex.problem(at, f"`instance: {name}` does not name an instance declared under `instances:`", fix)
        return False
    if name in placed:
        ex.problem(at, f"instance {name!r} is placed twice", "keep one `- instance:` line per instance")
        return False
    return True


def _check_instance_reasons(ex: _Expander, written: list[Any], instances: Mapping[str, Instance]) -> None:
    """No instance's edge has the reason of a hand-written one."""
    hand = {t.get("reason") for t in written if isinstance(t, dict) and "instance" not in t}
    for inst in instances.values():
        for edge, src in inst.transitions:
            if isinstance(edge, dict) and edge.get("reason") in hand:
                ex.problem(
                    src,
                    f"instance {inst.name!r} declares reason {edge['reason']!r},"
                    " which a hand-written transition has too",
                    "a reason names one edge: rename one of them",
                )
