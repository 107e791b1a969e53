"""docs/properties.md: every promise the shipped machines declare, written from the loaded machines.

Owns docs/properties.md, all of it: per shipped machine, where its edges may end (each ``ends``
rule with the reasons it covers now, every edge into a terminal state with its reason kind),
its order, budget, streak, breaker, reset, guard and precedence properties, what each guard
decides, its counters' caps, its figures, its progress bounds, its children, its invariants,
each handler's frame and its params' ranges. A change that weakens a promise (a cap raised, a
reason renamed out of a rule, a frame widened) is then a diff of this page in review.
``python tools/properties_page.py`` rewrites the page; ``--check`` rewrites nothing and fails,
naming the command, when it is stale (``tests/test_docs.py`` runs it).

Does not own the machines, nor the checker that proves what the page lists.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from queryloop.fsm.model.load import load_machine
from queryloop.fsm.model.spec import MachineSpec, PropertySpec, TransitionSpec
from queryloop.machines import shipped_machines

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "properties.md"
COMMAND = "python tools/properties_page.py"

if str(ROOT / "tools") not in sys.path:  # generated_page, also when a test loads this script by its path
    sys.path.append(str(ROOT / "tools"))
from generated_page import page_main  # noqa: E402

INTRO = """\
# Declared properties

<!-- generated from the machine YAML by `python tools/properties_page.py`; do not edit -->

