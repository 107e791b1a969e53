"""Reading a machine declaration: YAML → validated :class:`~queryloop.fsm.model.spec.MachineSpec` + bound handlers.

The only engine module that turns YAML into a machine or imports the Python a
machine names (files are read by :mod:`queryloop.fsm.model.source`). Every problem
becomes a :class:`~queryloop.fsm.errors.SpecProblem` carrying ``path:line`` and a
fix; all problems found are reported together in one :class:`SpecError`. All
dotted names are resolved here, at load time, never when an edge first fires —
relative ones (``.request.call_model``) against the machine's ``package`` — and
every counter, state and param a bound handler declares it reads
(:func:`~queryloop.fsm.model.contract.uses`) must exist in the machine.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from ..errors import SpecError, SpecProblem
from .contract import Uses, reads_of, uses_of
from .schema import MACHINE_SCHEMA, SCHEMA_VERSION
from .spec import (
    RUN,
    SPAN,
    ChildrenSpec,
    CounterSpec,
    EndRule,
    InvariantSpec,
    MachineSpec,
    ParamSpec,
    ParamType,
    PropertySpec,
    StateSpec,
    TransitionSpec,
)

__all__ = ["INTERNAL_ERROR", "Machine", "check_observers", "load_machine", "machine_from_spec", "parse_machine"]

_Path = tuple[Any, ...]

INTERNAL_ERROR = "internal_error"  # the terminal the engine enters when an effect, guard or handler raises


@attrs.frozen(kw_only=True)
class Machine:
    """A loaded machine: its declaration plus every Python callable it names, resolved."""

    spec: MachineSpec
    effects: Mapping[str, Callable[..., Any]]  # state name -> async effect
    guards: Mapping[str, Callable[..., bool]]  # guard name -> predicate
    handlers: Mapping[str, Callable[..., Any]]  # transition reason -> edge handler
    exits: Mapping[str, Callable[..., Any]] = attrs.field(factory=dict)  # state name -> exit handler
    invariants: Mapping[str, Callable[..., Any]] = attrs.field(factory=dict)  # invariant name -> (data) -> problem

    @property
    def name(self) -> str:
        return self.spec.name


def _line_of(lines: Mapping[_Path, int], path: Iterable[Any]) -> int | None:
    p = tuple(path)
    while p not in lines and p:
        p = p[:-1]
    return lines.get(p)


def _close(name: str, options: Iterable[str]) -> str:
    matches = difflib.get_close_matches(name, list(options), n=3, cutoff=0.8)
    if not matches:
        return ""
    return "did you mean " + " or ".join(repr(m) for m in matches) + "?"


# ---- handler resolution -----------------------------------------------------------------


def _resolve(dotted: str) -> tuple[Callable[..., Any] | None, str]:
    """Import ``pkg.module.attr``; return the object or ``None`` with a reason and a hint."""
    module_name, _, attr = dotted.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or module_name
        parent, _, leaf = missing.rpartition(".")
        siblings: list[str] = []
        if parent:
            try:
                pkg = importlib.import_module(parent)
                siblings = [m.name for m in pkgutil.iter_modules(getattr(pkg, "__path__", []))]
            except ImportError:
                siblings = []
        matches = difflib.get_close_matches(leaf, siblings, n=3, cutoff=0.8)
        hint = ("did you mean " + " or ".join(repr(f"{parent}.{m}") for m in matches) + "?") if matches else ""
        return None, f"cannot import module {missing!r}" + (f" ({hint})" if hint else "")
    except Exception as exc:  # the module itself is broken: say so, don't hide it
        return None, f"importing {module_name!r} failed: {type(exc).__name__}: {exc}"
    obj = getattr(module, attr, None)
    if obj is None or not callable(obj):
        names = [n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n, None))]
        hint = _close(attr, names)
        return None, f"module {module_name!r} has no callable {attr!r}" + (f" ({hint})" if hint else "")
    return obj, ""


# ---- building -----------------------------------------------------------------------------


def parse_machine(text: str, path: str = "<string>", *, bind: bool = True) -> Machine:
    """Build a machine from YAML text; ``path`` is used in messages. ``bind=False`` skips imports."""
    # Here, not at the top: a machine rebuilt from the cache (``cache``) never loads PyYAML or jsonschema.
    from .source import read_yaml, schema_problems
    from .templates import TEMPLATE_SCHEMA, expand_templates

    source = read_yaml(
        text, path, empty_fix="declare at least schema_version, machine, initial, events, states and transitions"
    )
    problems = schema_problems(TEMPLATE_SCHEMA, source)
    if problems:
        raise SpecError(problems)
    source, templates, instances, problems = expand_templates(source)
    if problems:
        raise SpecError(problems)
    data, lines = source.data, source.lines
    problems = schema_problems(
        MACHINE_SCHEMA,
        source,
        fixes={"schema_version": f"add `schema_version: {SCHEMA_VERSION}` at the top of the file"},
    )
    if problems:
        raise SpecError(problems)
    package: str = data.get("package", "")

    def absolute(name: str, where: Iterable[Any]) -> str:
        if not name.startswith("."):
            return name
        if not package:
            problems.append(
                source.problem(
                    where,
                    f"{name!r} is relative but the machine declares no `package`",
                    "add `package: your.handlers` at the top, or write the full dotted name",
                )
            )
            return name
        return package + name

    params = tuple(
        _param(name, value, _line_of(lines, ("params", name))) for name, value in (data.get("params") or {}).items()
    )
    events = {name: (doc or "") for name, doc in data["events"].items()}
    guards: dict[str, str] = {}
    guard_docs: dict[str, str] = {}
    guard_decides: dict[str, tuple[str, ...]] = {}
    for name, value in (data.get("guards") or {}).items():
        guards[name] = absolute(value if isinstance(value, str) else value["call"], ("guards", name))
        guard_docs[name] = "" if isinstance(value, str) else value.get("doc", "")
        if not isinstance(value, str) and "decides" in value:
            guard_decides[name] = tuple(value["decides"])
    scopes = tuple(data.get("scopes") or (SPAN,))
    counters = tuple(
        CounterSpec(
            name=name,
            cap=c["cap"],
            cap_offset=c.get("cap_offset", 0),
            scope=c.get("scope", scopes[-1]),
            consecutive=tuple(c.get("consecutive", ())),
            streak_of=tuple(c.get("streak_of", ())),
            doc=c.get("doc", ""),
            line=_line_of(lines, ("counters", name)),
        )
        for name, c in (data.get("counters") or {}).items()
    )
    states = tuple(
        StateSpec(
            name=name,
            doc=s.get("doc", ""),
            layer=s.get("layer", ""),
            effect=absolute(s["effect"], ("states", name, "effect")) if "effect" in s else None,
            emits=tuple(s.get("emits", ())),
            exit=absolute(s["exit"], ("states", name, "exit")) if "exit" in s else None,
            terminal=bool(s.get("terminal", False)),
            result=dict(s.get("result", {})),
            line=_line_of(lines, ("states", name)),
        )
        for name, s in data["states"].items()
    )
    transitions: list[TransitionSpec] = []
    for i, t in enumerate(data["transitions"]):
        sources = t["from"] if isinstance(t["from"], list) else [t["from"]]
        for origin in sources:
            transitions.append(
                TransitionSpec(
                    source=origin,
                    event=t["event"],
                    dest=t["to"],
                    reason=t["reason"],
                    guards=tuple(t.get("guards", ())),
                    counter=t.get("counter"),
                    resets=tuple(t.get("resets", ())),
                    do=absolute(t["do"], ("transitions", i, "do")) if "do" in t else None,
                    changes=tuple(t.get("changes", ())),
                    may_change=tuple(t.get("may_change", ())),
                    sets=tuple((k, _set_value(v)) for k, v in (t.get("sets") or {}).items()),
                    progress=bool(t.get("progress", False)),
                    ends=t.get("ends"),
                    doc=t.get("doc", ""),
                    line=_line_of(lines, ("transitions", i)),
                )
            )
    spec = MachineSpec(
        name=data["machine"],
        path=path,
        initial=data["initial"],
        doc=data.get("doc", ""),
        schema_version=data["schema_version"],
        package=package,
        abort_event=data.get("abort_event", "abort"),
        reason_kinds=dict(data.get("reason_kinds") or {}),
        params=params,
        events=events,
        guards=guards,
        guard_docs=guard_docs,
        guard_decides=guard_decides,
        scopes=scopes,
        counters=counters,
        figures={
            name: tuple(absolute(e, ("figures", name)) for e in (f["effects"] if isinstance(f, dict) else f))
            for name, f in (data.get("figures") or {}).items()
        },
        figure_max={
            name: f["max"] for name, f in (data.get("figures") or {}).items() if isinstance(f, dict) and "max" in f
        },
        figure_max_per_run={
            name: f["max_per_run"]
            for name, f in (data.get("figures") or {}).items()
            if isinstance(f, dict) and "max_per_run" in f
        },
        figure_max_with_children={
            name: f["max_with_children"]
            for name, f in (data.get("figures") or {}).items()
            if isinstance(f, dict) and "max_with_children" in f
        },
        figure_each_s={
            name: tuple(f["each_s"])
            for name, f in (data.get("figures") or {}).items()
            if isinstance(f, dict) and "each_s" in f
        },
        unbounded_by_design={name: u["doc"] for name, u in (data.get("unbounded_by_design") or {}).items()},
        progress_bounds={name: u["bound"] for name, u in (data.get("unbounded_by_design") or {}).items()},
        children=tuple(
            ChildrenSpec(
                name=name,
                starts=c["starts"],
                steps=c["steps"],
                depth=c["depth"],
                pending=c.get("pending"),
                admitted=c["admitted"],
                refused=c["refused"],
                doc=c.get("doc", ""),
                line=_line_of(lines, ("children", name)),
            )
            for name, c in (data.get("children") or {}).items()
        ),
        invariants=tuple(
            InvariantSpec(
                name=name,
                call=absolute(v["call"], ("invariants", name)),
                at=tuple(v["at"]),
                doc=v["doc"],
                line=_line_of(lines, ("invariants", name)),
            )
            for name, v in (data.get("invariants") or {}).items()
        ),
        properties=tuple(
            _property(name, value, _line_of(lines, ("properties", name)))
            for name, value in (data.get("properties") or {}).items()
        ),
        states=states,
        transitions=tuple(transitions),
        templates=templates,
        instances=instances,
    )
    if problems:
        raise SpecError(problems)
    problems.extend(validate_spec(spec, lines))
    if problems:
        raise SpecError(problems)
    if not bind:
        return Machine(spec=spec, effects={}, guards={}, handlers={})
    return _bind(spec, lines)


def _set_value(value: Any) -> Any:
    """A ``sets:`` value as the spec keeps it: a literal, or ``("was", path)`` for ``{was: path}``."""
    return ("was", value["was"]) if isinstance(value, dict) else value


_INFERRED: tuple[tuple[type, ParamType], ...] = ((bool, "boolean"), (int, "int"), (float, "number"), (str, "string"))


def _param(name: str, value: Any, line: int | None) -> ParamSpec:
    """A param from its short form (just the default) or its long form; the type is inferred from a
    non-null default when not declared, and a null default makes it nullable."""
    spec = value if isinstance(value, dict) else {"default": value}
    default = spec["default"]
    declared = spec.get("type")
    inferred = next((t for py, t in _INFERRED if isinstance(default, py)), None)
    return ParamSpec(
        name=name,
        default=default,
        type=declared or inferred,
        nullable=spec.get("nullable", default is None),
        check=spec.get("check"),
        most=spec.get("max"),
        doc=spec.get("doc", ""),
        line=line,
    )


def _property(name: str, value: Mapping[str, Any], line: int | None) -> PropertySpec:
    """A declared property from its YAML form (the schema has checked its shape: one kind and a doc)."""
    doc = value["doc"]
    if "order" in value:
        return PropertySpec(name=name, kind="order", reasons=tuple(value["order"]), doc=doc, line=line)
    if "at_most" in value:
        a = value["at_most"]
        return PropertySpec(
            name=name,
            kind="at_most",
            reasons=tuple(a["count"]),
            per=a["per"],
            most=a["max"],
            doc=doc,
            line=line,
        )
    if "resets" in value:
        r = value["resets"]
        return PropertySpec(
            name=name, kind="resets", reasons=tuple(r["after"]), counters=tuple(r["counters"]), doc=doc, line=line
        )
    if "guarded" in value:
        g = value["guarded"]
        return PropertySpec(name=name, kind="guarded", reasons=tuple(g["edges"]), guard=g["by"], doc=doc, line=line)
    if "preceded" in value:
        p = value["preceded"]
        return PropertySpec(
            name=name,
            kind="preceded",
            states=tuple(p["states"]),
            by=tuple(p["by"]),
            per=p["per"],
            doc=doc,
            line=line,
        )
    if "trips" in value:
        trip = value["trips"]
        return PropertySpec(name=name, kind="trips", reasons=(trip["breaker"],), most=trip["at"], doc=doc, line=line)
    if "ends" in value:
        rules = tuple(
            EndRule(
                kinds=tuple(r.get("kinds", ())),
                reasons=tuple(r.get("reasons", ())),
                unless=tuple(r.get("except", ())),
                result=tuple(r["result"].items()),
            )
            for r in value["ends"]
        )
        return PropertySpec(
            name=name,
            kind="ends",
            reasons=tuple(dict.fromkeys(n for r in rules for n in (*r.reasons, *r.unless))),
            rules=rules,
            doc=doc,
            line=line,
        )
    row = value["in_a_row"]
    return PropertySpec(
        name=name,
        kind="in_a_row",
        counter=row["counter"],
        reasons=tuple(row.get("broken_by", ())),
        doc=doc,
        line=line,
    )


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
    problems = validate_spec(spec)
    if problems:
        raise SpecError(problems)
    return _bind(spec, {})


# ---- semantic validation ------------------------------------------------------------------


def _scope_problems(spec: MachineSpec, lines: Mapping[_Path, int]) -> list[SpecProblem]:
    """Scopes are named once, never ``run`` (every machine has it); counters, properties and ``ends:`` edges
    name declared ones."""
    out: list[SpecProblem] = []
    where = _line_of(lines, ("scopes",))
    if RUN in spec.scopes:
        out.append(SpecProblem(spec.path, where, f"`scopes` lists {RUN!r}, the scope every machine has", "drop it"))
    if len(set(spec.scopes)) != len(spec.scopes):
        out.append(SpecProblem(spec.path, where, "`scopes` names a scope twice", "name each once"))
    counted = (*spec.scopes, RUN)
    fix = f"one of {list(counted)} (declare more under `scopes:`, innermost first)"
    for c in spec.counters:
        if c.scope not in counted:
            message = f"counter {c.name!r} has scope {c.scope!r}, which is not declared"
            out.append(SpecProblem(spec.path, c.line, message, _close(c.scope, counted) or fix))
    for p in spec.properties:
        if p.kind in ("at_most", "preceded") and p.per not in counted:
            message = f"property {p.name!r} is counted per {p.per!r}, which is not declared"
            out.append(SpecProblem(spec.path, p.line, message, _close(p.per, counted) or fix))
    for t in spec.transitions:
        if t.ends is not None and t.ends not in spec.scopes:
            message = f"transition {t.reason!r} ends scope {t.ends!r}, which is not declared"
            out.append(SpecProblem(spec.path, t.line, message, _close(t.ends, spec.scopes) or fix))
    return out


def _children_problems(spec: MachineSpec) -> list[SpecProblem]:
    """A ``children:`` entry's ``starts`` names a counter some edge counts, over the step scope and reset by
    nothing else, whose cap every caller gives a value (the composed figures multiply by it: the engine never
    lets its edges past it in one step), and its ``steps`` an int param."""
    out: list[SpecProblem] = []
    params = {p.name: p for p in spec.params}
    for child in spec.children:
        counter = spec.counter_map.get(child.starts)
        where = f"children {child.name!r} `starts`"
        if counter is None:
            fix = _close(child.starts, spec.counter_map) or "declare a counter its starting edge counts"
            out.append(
                SpecProblem(
                    spec.path, child.line, f"{where} names counter {child.starts!r}, which is not declared", fix
                )
            )
        elif counter.scope != spec.step_scope:
            out.append(
                SpecProblem(
                    spec.path,
                    child.line,
                    f"{where} names counter {child.starts!r}, counted per {counter.scope}: the starts of a "
                    f"{spec.step_scope} need a counter over the {spec.step_scope}",
                    f"scope: {spec.step_scope}",
                )
            )
        elif not any(t.counter == counter.name for t in spec.transitions):
            out.append(
                SpecProblem(
                    spec.path,
                    child.line,
                    f"{where} names counter {child.starts!r}, which no edge counts",
                    "name the counter on the edge that admits each start (`counter:`)",
                )
            )
        elif counter.consecutive or counter.streak_of or any(counter.name in t.resets for t in spec.transitions):
            out.append(
                SpecProblem(
                    spec.path,
                    child.line,
                    f"{where} names counter {child.starts!r}, which is reset within a {spec.step_scope} "
                    "(`consecutive`, `streak_of` or an edge's `resets`): its cap would not bound the starts",
                    "count the starts with a counter only its scope resets",
                )
            )
        elif isinstance(counter.cap, str) and counter.cap in params and params[counter.cap].nullable:
            out.append(
                SpecProblem(
                    spec.path,
                    child.line,
                    f"{where} names counter {child.starts!r}, whose cap {counter.cap!r} may be null: the children "
                    "a step starts need a limit",
                    "give the param a default and no `nullable`",
                )
            )
        param = params.get(child.steps)
        where = f"children {child.name!r} `steps`"
        if param is None:
            fix = _close(child.steps, params) or "declare it under `params:` (type: int)"
            out.append(
                SpecProblem(spec.path, child.line, f"{where} names param {child.steps!r}, which is not declared", fix)
            )
        elif param.type != "int":
            out.append(
                SpecProblem(spec.path, child.line, f"{where} names param {child.steps!r}, not an int", "type: int")
            )
        out.extend(_child_edge_problems(spec, child))
        if child.pending is not None and child.pending not in spec.guards:
            fix = _close(child.pending, spec.guards) or "name a guard declared under `guards:`"
            out.append(
                SpecProblem(
                    spec.path,
                    child.line,
                    f"children {child.name!r} `pending` names guard {child.pending!r}, which is not declared",
                    fix,
                )
            )
    return out


def _child_edge_problems(spec: MachineSpec, child: ChildrenSpec) -> list[SpecProblem]:
    """The roles of a ``children:`` entry's edges, tied together: ``admitted`` is the one edge that counts
    ``starts`` (a child starts only there), and ``refused`` is the catch-all of the same decision, tried
    right after it, whose handler answers the call (a ``do`` with a ``changes`` contract): at the cap the
    call gets its answer and starts nothing."""

    def problem(message: str, fix: str) -> SpecProblem:
        return SpecProblem(spec.path, child.line, f"children {child.name!r} {message}", fix)

    reasons = {t.reason for t in spec.transitions}
    out = [
        problem(f"`{role}` names {reason!r}, which is not a reason of this machine", _close(reason, reasons) or "")
        for role, reason in (("admitted", child.admitted), ("refused", child.refused))
        if reason not in reasons
    ]
    if out:
        return out
    admitted = [t for t in spec.transitions if t.reason == child.admitted]
    counting = sorted({t.reason for t in spec.transitions if t.counter == child.starts} - {child.admitted})
    if any(t.counter != child.starts for t in admitted):
        counts = admitted[0].counter
        out.append(
            problem(
                f"`starts` names counter {child.starts!r}, which its admitted edge {child.admitted!r} does not "
                f"count ({'it counts ' + repr(counts) if counts else 'it counts none'})",
                "name the counter the admitting edge counts",
            )
        )
    elif counting:
        out.append(
            problem(
                f"`starts` counter {child.starts!r} is counted by {counting} too: only the admitted edge "
                f"{child.admitted!r} may count the starts",
                "count the other edges with a counter of their own",
            )
        )
    candidates = spec.candidates()
    for t in admitted:
        cands = [c.reason for c in candidates[(t.source, t.event)]]
        after = cands[cands.index(t.reason) + 1 :]
        if not after or after[0] != child.refused:
            out.append(
                problem(
                    f"`refused` edge {child.refused!r} is not the candidate tried right after {child.admitted!r} "
                    f"(from {t.source!r} on {t.event!r}: {cands})",
                    "put the refusal right after the admitting edge, in the same decision",
                )
            )
    for t in (t for t in spec.transitions if t.reason == child.refused):
        if t.do is None or not t.changes:
            out.append(
                problem(
                    f"`refused` edge {child.refused!r} has no handler with a `changes` contract: at the cap the "
                    "call would get no answer",
                    "give it a `do` that answers the call and the fields it must change (`changes:`)",
                )
            )
        if not t.unguarded:
            out.append(
                problem(
                    f"`refused` edge {child.refused!r} has guards or a counter: at the cap the call could go "
                    "unanswered",
                    "make it the unguarded catch-all of its decision",
                )
            )
    return out


def validate_spec(spec: MachineSpec, lines: Mapping[_Path, int] | None = None) -> list[SpecProblem]:
    """Every semantic rule a declaration must follow; returns the problems (empty = valid)."""
    lines = lines or {}
    out: list[SpecProblem] = []
    path = spec.path
    states = spec.state_map
    counters = spec.counter_map
    params = {p.name for p in spec.params}
    reasons = {t.reason for t in spec.transitions}

    def add(line: int | None, message: str, fix: str | None = None) -> None:
        out.append(SpecProblem(path, line, message, fix))

    def known(kind: str, name: str, options: Iterable[str], line: int | None, context: str) -> bool:
        if name in options:
            return True
        hint = _close(name, options)
        add(line, f"{context} names {kind} {name!r}, which is not declared", hint or f"declare it under `{kind}s:`")
        return False

    effects = {s.effect for s in spec.states if s.effect}
    for figure, listed in spec.figures.items():
        for effect in listed:
            if effect not in effects:
                hint = _close(effect, effects)
                add(
                    _line_of(lines, ("figures", figure)),
                    f"figure {figure!r} names effect {effect!r}, which no state runs",
                    hint or "list effects that states declare",
                )
    if spec.initial not in states:
        known("state", spec.initial, states, _line_of(lines, ("initial",)), "`initial`")
    if spec.abort_event not in spec.events:
        add(
            _line_of(lines, ("abort_event",)) or _line_of(lines, ("events",)),
            f"the abort event {spec.abort_event!r} is not declared under `events:`",
            "declare it: cancelling a run injects it into the current state",
        )
    for p in spec.params:
        if p.default is None and not p.nullable:
            add(p.line, f"param {p.name!r} has a null default but `nullable: false`", "give it a default value")
        elif (why := p.problem_with(p.default)) is not None:
            add(p.line, f"param {p.name!r}: its default {p.default!r} {why}", f"make the default a {p.type}")
        if p.check is not None and p.type not in ("int", None):
            add(p.line, f"param {p.name!r} is a {p.type} but has a `check` value", "drop `check` (it is for int caps)")
    for c in counters.values():
        if isinstance(c.cap, str):
            if known("param", c.cap, params, c.line, f"counter {c.name!r} cap"):
                p = spec.param_map[c.cap]
                if p.type not in ("int", None):
                    add(
                        c.line, f"counter {c.name!r} cap names param {p.name!r}, a {p.type}", "cap it with an int param"
                    )
                elif p.type is None:
                    add(
                        p.line,
                        f"param {p.name!r} caps counter {c.name!r} but has no type",
                        "declare `type: int` (and `nullable: true` if null means no limit)",
                    )
        elif c.cap_offset:
            add(
                c.line,
                f"counter {c.name!r} has `cap_offset` but a fixed cap",
                "write the cap you mean, or use a param cap",
            )
        for r in c.consecutive:
            known("reason", r, reasons, c.line, f"counter {c.name!r} `consecutive`")
        for e in c.streak_of:
            if known("event", e, spec.events, c.line, f"counter {c.name!r} `streak_of`") and not any(
                e in s.emits for s in spec.states
            ):
                add(
                    c.line,
                    f"counter {c.name!r} `streak_of` names event {e!r}, which no state emits",
                    "name an outcome some state emits",
                )
    for figure, limit in spec.figure_max_per_run.items():
        if isinstance(limit, str):
            known("param", limit.partition(" ")[0], params, _line_of(lines, ("figures", figure)), f"figure {figure!r}")
    for figure, each in spec.figure_each_s.items():
        for term in each:
            if isinstance(term, str):
                known("param", term, params, _line_of(lines, ("figures", figure)), f"figure {figure!r} `each_s`")
    for c in counters.values():
        own = sorted(r for r in c.consecutive if any(t.reason == r and t.counter == c.name for t in spec.transitions))
        if own:
            add(
                c.line,
                f"counter {c.name!r} `consecutive` names {own[0]!r}, the edge that counts it",
                "an edge never resets the counter it increments; list the reasons that end the streak",
            )
    for t in spec.transitions:
        if t.changes and t.do is None:
            add(
                t.line,
                f"transition {t.reason!r} promises to change {list(t.changes)} (`changes:`) but has no `do` to "
                "change them",
                "name the edge handler that makes the change in `do:`, or drop the promise",
            )
        elif (t.may_change or t.sets) and t.do is None:
            add(
                t.line,
                f"transition {t.reason!r} declares what its handler changes (`may_change:`, `sets:`) but has no `do`",
                "name the edge handler in `do:`, or drop the frame",
            )
        twice = sorted({*t.changes, *t.may_change} & {path for path, _ in t.sets}) or sorted(
            set(t.changes) & set(t.may_change)
        )
        if twice:
            add(t.line, f"transition {t.reason!r} lists {twice} twice (`changes`, `may_change`, `sets`)", "list once")
    for inv in spec.invariants:
        for state in inv.at:
            known("state", state, states, inv.line, f"invariant {inv.name!r} `at`")
    progress = {t.reason for t in spec.transitions if t.progress}
    for t in spec.transitions:
        kind = next((k for k in spec.reason_kinds if t.reason.endswith(f"_{k}")), None) if t.progress else None
        if kind is not None:
            add(
                t.line,
                f"transition {t.reason!r} is marked `progress` but is a recovery (`_{kind}`): progress resets "
                f"every scope's budget, so a recovery marked progress is never bounded per {spec.step_scope}",
                "drop `progress: true`; only the forward step a user drives is progress",
            )
    out.extend(_range_problems(spec, lines))
    out.extend(_bound_problems(spec, lines))
    out.extend(_property_problems(spec, lines))
    out.extend(_guard_meaning_problems(spec, lines))
    out.extend(_children_problems(spec))
    out.extend(_scope_problems(spec, lines))
    for reason in spec.unbounded_by_design:
        kind = next((k for k in spec.reason_kinds if reason.endswith(f"_{k}")), None)
        if kind is not None:
            add(
                _line_of(lines, ("unbounded_by_design", reason)),
                f"`unbounded_by_design` lists {reason!r}, a recovery (`_{kind}`): a recovery is never unbounded "
                "by design",
                "bound it with a counter; list only forward progress a user drives",
            )
        if reason not in progress:
            known_reason = reason in reasons
            add(
                _line_of(lines, ("unbounded_by_design", reason)),
                f"`unbounded_by_design` lists {reason!r}, which is "
                + ("not a `progress` edge" if known_reason else "not a reason of this machine"),
                "list only progress edges a user drives (a retry is never unbounded by design)"
                if known_reason
                else _close(reason, progress) or "name the reason of a progress edge",
            )
    for s in spec.states:
        if s.terminal:
            if s.effect or s.emits or s.exit:
                add(
                    s.line,
                    f"terminal state {s.name!r} has an effect, emits or exit",
                    "a terminal state does nothing; remove them",
                )
        else:
            if s.result:
                add(
                    s.line,
                    f"state {s.name!r} has a `result` but is not terminal",
                    "add `terminal: true` or remove `result`",
                )
            if not s.effect or not s.emits:
                add(
                    s.line,
                    f"state {s.name!r} is neither terminal nor runs an effect with `emits`",
                    "add `effect:` and `emits:`, or `terminal: true`",
                )
            for e in s.emits:
                known("event", e, spec.events, s.line, f"state {s.name!r} `emits`")
    seen_reasons: dict[str, int | None] = {}
    declared_reason_line: dict[str, int | None] = {}
    for t in spec.transitions:
        if t.reason in declared_reason_line and declared_reason_line[t.reason] != t.line:
            add(
                t.line,
                f"reason {t.reason!r} is used twice (first at line {declared_reason_line[t.reason]})",
                "every transition needs its own reason",
            )
        declared_reason_line.setdefault(t.reason, t.line)
        seen_reasons.setdefault(t.reason, t.line)
        ctx = f"transition {t.reason!r}"
        src_ok = known("state", t.source, states, t.line, ctx)
        known("state", t.dest, states, t.line, ctx)
        ev_ok = known("event", t.event, spec.events, t.line, ctx)
        for g in t.guards:
            if g not in spec.guards:
                hint = _close(g, spec.guards)
                add(t.line, f"{ctx} names guard {g!r}, which is not registered", hint or "register it under `guards:`")
        if t.counter is not None:
            known("counter", t.counter, counters, t.line, ctx)
        for r in t.resets:
            known("counter", r, counters, t.line, f"{ctx} `resets`")
        if src_ok and states[t.source].terminal:
            add(t.line, f"{ctx} leaves terminal state {t.source!r}", "terminal states have no outgoing edges")
        elif src_ok and ev_ok and t.event != spec.abort_event and t.event not in states[t.source].emits:
            add(
                t.line,
                f"{ctx} fires on {t.event!r}, which state {t.source!r} never emits",
                f"add it to {t.source!r} `emits`, or fix the event",
            )
    for t in spec.transitions:
        if t.event == spec.abort_event and t.dest in states and not states[t.dest].terminal:
            add(
                t.line,
                f"abort edge {t.reason!r} goes to {t.dest!r}, which is not terminal",
                "an abort ends the run: send it to a terminal state",
            )
    out.extend(_internal_error_problems(spec, lines))
    out.extend(_naming_problems(spec, lines))
    if out:
        return out
    groups = spec.candidates()
    for s in spec.states:
        if s.terminal:
            continue
        for e in (*s.emits, spec.abort_event):
            if (s.name, e) not in groups:
                if e == spec.abort_event:
                    add(
                        s.line,
                        f"state {s.name!r} has no transition for the abort event {e!r}",
                        "add an edge to a terminal state so a cancelled run still ends",
                    )
                else:
                    add(
                        s.line,
                        f"state {s.name!r} emits {e!r} but no transition handles it",
                        f"add a transition from {s.name!r} on {e!r}",
                    )
    for (source, event), cands in groups.items():
        last = cands[-1]
        if not last.unguarded:
            add(
                last.line,
                f"the edges from {source!r} on {event!r} end with {last.reason!r}, which is guarded",
                "the last candidate must be an unguarded catch-all (no guards, no counter)",
            )
    reachable = _reachable(spec)
    for s in spec.states:
        if s.name not in reachable and s.name != INTERNAL_ERROR:  # only the engine enters internal_error
            add(
                s.line,
                f"state {s.name!r} is unreachable from {spec.initial!r}",
                "add a transition into it or remove it",
            )
    return out


def _range_problems(spec: MachineSpec, lines: Mapping[_Path, int]) -> list[SpecProblem]:
    """A param that caps a counter declares the largest value a caller may give, and every declared
    range holds the param's default and ``check`` value: a huge cap is refused, not explored."""
    out: list[SpecProblem] = []
    caps = {c.cap for c in spec.counters if isinstance(c.cap, str)}
    for p in spec.params:
        if p.type not in ("int", "number"):
            continue
        where = _line_of(lines, ("params", p.name))
        if p.most is None and p.name in caps:
            out.append(
                SpecProblem(
                    spec.path,
                    where,
                    f"param {p.name!r} caps a counter but declares no `max`: a cap without a range lets any "
                    "value through",
                    f"write it long-form with the largest value a caller may give, e.g. "
                    f"`{p.name}: {{default: {p.default if p.default is not None else 'null'}, max: …}}`",
                )
            )
            continue
        if p.most is None:
            continue
        for what, value in (("default", p.default), ("check value", p.check)):
            if isinstance(value, int | float) and not isinstance(value, bool) and value > p.most:
                out.append(
                    SpecProblem(
                        spec.path,
                        where,
                        f"param {p.name!r} has the {what} {value}, above its declared max {p.most:g}",
                        "lower the value, or raise `max` if callers really need more",
                    )
                )
    return out


