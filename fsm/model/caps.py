"""The rules about what bounds a machine: params, counters and their caps, figures, scopes, progress.

One function per rule, each returning its problems; ``rules`` runs them in its order.
Whether the bounds hold (the figures, the cycles) is the checker's, not these rules'.
"""

from __future__ import annotations

from ..errors import SpecProblem
from .problems import Lines, close, line_of, unknown
from .spec import RUN, CounterSpec, MachineSpec, ParamSpec

__all__ = [
    "bound_problems",
    "counter_problems",
    "figure_effect_problems",
    "figure_param_problems",
    "param_problems",
    "progress_problems",
    "range_problems",
    "scope_problems",
    "streak_edge_problems",
    "unbounded_problems",
]


def _kind_of(spec: MachineSpec, reason: str) -> str | None:
    """The declared kind a reason ends with (``_retry``, …), if any."""
    return next((k for k in spec.reason_kinds if reason.endswith(f"_{k}")), None)


# ---- params and counters --------------------------------------------------------------------------------


def param_problems(spec: MachineSpec, lines: Lines) -> list[SpecProblem]:
    """A param's default fits its type (null only when nullable); only an int param has a `check` value."""
    return [problem for p in spec.params for problem in _one_param(spec.path, p)]


def _one_param(path: str, p: ParamSpec) -> list[SpecProblem]:
    out: list[SpecProblem] = []
    if p.default is None and not p.nullable:
        out.append(
            SpecProblem(
                path, p.line, f"param {p.name!r} has a null default but `nullable: false`", "give it a default value"
            )
        )
    elif (why := p.problem_with(p.default)) is not None:
        out.append(
            SpecProblem(
                path, p.line, f"param {p.name!r}: its default {p.default!r} {why}", f"make the default a {p.type}"
            )
        )
    if p.check is not None and p.type not in ("int", None):
        fix = "drop `check` (it is for int caps)"
        out.append(SpecProblem(path, p.line, f"param {p.name!r} is a {p.type} but has a `check` value", fix))
    return out


def counter_problems(spec: MachineSpec, lines: Lines) -> list[SpecProblem]:
    """A counter's cap is a number or an int param; its streak names declared reasons and emitted events."""
    return [problem for c in spec.counters for problem in (*_cap_problems(spec, c), *_streak_problems(spec, c))]


def _cap_problems(spec: MachineSpec, c: CounterSpec) -> list[SpecProblem]:
    if not isinstance(c.cap, str):
        if c.cap_offset:
            fix = "write the cap you mean, or use a param cap"
            return [SpecProblem(spec.path, c.line, f"counter {c.name!r} has `cap_offset` but a fixed cap", fix)]
        return []
    missing = unknown(spec.path, "param", c.cap, spec.param_map, c.line, f"counter {c.name!r} cap")
    if missing:
        return missing
    p = spec.param_map[c.cap]
    if p.type not in ("int", None):
        message = f"counter {c.name!r} cap names param {p.name!r}, a {p.type}"
        return [SpecProblem(spec.path, c.line, message, "cap it with an int param")]
    if p.type is None:
        return [
            SpecProblem(
                spec.path,
                p.line,
                f"param {p.name!r} caps counter {c.name!r} but has no type",
                "declare `type: int` (and `nullable: true` if null means no limit)",
            )
        ]
    return []


def _streak_problems(spec: MachineSpec, c: CounterSpec) -> list[SpecProblem]:
    reasons = {t.reason for t in spec.transitions}
    out = [
        problem
        for r in c.consecutive
        for problem in unknown(spec.path, "reason", r, reasons, c.line, f"counter {c.name!r} `consecutive`")
    ]
    for e in c.streak_of:
        missing = unknown(spec.path, "event", e, spec.events, c.line, f"counter {c.name!r} `streak_of`")
        out += missing
        if not missing and not any(e in s.emits for s in spec.states):
            message = f"counter {c.name!r} `streak_of` names event {e!r}, which no state emits"
            out.append(SpecProblem(spec.path, c.line, message, "name an outcome some state emits"))
    return out


def streak_edge_problems(spec: MachineSpec, lines: Lines) -> list[SpecProblem]:
    """A counter's ``consecutive`` never names the edge that counts it."""
    out: list[SpecProblem] = []
    for c in spec.counters:
        own = sorted(r for r in c.consecutive if any(t.reason == r and t.counter == c.name for t in spec.transitions))
        if own:
            out.append(
                SpecProblem(
                    spec.path,
                    c.line,
                    f"counter {c.name!r} `consecutive` names {own[0]!r}, the edge that counts it",
                    "an edge never resets the counter it increments; list the reasons that end the streak",
                )
            )
    return out


