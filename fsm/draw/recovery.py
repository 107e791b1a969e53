"""The recovery ladders as Markdown (``docs/recovery.md``): per event, what each state does with it, in order.

Owns the page's layout, in YAML order so a test can compare it with a fresh one. The wording is
:mod:`fsm.draw.ladder`'s; ``queryloop docs`` writes the file.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..model.spec import MachineSpec
from .ladder import Decision, cap_text, counter_rows, decisions, outcome_text, source_name

__all__ = ["recovery_markdown"]

_INTRO = """\
What each machine does with each event, read from its YAML. The state that
receives an event tries that event's candidates in order (their order in the
YAML): the first whose guards all hold and whose counter is below its cap is
taken, and its counter counts one more; the last candidate has no condition and
always fires. "resets" lists every counter the edge sets back to 0 — its own
`resets`, the counters that count a streak it breaks, and by scope (a progress
edge resets the counters of every scope but the run, an `ends:` edge those of
its scope and the scopes inside it). The same ladders are drawn, one decision point per (state, event),
in [`diagrams/`](../diagrams/)."""


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|") or "—"


def _code(names: Iterable[str]) -> str:
    return ", ".join(f"`{n}`" for n in names) or "—"


def _anchor(spec: MachineSpec, event: str) -> str:
    return f"{spec.name}-{event}".replace("_", "-")


def _rows(spec: MachineSpec, d: Decision) -> list[str]:
    rows = []
    for c in d.candidates:
        t = c.transition
        counter = "—"
        if t.counter is not None:
            counter = f"`{t.counter}` < {cap_text(spec, spec.counter_map[t.counter])}"
        resets = [x.name for x in spec.counters if x.name in spec.resets_of(t)]
        flags = [f for f, on in (("progress", t.progress), (f"ends {t.ends}", t.ends is not None)) if on]
        cells = [
            f"`{d.source}`" if c.order == 1 else "",
            str(c.order),
            f"`{t.reason}`" + (f" ({', '.join(flags)})" if flags else ""),
            _code(t.guards) if t.guards else ("otherwise" if t.counter is None else "—"),
            counter,
            f"`{t.dest}`",
            _code(resets),
            _cell(outcome_text(spec, t)),
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def _event_sections(spec: MachineSpec) -> list[str]:
    by_event: dict[str, list[Decision]] = {}
    for d in decisions(spec):
        by_event.setdefault(d.event, []).append(d)
    order = [e for e in spec.events if e in by_event] + [e for e in by_event if e not in spec.events]
    lines = ["Events: " + " · ".join(f"[`{e}`](#{_anchor(spec, e)})" for e in order), ""]
    head = "| in state | # | reason | guards | counter < cap | to | resets | what the user sees |"
    for event in order:
        lines += [
            f'<a id="{_anchor(spec, event)}"></a>',
            "",
            f"### `{event}`" + (f" — {_cell(spec.events[event])}" if spec.events.get(event) else ""),
            "",
            head,
            "|---|---|---|---|---|---|---|---|",
        ]
        for d in by_event[event]:
            lines += _rows(spec, d)
        lines.append("")
    return lines


def _reference(spec: MachineSpec) -> list[str]:
    lines = [
        "### Counters",
        "",
        "| counter | cap | scope | counted by | reset by | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for r in counter_rows(spec):
        reset = "; ".join(r.reset_by)
        lines.append(
            f"| `{r.name}` | {_cell(r.cap)} | {r.scope} | {_code(r.counted_by)} | {_cell(reset)} | {_cell(r.doc)} |"
        )
    if spec.guard_docs or spec.guards:
        lines += ["", "### Guards", "", "| guard | holds when |", "|---|---|"]
        for name in spec.guards:
            lines.append(f"| `{name}` | {_cell(spec.guard_docs.get(name, ''))} |")
    if spec.params:
        lines += ["", "### Params", "", "| param | default | explored by `check` | meaning |", "|---|---|---|---|"]
        for p in spec.params:
            default = "unset" if p.default is None else str(p.default)
            check = "" if p.check is None else str(p.check)
            lines.append(f"| `{p.name}` | {default} | {_cell(check)} | {_cell(p.doc)} |")
    return [*lines, ""]


def _value(value: object) -> str:
    if isinstance(value, list | tuple):
        return _code(map(str, value))
    text = str(value)
    return f"`{text}`" if text and " " not in text.strip() else _cell(text)


def _templates(spec: MachineSpec) -> list[str]:
    """Each template once: its doc, its picture, and a table of what each instance gives each param."""
    if not spec.templates:
        return []
    lines = [
        "### Templates",
        "",
        "A ladder declared once and instantiated; the tables above list each instance's edges.",
        "",
    ]
    for t in spec.templates:
        uses = [i for i in spec.instances if i.template == t.name]
        picture = f"../diagrams/{spec.name}.template.{t.name}.svg"
        lines += [f"**`{t.name}`** — {_cell(t.doc)} ([drawn once]({picture}))", ""]
        lines.append("| param | meaning | " + " | ".join(f"`{i.name}`" for i in uses) + " |")
        lines.append("|---|---|" + "---|" * len(uses))
        for name, doc in t.params:
            given = [dict(i.values).get(name, "") for i in uses]
            lines.append(f"| `{name}` | {_cell(doc)} | " + " | ".join(_value(v) for v in given) + " |")
        lines.append("")
    return lines


def recovery_markdown(specs: Sequence[MachineSpec]) -> str:
    """The whole document for ``specs``, in the order given."""
    lines = [
        "# Recovery ladders",
        "",
        "<!-- generated from the machine YAML by `queryloop docs`; do not edit -->",
        "",
        _INTRO,
        "",
    ]
    if len(specs) > 1:
        lines += ["Machines: " + " · ".join(f"[`{s.name}`](#{s.name.replace('_', '-')})" for s in specs), ""]
    for spec in specs:
        lines += [f'<a id="{spec.name.replace("_", "-")}"></a>', "", f"## {spec.name}", ""]
        where = f"`{source_name(spec)}` — {len(spec.states)} states, {len(spec.transitions)} transitions"
        lines += [f"{where} — {_cell(spec.doc)}" if spec.doc else where, ""]
        lines += _event_sections(spec)
        lines += _templates(spec)
        lines += _reference(spec)
    return "\n".join(lines).rstrip("\n") + "\n"