def _bound_problems(spec: MachineSpec, lines: Mapping[_Path, int]) -> list[SpecProblem]:
    """An ``unbounded_by_design`` edge names the user-driven param that bounds it, and is bounded
    when that param is set: a ``session`` counter capped by it counts the edge and nothing resets it."""
    out: list[SpecProblem] = []
    resets_anywhere = {c for t in spec.transitions for c in spec.resets_of(t)}
    for reason, bound in spec.progress_bounds.items():
        where = _line_of(lines, ("unbounded_by_design", reason))
        param = spec.param_map.get(bound)
        if param is None:
            out.append(
                SpecProblem(
                    spec.path,
                    where,
                    f"`unbounded_by_design` entry {reason!r} names the bound {bound!r}, which is not a param",
                    _close(bound, spec.param_map) or "name the int param a user sets to bound it (e.g. max_turns)",
                )
            )
            continue
        edges = [t for t in spec.transitions if t.reason == reason]
        counters = {t.counter for t in edges}
        only = next(iter(counters)) if len(counters) == 1 else None
        counter = spec.counter_map.get(only) if only is not None else None
        why = None
        if param.type != "int":
            why = f"its bound {bound!r} is not an int param"
        elif counter is None:
            why = f"no counter capped by {bound!r} counts it"
        elif counter.cap != bound:
            why = f"its counter {counter.name!r} is capped by {counter.cap!r}, not by {bound!r}"
        elif counter.scope != RUN:
            why = f"its counter {counter.name!r} has scope {counter.scope!r}: a bound per run needs `{RUN}`"
        elif counter.name in resets_anywhere:
            resetting = sorted({t.reason for t in spec.transitions if counter.name in spec.resets_of(t)})
            why = f"its counter {counter.name!r} is reset by {resetting}, so setting {bound!r} bounds nothing"
        if why is not None:
            out.append(
                SpecProblem(
                    spec.path,
                    where,
                    f"`unbounded_by_design` entry {reason!r} is not bounded when {bound!r} is set: {why}",
                    f"count {reason!r} with a `{RUN}` counter whose cap is {bound!r} and that no edge resets",
                )
            )
    return out