def range_problems(spec: MachineSpec, lines: Lines) -> list[SpecProblem]:
    """A param that caps a counter declares the largest value a caller may give, and every declared
    range holds the param's default and ``check`` value: a huge cap is refused, not explored."""
    caps = {c.cap for c in spec.counters if isinstance(c.cap, str)}
    return [
        problem
        for p in spec.params
        if p.type in ("int", "number")
        for problem in _one_range(spec, p, p.name in caps, line_of(lines, ("params", p.name)))
    ]


def _one_range(spec: MachineSpec, p: ParamSpec, is_cap: bool, where: int | None) -> list[SpecProblem]:
    if p.most is None and is_cap:
        return [
            SpecProblem(
                spec.path,
                where,
                f"param {p.name!r} caps a counter but declares no `max`: a cap without a range lets any value through",
                f"write it long-form with the largest value a caller may give, e.g. "
                f"`{p.name}: {{default: {p.default if p.default is not None else 'null'}, max: …}}`",
            )
        ]
    if p.most is None:
        return []
    return [
        SpecProblem(
            spec.path,
            where,
            f"param {p.name!r} has the {what} {value}, above its declared max {p.most:g}",
            "lower the value, or raise `max` if callers really need more",
        )
        for what, value in (("default", p.default), ("check value", p.check))
        if isinstance(value, int | float) and not isinstance(value, bool) and value > p.most
    ]


# ---- figures ---------------------------------------------------------------------------------------------


def figure_effect_problems(spec: MachineSpec, lines: Lines) -> list[SpecProblem]:
    """Each effect a figure counts is run by some state."""
    effects = {s.effect for s in spec.states if s.effect}
    return [
        SpecProblem(
            spec.path,
            line_of(lines, ("figures", figure)),
            f"figure {figure!r} names effect {effect!r}, which no state runs",
            close(effect, effects) or "list effects that states declare",
        )
        for figure, listed in spec.figures.items()
        for effect in listed
        if effect not in effects
    ]


def figure_param_problems(spec: MachineSpec, lines: Lines) -> list[SpecProblem]:
    """A figure's ``max_per_run`` and ``each_s`` name declared params."""
    params = spec.param_map
    out = [
        problem
        for figure, limit in spec.figure_max_per_run.items()
        if isinstance(limit, str)
        for problem in unknown(
            spec.path,
            "param",
            limit.partition(" ")[0],
            params,
            line_of(lines, ("figures", figure)),
            f"figure {figure!r}",
        )
    ]
    out += [
        problem
        for figure, each in spec.figure_each_s.items()
        for term in each
        if isinstance(term, str)
        for problem in unknown(
            spec.path, "param", term, params, line_of(lines, ("figures", figure)), f"figure {figure!r} `each_s`"
        )
    ]
    return out


# ---- progress and scopes ---------------------------------------------------------------------------------


def progress_problems(spec: MachineSpec, lines: Lines) -> list[SpecProblem]:
    """A ``progress`` edge is a forward step, never a recovery of a declared kind."""
    return [
        SpecProblem(
            spec.path,
            t.line,
            f"transition {t.reason!r} is marked `progress` but is a recovery (`_{kind}`): progress resets "
            f"every scope's budget, so a recovery marked progress is never bounded per {spec.step_scope}",
            "drop `progress: true`; only the forward step a user drives is progress",
        )
        for t in spec.transitions
        if t.progress and (kind := _kind_of(spec, t.reason)) is not None
    ]


def unbounded_problems(spec: MachineSpec, lines: Lines) -> list[SpecProblem]:
    """``unbounded_by_design`` lists only progress edges, never a recovery."""
    return [problem for reason in spec.unbounded_by_design for problem in _one_unbounded(spec, reason, lines)]


