"""Building a :class:`~queryloop.fsm.model.spec.MachineSpec` from a declaration the schema has accepted.

Owns turning each YAML section into its records, with the line of each, and making the
dotted names relative to ``package`` absolute. Does not read files (``source``), expand
templates (``templates``), check what the records mean (``rules``) or import the Python a
machine names (``bind``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import SpecProblem
from .problems import Lines, line_of
from .spec import (
    SPAN,
    ChildrenSpec,
    CounterSpec,
    EndRule,
    InstanceSpec,
    InvariantSpec,
    MachineSpec,
    ParamSpec,
    ParamType,
    PropertySpec,
    StateSpec,
    TemplateSpec,
    TransitionSpec,
)

if TYPE_CHECKING:  # not at run time: a machine rebuilt from the cache never loads PyYAML or jsonschema
    from .source import Source

__all__ = ["build_spec"]


class _Dotted:
    """Makes the dotted names a declaration gives absolute, keeping a problem for each that cannot be."""

    def __init__(self, source: Source, package: str) -> None:
        self.source = source
        self.package = package
        self.problems: list[SpecProblem] = []

    def absolute(self, name: str, where: Iterable[object]) -> str:
        if not name.startswith("."):
            return name
        if not self.package:
            self.problems.append(
                self.source.problem(
                    where,
                    f"{name!r} is relative but the machine declares no `package`",
                    "add `package: your.handlers` at the top, or write the full dotted name",
                )
            )
            return name
        return self.package + name


def build_spec(
    source: Source, path: str, *, templates: tuple[TemplateSpec, ...], instances: tuple[InstanceSpec, ...]
) -> tuple[MachineSpec, list[SpecProblem]]:
    """The declaration in ``source`` as records, and the problems met making its dotted names absolute."""
    data, lines = source.data, source.lines
    package: str = data.get("package", "")
    dotted = _Dotted(source, package)
    scopes = tuple(data.get("scopes") or (SPAN,))
    guards, guard_docs, guard_decides = _guards(data, dotted)
    states = _states(data, lines, dotted)  # built before the edges and figures: their problems come in that order
    transitions = _transitions(data, lines, dotted)
    figures = data.get("figures") or {}
    unbounded = data.get("unbounded_by_design") or {}
    spec = MachineSpec(
        name=data["machine"],
        path=path,
        initial=data["initial"],
        doc=data.get("doc", ""),
        schema_version=data["schema_version"],
        package=package,
        abort_event=data.get("abort_event", "abort"),
        reason_kinds=dict(data.get("reason_kinds") or {}),
        params=tuple(_param(name, value, line_of(lines, ("params", name))) for name, value in _section(data, "params")),
        events={name: (doc or "") for name, doc in data["events"].items()},
        guards=guards,
        guard_docs=guard_docs,
        guard_decides=guard_decides,
        scopes=scopes,
        counters=_counters(data, lines, scopes),
        figures={
            name: tuple(dotted.absolute(e, ("figures", name)) for e in (f["effects"] if isinstance(f, dict) else f))
            for name, f in figures.items()
        },
        figure_max=_figure_field(figures, "max", _same),
        figure_max_per_run=_figure_field(figures, "max_per_run", _same),
        figure_max_with_children=_figure_field(figures, "max_with_children", _same),
        figure_each_s=_figure_field(figures, "each_s", tuple),
        unbounded_by_design={name: u["doc"] for name, u in unbounded.items()},
        progress_bounds={name: u["bound"] for name, u in unbounded.items()},
        children=_children(data, lines),
        invariants=_invariants(data, lines, dotted),
        properties=tuple(
            _property(name, value, line_of(lines, ("properties", name))) for name, value in _section(data, "properties")
        ),
        states=states,
        transitions=transitions,
        templates=templates,
        instances=instances,
    )
    return spec, dotted.problems


def _section(data: Mapping[str, Any], key: str) -> Iterable[tuple[str, Any]]:
    """The entries of an optional mapping section (absent or empty: none)."""
    return (data.get(key) or {}).items()


def _same(value: object) -> object:
    return value


def _figure_field(figures: Mapping[str, object], key: str, convert: Callable[[Any], Any]) -> dict[str, Any]:
    """Per figure written long-form with ``key``, its value."""
    return {name: convert(f[key]) for name, f in figures.items() if isinstance(f, dict) and key in f}


def _guards(
    data: Mapping[str, object], dotted: _Dotted
) -> tuple[dict[str, str], dict[str, str], dict[str, tuple[str, ...]]]:
    """Per guard: its dotted name, its doc and the reasons it decides (a name, or ``{call, doc, decides}``)."""
    guards: dict[str, str] = {}
    docs: dict[str, str] = {}
    decides: dict[str, tuple[str, ...]] = {}
    for name, value in _section(data, "guards"):
        short = isinstance(value, str)
        guards[name] = dotted.absolute(value if short else value["call"], ("guards", name))
        docs[name] = "" if short else value.get("doc", "")
        if not short and "decides" in value:
            decides[name] = tuple(value["decides"])
    return guards, docs, decides


def _counters(data: Mapping[str, object], lines: Lines, scopes: tuple[str, ...]) -> tuple[CounterSpec, ...]:
    return tuple(
        CounterSpec(
            name=name,
            cap=c["cap"],
            cap_offset=c.get("cap_offset", 0),
            scope=c.get("scope", scopes[-1]),
            consecutive=tuple(c.get("consecutive", ())),
            streak_of=tuple(c.get("streak_of", ())),
            doc=c.get("doc", ""),
            line=line_of(lines, ("counters", name)),
        )
        for name, c in _section(data, "counters")
    )


def _states(data: Mapping[str, Any], lines: Lines, dotted: _Dotted) -> tuple[StateSpec, ...]:
    return tuple(
        StateSpec(
            name=name,
            doc=s.get("doc", ""),
            layer=s.get("layer", ""),
            effect=dotted.absolute(s["effect"], ("states", name, "effect")) if "effect" in s else None,
            emits=tuple(s.get("emits", ())),
            exit=dotted.absolute(s["exit"], ("states", name, "exit")) if "exit" in s else None,
            terminal=bool(s.get("terminal", False)),
            result=dict(s.get("result", {})),
            line=line_of(lines, ("states", name)),
        )
        for name, s in data["states"].items()
    )


def _transitions(data: Mapping[str, Any], lines: Lines, dotted: _Dotted) -> tuple[TransitionSpec, ...]:
    """One record per source: ``from: [a, b]`` is two edges with the same reason and line."""
    return tuple(
        _transition(t, origin, i, lines, dotted)
        for i, t in enumerate(data["transitions"])
        for origin in (t["from"] if isinstance(t["from"], list) else [t["from"]])
    )


def _transition(t: Mapping[str, Any], origin: str, i: int, lines: Lines, dotted: _Dotted) -> TransitionSpec:
    return TransitionSpec(
        source=origin,
        event=t["event"],
        dest=t["to"],
        reason=t["reason"],
        guards=tuple(t.get("guards", ())),
        counter=t.get("counter"),
        resets=tuple(t.get("resets", ())),
        do=dotted.absolute(t["do"], ("transitions", i, "do")) if "do" in t else None,
        changes=tuple(t.get("changes", ())),
        may_change=tuple(t.get("may_change", ())),
        sets=tuple((k, _set_value(v)) for k, v in (t.get("sets") or {}).items()),
        progress=bool(t.get("progress", False)),
        ends=t.get("ends"),
        doc=t.get("doc", ""),
        line=line_of(lines, ("transitions", i)),
    )


def _set_value(value: object) -> object:
    """A ``sets:`` value as the spec keeps it: a literal, or ``("was", path)`` for ``{was: path}``."""
    return ("was", value["was"]) if isinstance(value, dict) else value


def _children(data: Mapping[str, object], lines: Lines) -> tuple[ChildrenSpec, ...]:
    return tuple(
        ChildrenSpec(
            name=name,
            starts=c["starts"],
            steps=c["steps"],
            depth=c["depth"],
            pending=c.get("pending"),
            admitted=c["admitted"],
            refused=c["refused"],
            doc=c.get("doc", ""),
            line=line_of(lines, ("children", name)),
        )
        for name, c in _section(data, "children")
    )


def _invariants(data: Mapping[str, object], lines: Lines, dotted: _Dotted) -> tuple[InvariantSpec, ...]:
    return tuple(
        InvariantSpec(
            name=name,
            call=dotted.absolute(v["call"], ("invariants", name)),
            at=tuple(v["at"]),
            doc=v["doc"],
            line=line_of(lines, ("invariants", name)),
        )
        for name, v in _section(data, "invariants")
    )


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
    kind = next((k for k in _PROPERTY_KINDS if k in value), "in_a_row")
    return _PROPERTY_KINDS[kind](name, value[kind], value["doc"], line)


def _order(name: str, o: Any, doc: str, line: int | None) -> PropertySpec:
    return PropertySpec(name=name, kind="order", reasons=tuple(o), doc=doc, line=line)


def _at_most(name: str, a: Any, doc: str, line: int | None) -> PropertySpec:
    return PropertySpec(
        name=name, kind="at_most", reasons=tuple(a["count"]), per=a["per"], most=a["max"], doc=doc, line=line
    )


def _resets(name: str, r: Any, doc: str, line: int | None) -> PropertySpec:
    return PropertySpec(
        name=name, kind="resets", reasons=tuple(r["after"]), counters=tuple(r["counters"]), doc=doc, line=line
    )


def _guarded(name: str, g: Any, doc: str, line: int | None) -> PropertySpec:
    return PropertySpec(name=name, kind="guarded", reasons=tuple(g["edges"]), guard=g["by"], doc=doc, line=line)


def _preceded(name: str, p: Any, doc: str, line: int | None) -> PropertySpec:
    return PropertySpec(
        name=name, kind="preceded", states=tuple(p["states"]), by=tuple(p["by"]), per=p["per"], doc=doc, line=line
    )


def _trips(name: str, trip: Any, doc: str, line: int | None) -> PropertySpec:
    return PropertySpec(name=name, kind="trips", reasons=(trip["breaker"],), most=trip["at"], doc=doc, line=line)


def _ends(name: str, written: Any, doc: str, line: int | None) -> PropertySpec:
    rules = tuple(
        EndRule(
            kinds=tuple(r.get("kinds", ())),
            reasons=tuple(r.get("reasons", ())),
            unless=tuple(r.get("except", ())),
            result=tuple(r["result"].items()),
        )
        for r in written
    )
    reasons = tuple(dict.fromkeys(n for r in rules for n in (*r.reasons, *r.unless)))
    return PropertySpec(name=name, kind="ends", reasons=reasons, rules=rules, doc=doc, line=line)


def _in_a_row(name: str, row: Any, doc: str, line: int | None) -> PropertySpec:
    return PropertySpec(
        name=name, kind="in_a_row", counter=row["counter"], reasons=tuple(row.get("broken_by", ())), doc=doc, line=line
    )


# each kind's YAML key and its builder, in the order the keys are looked for
_PROPERTY_KINDS: dict[str, Callable[[str, Any, str, int | None], PropertySpec]] = {
    "order": _order,
    "at_most": _at_most,
    "resets": _resets,
    "guarded": _guarded,
    "preceded": _preceded,
    "trips": _trips,
    "ends": _ends,
    "in_a_row": _in_a_row,
}