def _property_problems(spec: MachineSpec, lines: Mapping[_Path, int]) -> list[SpecProblem]:
    """A declared property names reasons, counters and params that exist (whether it holds is ``check``'s)."""
    out: list[SpecProblem] = []
    reasons = {t.reason for t in spec.transitions}
    for prop in spec.properties:
        where = prop.line
        for reason in prop.reasons:
            if reason not in reasons:
                out.append(
                    SpecProblem(
                        spec.path,
                        where,
                        f"property {prop.name!r} names the reason {reason!r}, which no transition has",
                        _close(reason, reasons) or "name reasons of this machine's transitions",
                    )
                )
        for counter in (*((prop.counter,) if prop.counter is not None else ()), *prop.counters):
            if counter not in spec.counter_map:
                out.append(
                    SpecProblem(
                        spec.path,
                        where,
                        f"property {prop.name!r} names the counter {counter!r}, which is not declared",
                        _close(counter, spec.counter_map) or "name a counter declared under `counters:`",
                    )
                )
        for state in (*prop.states, *prop.by):
            if state not in spec.state_map:
                out.append(
                    SpecProblem(
                        spec.path,
                        where,
                        f"property {prop.name!r} names the state {state!r}, which is not declared",
                        _close(state, spec.state_map) or "name a state declared under `states:`",
                    )
                )
        for kind in (k for rule in prop.rules for k in rule.kinds):
            if kind not in spec.reason_kinds:
                out.append(
                    SpecProblem(
                        spec.path,
                        where,
                        f"property {prop.name!r} names the reason kind {kind!r}, which is not declared",
                        _close(kind, spec.reason_kinds) or "name a kind declared under `reason_kinds:`",
                    )
                )
        if prop.guard is not None and prop.guard not in spec.guards:
            out.append(
                SpecProblem(
                    spec.path,
                    where,
                    f"property {prop.name!r} names the guard {prop.guard!r}, which is not declared",
                    _close(prop.guard, spec.guards) or "name a guard declared under `guards:`",
                )
            )
        if isinstance(prop.most, str) and prop.most.partition(" ")[0] not in spec.param_map:
            name = prop.most.partition(" ")[0]
            out.append(
                SpecProblem(
                    spec.path,
                    where,
                    f"property {prop.name!r} names the param {name!r}, which is not declared",
                    _close(name, spec.param_map) or "name a declared param",
                )
            )
    return out