def _one_unbounded(spec: MachineSpec, reason: str, lines: Lines) -> list[SpecProblem]:
    where = line_of(lines, ("unbounded_by_design", reason))
    out: list[SpecProblem] = []
    kind = _kind_of(spec, reason)
    if kind is not None:
        out.append(
            SpecProblem(
                spec.path,
                where,
                f"`unbounded_by_design` lists {reason!r}, a recovery (`_{kind}`): a recovery is never unbounded "
                "by design",
                "bound it with a counter; list only forward progress a user drives",
            )
        )
    progress = {t.reason for t in spec.transitions if t.progress}
    if reason in progress:
        return out
    if any(t.reason == reason for t in spec.transitions):
        message = f"`unbounded_by_design` lists {reason!r}, which is not a `progress` edge"
        fix = "list only progress edges a user drives (a retry is never unbounded by design)"
    else:
        message = f"`unbounded_by_design` lists {reason!r}, which is not a reason of this machine"
        fix = close(reason, progress) or "name the reason of a progress edge"
    out.append(SpecProblem(spec.path, where, message, fix))
    return out


def bound_problems(spec: MachineSpec, lines: Lines) -> list[SpecProblem]:
    """An ``unbounded_by_design`` edge names the user-driven param that bounds it, and is bounded
    when that param is set: a ``session`` counter capped by it counts the edge and nothing resets it."""
    return [
        problem
        for reason, bound in spec.progress_bounds.items()
        for problem in _one_bound(spec, reason, bound, line_of(lines, ("unbounded_by_design", reason)))
    ]


def _one_bound(spec: MachineSpec, reason: str, bound: str, where: int | None) -> list[SpecProblem]:
    param = spec.param_map.get(bound)
    if param is None:
        return [
            SpecProblem(
                spec.path,
                where,
                f"`unbounded_by_design` entry {reason!r} names the bound {bound!r}, which is not a param",
                close(bound, spec.param_map) or "name the int param a user sets to bound it (e.g. max_turns)",
            )
        ]
    why = _why_unbounded(spec, reason, bound, param)
    if why is None:
        return []
    return [
        SpecProblem(
            spec.path,
            where,
            f"`unbounded_by_design` entry {reason!r} is not bounded when {bound!r} is set: {why}",
            f"count {reason!r} with a `{RUN}` counter whose cap is {bound!r} and that no edge resets",
        )
    ]


def _why_unbounded(spec: MachineSpec, reason: str, bound: str, param: ParamSpec) -> str | None:
    """Why setting ``bound`` leaves the edges of ``reason`` unbounded, else ``None``."""
    counters = {t.counter for t in spec.transitions if t.reason == reason}
    only = next(iter(counters)) if len(counters) == 1 else None
    counter = spec.counter_map.get(only) if only is not None else None
    if param.type != "int":
        return f"its bound {bound!r} is not an int param"
    if counter is None:
        return f"no counter capped by {bound!r} counts it"
    if counter.cap != bound:
        return f"its counter {counter.name!r} is capped by {counter.cap!r}, not by {bound!r}"
    if counter.scope != RUN:
        return f"its counter {counter.name!r} has scope {counter.scope!r}: a bound per run needs `{RUN}`"
    resetting = sorted({t.reason for t in spec.transitions if counter.name in spec.resets_of(t)})
    if resetting:
        return f"its counter {counter.name!r} is reset by {resetting}, so setting {bound!r} bounds nothing"
    return None


def scope_problems(spec: MachineSpec, lines: Lines) -> list[SpecProblem]:
    """Scopes are named once, never ``run`` (every machine has it); counters, properties and ``ends:`` edges
    name declared ones."""
    out: list[SpecProblem] = []
    where = line_of(lines, ("scopes",))
    if RUN in spec.scopes:
        out.append(SpecProblem(spec.path, where, f"`scopes` lists {RUN!r}, the scope every machine has", "drop it"))
    if len(set(spec.scopes)) != len(spec.scopes):
        out.append(SpecProblem(spec.path, where, "`scopes` names a scope twice", "name each once"))
    counted = (*spec.scopes, RUN)
    fix = f"one of {list(counted)} (declare more under `scopes:`, innermost first)"
    for c in spec.counters:
        if c.scope not in counted:
            message = f"counter {c.name!r} has scope {c.scope!r}, which is not declared"
            out.append(SpecProblem(spec.path, c.line, message, close(c.scope, counted) or fix))
    for p in spec.properties:
        if p.kind in ("at_most", "preceded") and p.per not in counted:
            message = f"property {p.name!r} is counted per {p.per!r}, which is not declared"
            out.append(SpecProblem(spec.path, p.line, message, close(p.per, counted) or fix))
    for t in spec.transitions:
        if t.ends is not None and t.ends not in spec.scopes:
            message = f"transition {t.reason!r} ends scope {t.ends!r}, which is not declared"
            out.append(SpecProblem(spec.path, t.line, message, close(t.ends, spec.scopes) or fix))
    return out