What each shipped machine promises, as its YAML declares it: the page is written from the
loaded machines, and `tests/test_docs.py` fails when it is stale. A change that weakens a
promise — a budget raised, a reason renamed out of an `ends` rule, a guard's meaning
narrowed, a handler's frame widened — is a diff of this page in review, beside the diff of
the YAML. What `queryloop check` proves of these promises is in
[the checker and what it proves](checker.md); the keys are described in
[machine files](machines.md#properties).
"""


# ---- text helpers ------------------------------------------------------------------------------


def _text(value: object) -> str:
    """One table cell: a doc on one line, ``|`` escaped."""
    return " ".join(str(value).split()).replace("|", "\\|")


def _code(names: Iterable[object]) -> str:
    shown = [f"`{n}`" for n in names]
    return ", ".join(shown) if shown else "—"


def _table(head: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """A Markdown table (none without rows)."""
    body = ["| " + " | ".join(_text(c) for c in row) + " |" for row in rows]
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *body] if body else []


def _section(title: str, lines: list[str], empty: str = "") -> list[str]:
    if not lines and not empty:
        return []
    return [f"### {title}", "", *(lines or [empty]), ""]


def _limit(value: int | str | None) -> str:
    return "—" if value is None else f"`{value}`"


def _kind(spec: MachineSpec, reason: str) -> str:
    """The declared reason kind ``reason`` ends in (its longest match), or "—"."""
    kinds = [k for k in spec.reason_kinds if reason.endswith(f"_{k}")]
    return f"`{max(kinds, key=len)}`" if kinds else "—"


def _of_kind(spec: MachineSpec) -> dict[str, list[str]]:
    """Each declared kind with the reasons of that kind, in YAML order."""
    found: dict[str, list[str]] = {k: [] for k in spec.reason_kinds}
    for reason in dict.fromkeys(t.reason for t in spec.transitions):
        kinds = [k for k in spec.reason_kinds if reason.endswith(f"_{k}")]
        if kinds:
            found[max(kinds, key=len)].append(reason)
    return found


def _props(spec: MachineSpec, kind: str) -> list[PropertySpec]:
    return [p for p in spec.properties if p.kind == kind]


# ---- the sections -------------------------------------------------------------------------------


def _reason_kinds(spec: MachineSpec) -> list[str]:
    kinds = _of_kind(spec)
    rows = [(f"`{k}`", meaning, _code(kinds[k])) for k, meaning in spec.reason_kinds.items()]
    if not rows:
        return _section("Reason kinds", [], "None declared.")
    kinded = {r for reasons in kinds.values() for r in reasons}
    plain = [r for r in dict.fromkeys(t.reason for t in spec.transitions) if r not in kinded]
    rest = ["", f"Reasons of no declared kind: {_code(plain)}."]
    return _section("Reason kinds", [*_table(("kind", "meaning", "reasons of the kind"), rows), *rest])


def _ends(spec: MachineSpec) -> list[str]:
    lines: list[str] = []
    reasons = list(dict.fromkeys(t.reason for t in spec.transitions))
    for prop in _props(spec, "ends"):
        lines += [f"`{prop.name}` — {_text(prop.doc)}", ""]
        rows = []
        for rule in prop.rules:
            said = [*(f"kind `{k}`" for k in rule.kinds), *(f"`{r}`" for r in rule.reasons)]
            but = f" but {_code(rule.unless)}" if rule.unless else ""
            covered = [r for r in reasons if rule.covers(r)]
            rows.append((", ".join(said) + but, _code(covered), _wanted(rule.result)))
        lines += [*_table(("edges", "reasons covered now", "must end in"), rows), ""]
    terminal = {s.name for s in spec.states if s.terminal}
    into = [t for t in spec.transitions if t.dest in terminal]
    rows2 = [(f"`{t.source}`", f"`{t.reason}`", _kind(spec, t.reason), f"`{t.dest}`", _result(spec, t)) for t in into]
    lines += ["Every edge into a terminal state:", ""]
    lines += _table(("from", "reason", "kind", "to", "result"), rows2)
    return _section("Where runs end", lines)


def _result(spec: MachineSpec, t: TransitionSpec) -> str:
    result = spec.state(t.dest).result
    return ", ".join(f"{k}: {json.dumps(v)}" for k, v in result.items()) or "—"


def _wanted(pairs: Sequence[tuple[str, Any]]) -> str:
    if not pairs:
        return "any terminal state"
    return "a terminal state whose result has " + ", ".join(f"{k}: {json.dumps(v)}" for k, v in pairs)


def _short(spec: MachineSpec, dotted: str) -> str:
    """A dotted name as the YAML writes it: relative to the machine's package."""
    package = f"{spec.package}."
    return f"`.{dotted[len(package) :]}`" if spec.package and dotted.startswith(package) else f"`{dotted}`"


def _orders(spec: MachineSpec) -> list[str]:
    rows = [(f"`{p.name}`", " → ".join(f"`{r}`" for r in p.reasons), p.doc) for p in _props(spec, "order")]
    return _section("Order of candidates", _table(("property", "tried in this order", "why"), rows))


def _budgets(spec: MachineSpec) -> list[str]:
    rows = [(f"`{p.name}`", _code(p.reasons), _limit(p.most), p.per, p.doc) for p in _props(spec, "at_most")]
    head = ("property", "edges", "at most", "per", "why")
    return _section("Budgets (`at_most`)", _table(head, rows))


def _streaks(spec: MachineSpec) -> list[str]:
    rows = []
    for p in _props(spec, "in_a_row"):
        broken = _code(p.reasons) if p.reasons else "any other outcome of a state it counts in"
        rows.append((f"`{p.name}`", f"`{p.counter}`", broken, p.doc))
    streaks = _table(("property", "counter", "streak broken by", "why"), rows)
    trips = [(f"`{p.name}`", _code(p.reasons[:1]), _limit(p.most), p.doc) for p in _props(spec, "trips")]
    breakers = _table(("property", "breaker", "taken at the repeat", "why"), trips)
    return [
        *_section("Streaks (`in_a_row`)", streaks),
        *_section("Breakers (`trips`)", breakers),
    ]


def _others(spec: MachineSpec) -> list[str]:
    resets = [(f"`{p.name}`", _code(p.reasons), _code(p.counters), p.doc) for p in _props(spec, "resets")]
    guarded = [(f"`{p.name}`", _code(p.reasons), f"`{p.guard}`", p.doc) for p in _props(spec, "guarded")]
    preceded = [(f"`{p.name}`", _code(p.states), _code(p.by), p.per, p.doc) for p in _props(spec, "preceded")]
    return [
        *_section("Resets", _table(("property", "after", "these counters are 0", "why"), resets)),
        *_section("Guarded edges", _table(("property", "edges", "only while", "why"), guarded)),
        *_section(
            "Precedence (`preceded`)",
            _table(("property", "a step into", "comes after one into", "per", "why"), preceded),
        ),
    ]


def _guards(spec: MachineSpec) -> list[str]:
    rows = [
        (f"`{g}`", _code(spec.guard_decides[g]) if g in spec.guard_decides else "not declared", spec.guard_docs.get(g))
        for g in spec.guards
    ]
    return _section("Guards and the edges each decides", _table(("guard", "decides", "meaning"), rows))


def _counters(spec: MachineSpec) -> list[str]:
    rows = []
    for c in spec.counters:
        offset = f" {'+' if c.cap_offset > 0 else '−'} {abs(c.cap_offset)}" if c.cap_offset else ""
        cap = f"`{c.cap}`{offset}"
        counted = _code(t.reason for t in spec.transitions if t.counter == c.name)
        reset = _code(c.consecutive) if c.consecutive else "—"
        streak = f"in a row of {_code(c.streak_of)}" if c.streak_of else ""
        rows.append((f"`{c.name}`", cap, c.scope, counted, reset, streak or "—"))
    head = ("counter", "cap", "scope", "counted by", "reset by", "streak")
    return _section("Counters and their caps", _table(head, rows))


def _figures(spec: MachineSpec) -> list[str]:
    rows = []
    for name, effects in spec.figures.items():
        waits = spec.figure_each_s.get(name)
        rows.append(
            (
                f"`{name}`",
                ", ".join(_short(spec, e) for e in effects),
                _limit(spec.figure_max.get(name)),
                _limit(spec.figure_max_per_run.get(name)),
                _limit(spec.figure_max_with_children.get(name)),
                _code(waits) if waits else "—",
            )
        )
    head = ("figure", "effects", f"max per {spec.step_scope}", "max per run", "max with children", "each at most (s)")
    return _section("Figures", _table(head, rows))


def _progress(spec: MachineSpec) -> list[str]:
    rows = [(f"`{r}`", _limit(spec.progress_bounds.get(r)), why) for r, why in spec.unbounded_by_design.items()]
    return _section("Progress bounded only by a limit the user sets", _table(("edge", "bound", "why"), rows))


def _children(spec: MachineSpec) -> list[str]:
    rows = [
        (
            f"`{c.name}`",
            f"`{c.admitted}`",
            f"`{c.refused}`",
            f"`{c.starts}`",
            f"`{c.steps}`",
            c.depth,
            _limit(c.pending),
        )
        for c in spec.children
    ]
    head = ("children", "started by", "refused by", "counted by", "steps", "depth", "pending while")
    return _section("Children", _table(head, rows))


def _invariants(spec: MachineSpec) -> list[str]:
    rows = [(f"`{i.name}`", _code(i.at), _short(spec, i.call), i.doc) for i in spec.invariants]
    return _section("Invariants", _table(("invariant", "holds entering", "checked by", "what"), rows))


def _frames(spec: MachineSpec) -> list[str]:
    rows = []
    for t in spec.transitions:
        if t.do is None:
            continue
        if t.frame is None:
            rows.append((f"`{t.source}`", f"`{t.reason}`", _handler(t), "no contract", "—", "—"))
            continue
        sets = ", ".join(f"`{path}` = {_value(v)}" for path, v in t.sets) or "—"
        rows.append((f"`{t.source}`", f"`{t.reason}`", _handler(t), _code(t.changes), sets, _code(t.may_change)))
    intro = [
        "Each edge's handler changes its `changes`, leaves `sets` at their values, may change `may_change`,",
        "and leaves every other field of the run data as it was (an edge with none of them declares no frame).",
        "",
    ]
    head = ("from", "reason", "handler", "changes", "sets", "may change")
    table = _table(head, rows)
    return _section("Handler frames", [*intro, *table] if table else [])


def _handler(t: TransitionSpec) -> str:
    return f"`{(t.do or '').rpartition('.')[2]}`"


def _value(value: Any) -> str:
    if isinstance(value, tuple) and len(value) == 2 and value[0] == "was":
        return f"what `{value[1]}` was"
    return f"`{json.dumps(value)}`"


def _params(spec: MachineSpec) -> list[str]:
    rows = [
        (f"`{p.name}`", f"`{p.default}`", "—" if p.check is None else f"`{p.check}`", _limit(_most(p.most)), p.doc)
        for p in spec.params
    ]
    head = ("param", "default", "checked at", "at most", "meaning")
    return _section("Params and their ranges", _table(head, rows))


def _most(most: float | None) -> str | None:
    return None if most is None else f"{most:g}"


def _machine(spec: MachineSpec, path: Path) -> list[str]:
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    head = [
        f"## {spec.name}",
        "",
        f"`{where}` — {len(spec.states)} states, {len(spec.transitions)} transitions, "
        f"{len(spec.properties)} properties.",
        "",
    ]
    parts = (
        _ends,
        _reason_kinds,
        _orders,
        _budgets,
        _streaks,
        _others,
        _guards,
        _counters,
        _figures,
        _progress,
        _children,
        _invariants,
        _frames,
        _params,
    )
    return head + [line for part in parts for line in part(spec)]


def render(paths: Sequence[Path] | None = None) -> str:
    """The page for the machines at ``paths`` (default: every shipped machine)."""
    lines = [INTRO]
    for path in paths if paths is not None else shipped_machines():
        lines += _machine(load_machine(str(path), bind=False).spec, Path(path))
    return "\n".join(lines).rstrip("\n") + "\n"


def stale(*, write: bool) -> bool:
    """Whether the page differs from :func:`render`'s; with ``write``, rewrite it."""
    text = render()
    if PAGE.exists() and PAGE.read_text(encoding="utf-8") == text:
        return False
    if write:
        PAGE.write_text(text, encoding="utf-8")
    return True


def main(argv: list[str] | None = None) -> int:
    return page_main(argv, doc=__doc__, page=PAGE, command=COMMAND, stale=stale)


if __name__ == "__main__":
    raise SystemExit(main())