def _guard_meaning_problems(spec: MachineSpec, lines: Mapping[_Path, int]) -> list[SpecProblem]:
    """A guard's `decides` names reasons of this machine's transitions (whether they name it is ``check``'s)."""
    out: list[SpecProblem] = []
    reasons = {t.reason for t in spec.transitions}
    if spec.reason_kinds:  # the convention's machines: every guard an edge asks says what it decides
        out.extend(
            SpecProblem(
                spec.path,
                _line_of(lines, ("guards", guard)),
                f"guard {guard!r} declares no `decides`: the edges it decides would be a free choice to `check`",
                "list the reasons of exactly the edges that ask it (`decides: [...]`)",
            )
            for guard in spec.guards
            if guard not in spec.guard_decides and any(guard in t.guards for t in spec.transitions)
        )
    for guard, decided in spec.guard_decides.items():
        for reason in decided:
            if reason not in reasons:
                out.append(
                    SpecProblem(
                        spec.path,
                        _line_of(lines, ("guards", guard)),
                        f"guard {guard!r} `decides` names the reason {reason!r}, which no transition has",
                        _close(reason, reasons) or "name reasons of this machine's transitions",
                    )
                )
    return out


def _reachable(spec: MachineSpec) -> set[str]:
    """The states some run can enter from the initial one (a plain search: every run loads a machine, and
    networkx, which the checker uses, would cost it more to import than the whole load)."""
    successors: dict[str, list[str]] = {}
    for t in spec.transitions:
        successors.setdefault(t.source, []).append(t.dest)
    seen = {spec.initial}
    todo = [spec.initial]
    while todo:
        for dest in successors.get(todo.pop(), ()):
            if dest not in seen:
                seen.add(dest)
                todo.append(dest)
    return seen


def _internal_error_problems(spec: MachineSpec, lines: Mapping[_Path, int]) -> list[SpecProblem]:
    """Every machine declares the terminal ``internal_error``, which no transition enters (only the engine)."""
    fix = (
        "add under `states:`: `internal_error: {terminal: true, result: {is_error: true, "
        "subtype: error_during_execution}}` — the engine ends a run there when an effect, guard or handler raises"
    )
    state = spec.state_map.get(INTERNAL_ERROR)
    if state is None:
        return [SpecProblem(spec.path, _line_of(lines, ("states",)), "no state `internal_error` is declared", fix)]
    out: list[SpecProblem] = []
    result = state.result
    if not state.terminal or result.get("is_error") is not True or result.get("subtype") != "error_during_execution":
        out.append(
            SpecProblem(
                spec.path,
                state.line,
                "state `internal_error` must be terminal with `result: {is_error: true, "
                "subtype: error_during_execution}`",
                fix,
            )
        )
    for t in spec.transitions:
        if t.dest == INTERNAL_ERROR:
            out.append(
                SpecProblem(
                    spec.path,
                    t.line,
                    f"transition {t.reason!r} goes to `internal_error`, which only the engine enters",
                    "send it to another terminal state",
                )
            )
    return out


def _a(noun: str) -> str:
    return ("an " if noun[0] in "aeiou" else "a ") + noun


def _naming_problems(spec: MachineSpec, lines: Mapping[_Path, int]) -> list[SpecProblem]:
    """No name stands for two kinds of thing; with ``reason_kinds``, names follow the convention.

    The convention (docs/machines.md): a non-terminal state is an activity (one of its
    words ends in "ing"); the reason of a counted edge, and of every candidate tried
    after one, ends with ``_<kind>`` for a declared kind — the recovery ladders read
    as kinds with one meaning each.
    """
    out: list[SpecProblem] = []
    kinds: dict[str, tuple[str, int | None]] = {}

    def claim(name: str, kind: str, line: int | None) -> None:
        if name in kinds and kinds[name][0] != kind:
            first, first_line = kinds[name]
            where = f" (line {first_line})" if first_line else ""
            out.append(
                SpecProblem(
                    spec.path,
                    line,
                    f"{name!r} is both {_a(first)}{where} and {_a(kind)}",
                    "rename one: a name stands for one kind of thing",
                )
            )
        kinds.setdefault(name, (kind, line))

    for p in spec.params:
        claim(p.name, "param", p.line)
    for c in spec.counters:
        claim(c.name, "counter", c.line)
    for g in spec.guards:
        claim(g, "guard", _line_of(lines, ("guards", g)))
    for s in spec.states:
        claim(s.name, "state", s.line)
    for e in spec.events:
        claim(e, "event", _line_of(lines, ("events", e)))
    for t in spec.transitions:
        claim(t.reason, "reason", t.line)
    if not spec.reason_kinds:
        return out
    for s in spec.states:
        if not s.terminal and not any(word.endswith("ing") for word in s.name.split("_")):
            out.append(
                SpecProblem(
                    spec.path,
                    s.line,
                    f"state {s.name!r} is not named as an activity",
                    "name what it does: `calling_model`, `backing_off`",
                )
            )
    suffixes = tuple(f"_{k}" for k in spec.reason_kinds)
    reported: set[str] = set()
    for cands in spec.candidates().values():
        counted = False
        for t in cands:
            counted = counted or (t.counter is not None and not t.progress)
            if counted and not t.reason.endswith(suffixes) and t.reason not in reported:
                reported.add(t.reason)
                out.append(
                    SpecProblem(
                        spec.path,
                        t.line,
                        f"reason {t.reason!r} of a recovery ladder has no declared kind",
                        "end it with one of: " + ", ".join(suffixes),
                    )
                )
    ends = any(p.kind == "ends" for p in spec.properties)
    for t in spec.transitions if ends else ():  # an `ends` property sees an edge by its declared kind
        state = spec.state_map.get(t.dest)
        if state is not None and state.terminal and not t.reason.endswith(suffixes) and t.reason not in reported:
            reported.add(t.reason)
            out.append(
                SpecProblem(
                    spec.path,
                    t.line,
                    f"reason {t.reason!r} ends the run (in {t.dest!r}) but has no declared kind: an `ends` "
                    "property, which matches declared kinds, would not see it",
                    "end it with one of: " + ", ".join(suffixes) + " (or declare its kind under `reason_kinds:`)",
                )
            )
    return out


def _takes(fn: Callable[..., Any], arity: int) -> bool:
    """``fn`` can be called with ``arity`` positional arguments."""
    try:
        inspect.signature(fn).bind(*([None] * arity))
    except TypeError:
        return False
    except ValueError:  # no signature available (a builtin): trust it
        return True
    return True


def _bind(spec: MachineSpec, lines: Mapping[_Path, int]) -> Machine:
    problems: list[SpecProblem] = []
    effects: dict[str, Callable[..., Any]] = {}
    exits: dict[str, Callable[..., Any]] = {}
    guards: dict[str, Callable[..., bool]] = {}
    handlers: dict[str, Callable[..., Any]] = {}
    cache: dict[str, tuple[Callable[..., Any] | None, str]] = {}

    def resolve(
        dotted: str, line: int | None, what: str, *, arity: int = 2, sync: bool = True
    ) -> Callable[..., Any] | None:
        if dotted not in cache:
            cache[dotted] = _resolve(dotted)
        fn, why = cache[dotted]
        if fn is None:
            problems.append(
                SpecProblem(spec.path, line, f"{what}: {why}", None if "did you mean" in why else "fix the dotted name")
            )
            return None
        problems.extend(_undeclared_reads(spec, fn, dotted, line, what))
        if sync and inspect.iscoroutinefunction(fn):
            fix = "guards and handlers run inside a step; make it a plain def (effects are the async part)"
            problems.append(SpecProblem(spec.path, line, f"{what} {dotted!r} is an `async def`", fix))
            return None
        if not sync and not inspect.iscoroutinefunction(fn):
            problems.append(
                SpecProblem(
                    spec.path, line, f"{what} {dotted!r} is not an `async def`", "effects are awaited; declare it async"
                )
            )
            return None
        if not _takes(fn, arity):
            params = ("(ctx)" if what.startswith("state") else "(data)") if arity == 1 else "(run, event)"
            problems.append(
                SpecProblem(
                    spec.path,
                    line,
                    f"{what} {dotted!r} cannot be called as {params}",
                    f"give it the signature {params}",
                )
            )
            return None
        return fn

    for s in spec.states:
        if s.effect:
            fn = resolve(s.effect, s.line, f"state {s.name!r} effect", arity=1, sync=False)
            if fn is not None:
                effects[s.name] = fn
        if s.exit:
            fn = resolve(s.exit, s.line, f"state {s.name!r} exit")
            if fn is not None:
                exits[s.name] = fn
    for name, dotted in spec.guards.items():
        fn = resolve(dotted, _line_of(lines, ("guards", name)), f"guard {name!r}")
        if fn is not None:
            guards[name] = fn
    for t in spec.transitions:
        if t.do and t.reason not in handlers:
            fn = resolve(t.do, t.line, f"transition {t.reason!r} `do`")
            if fn is not None:
                handlers[t.reason] = fn
    invariants: dict[str, Callable[..., Any]] = {}
    for inv in spec.invariants:
        fn = resolve(inv.call, inv.line, f"invariant {inv.name!r}", arity=1)
        if fn is not None:
            invariants[inv.name] = fn
    problems.extend(_wait_problems(spec, effects, lines))
    if problems:
        raise SpecError(problems)
    return Machine(spec=spec, effects=effects, guards=guards, handlers=handlers, exits=exits, invariants=invariants)


def _wait_problems(
    spec: MachineSpec, effects: Mapping[str, Callable[..., Any]], lines: Mapping[_Path, int]
) -> list[SpecProblem]:
    """An effect that declares what bounds its sleeps (``uses(waits=...)``) must be counted by a figure with
    ``each_s``, and every such figure must name each of those params: else ``check`` would print a worst-case
    wait below what the effect may sleep (or none at all)."""
    out: list[SpecProblem] = []
    done: set[str] = set()
    for state in spec.states:
        fn = effects.get(state.name)
        declared = None if fn is None or state.effect is None else uses_of(fn)
        if declared is None or not declared.waits or state.effect in done:
            continue
        done.add(str(state.effect))
        counting = [name for name, named in spec.figures.items() if state.effect in named]
        timed = [name for name in counting if name in spec.figure_each_s]
        shown = ", ".join(declared.waits)
        if not timed:
            out.append(
                SpecProblem(
                    spec.path,
                    state.line,
                    f"effect {state.effect!r} sleeps up to {shown} seconds at a time, but no figure with `each_s` "
                    f"counts it{f' ({_few_names(counting)} count it without)' if counting else ''}",
                    f"list it under a figure's `effects` with `each_s: [{shown}]`",
                )
            )
        for name in timed:
            missing = [w for w in declared.waits if w not in spec.figure_each_s[name]]
            if missing:
                out.append(
                    SpecProblem(
                        spec.path,
                        _line_of(lines, ("figures", name)),
                        f"figure {name!r} `each_s` leaves out {', '.join(map(repr, missing))}: its effect "
                        f"{state.effect!r} may sleep up to the largest of {shown} seconds at a time (the handler "
                        "declares it), so the worst-case wait printed would be below what a "
                        f"{spec.step_scope} may wait",
                        f"write `each_s: [{shown}]`",
                    )
                )
    return out


def _few_names(names: Iterable[str]) -> str:
    return ", ".join(repr(n) for n in names)


def _undeclared_reads(
    spec: MachineSpec, fn: Callable[..., Any], dotted: str, line: int | None, what: str
) -> list[SpecProblem]:
    """A problem for every name ``fn`` declares it reads but the machine lacks."""
    declared = uses_of(fn)
    return [] if declared is None else _missing(spec, declared, line, f"{what} {dotted!r}")


def _missing(spec: MachineSpec, declared: Uses, line: int | None, who: str) -> list[SpecProblem]:
    out: list[SpecProblem] = []
    known = {
        "counter": [c.name for c in spec.counters],
        "state": [s.name for s in spec.states],
        "param": [p.name for p in spec.params],
        "reason": [t.reason for t in spec.transitions],
    }
    kinds = (
        ("counter", declared.counters),
        ("state", declared.states),
        ("param", declared.params),
        ("reason", declared.reasons),
    )
    for kind, names in kinds:
        for name in names:
            if name not in known[kind]:
                hint = _close(name, known[kind])
                out.append(
                    SpecProblem(
                        spec.path,
                        line,
                        f"{who} reads {kind} {name!r}, which the machine does not declare",
                        hint or f"declare the {kind}, or bind a handler written for this machine",
                    )
                )
    return out


def _name_of(observer: object) -> str:
    return (observer if isinstance(observer, type) else type(observer)).__qualname__


def check_observers(spec: MachineSpec, observers: Iterable[object]) -> None:
    """Refuse observers (or their classes) that compare steps with a state or reason the machine lacks: SpecError.

    Each observer's class declares what it reads with :func:`~queryloop.fsm.model.contract.uses`,
    as handlers do; a rename in the YAML then fails when the observer is attached to a
    run of it, not silently the first time the renamed step goes by.
    """
    problems = [
        problem
        for observer in observers
        for problem in _missing(spec, reads_of(observer), None, f"observer {_name_of(observer)}")
    ]
    if problems:
        raise SpecError(problems)
