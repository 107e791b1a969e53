"""The machine as one Promela model, for SPIN: the second, independent checker's input.

Owns :func:`to_promela`: the states, counters and decisions as ``d_step`` options, with the
monitors ``monitors`` derives from the declaration; it shares no code with the first checker.
Running SPIN, choosing its settings and reading trails is ``fsm.verify.spin``'s; it imports the printf markers.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import FsmError
from ..model.spec import MachineSpec, TransitionSpec
from .monitors import LIVENESS, Monitors, derived_resets, property_monitors, scope_ended

__all__ = [
    "FAILURE_MARK",
    "LIVENESS",
    "MONITORS",
    "REASON_MARK",
    "Monitors",
    "SpinError",
    "derived_resets",
    "property_monitors",
    "resolve_params",
    "to_promela",
    "tracked_caps",
    "wrapped",
]

MONITORS = "MONITORS"  # the preprocessor symbol that puts the property monitors and the LTL claim in
REASON_MARK = "@@ "  # printf prefix of a reason in a replayed trail
FAILURE_MARK = "@@! "  # printf prefix of what went wrong (a stuck decision, a broken property)

# an atom of an option's condition: ("lt", counter) is `counter < cap`, ("ge", counter) `counter >= cap`
_Atom = tuple[str, str]
_Conj = frozenset[_Atom]


class SpinError(FsmError):
    """SPIN, the C compiler or pan failed on a model (a tool failure, not a finding about the machine)."""


def resolve_params(spec: MachineSpec, params: Mapping[str, object] | None) -> dict[str, Any]:
    """Every param's check value, overridden by those ``params`` gives."""
    values = spec.param_check_values
    values.update(params or {})
    return values


def to_promela(spec: MachineSpec, params: Mapping[str, object] | None = None) -> str:
    """The machine as one Promela model; ``params`` resolve as for ``check_spec``, the reset sets
    (per edge, the counters it zeroes) are :func:`derived_resets`'.

    One global ``st`` (an ``mtype``, one value per state), one bounded global per counter
    whose cap is set (others are untracked, as in the explorer: the cap test is a free
    guard), and one active process looping over ``d_step`` options, one per (state, event,
    winning edge, earlier candidates able to fire): the option's condition folds in every
    truth assignment of the decision's guard names under which that edge is the first
    candidate whose counter is below its cap, so one engine step is one atomic step and the
    process's control state never changes. A step into a terminal state zeroes the counters
    (a run that ended is its end, as the explorer counts). The increment needs no
    ``counter <= cap`` assertion: the option's condition is ``counter < cap``.

    Compiled with ``-DMONITORS`` (the monitor search), each step also checks the declared
    properties: an ``order`` one asserts that no candidate listed before the one taken could
    fire (its guards held and its counter was below its cap); an ``at_most`` one counts its
    edges in a ghost counter reset at its scope's end and asserts it stays within the bound;
    an ``in_a_row`` one counts the steps of its counter since the streak last broke and
    asserts the counter is no more. The stuck assertions are left out there (the safety
    search has them; a stuck configuration blocks, which the claim reports as a turn that
    never ends), and ``step_over`` — set by a progress step or an end — feeds the LTL claim
    ``[] <> step_over``.
    """
    values = resolve_params(spec, params)
    caps = tracked_caps(spec, values)
    monitors = property_monitors(spec, values, caps)
    resets = derived_resets(spec)
    states = [s.name for s in spec.states]
    if len(states) > 255:
        raise SpinError(f"machine {spec.name!r}: {len(states)} states; a Promela mtype holds at most 255")
    groups = spec.candidates()
    out = [
        _comment(f"machine {spec.name} ({spec.path}), exported by queryloop.fsm.verify.spin"),
        *wrapped("/* params: ", [_comment(f"{k}={v!r}")[3:-3] for k, v in values.items()] or ["none"], " */"),
        "/* without MONITORS, one stored state per (state, counters) configuration: st and the tracked counters */",
        "",
        *wrapped("mtype = { ", [_st(s) for s in states], " };"),
        f"mtype st = {_st(spec.initial)};",
    ]
    for c in spec.counters:
        cap = caps.get(c.name)
        if cap is None:
            out.append(f"/* counter {c.name}: cap unset, untracked (its cap test is a free guard) */")
        else:
            out.append(f"{_int_type(cap)} {_ct(c.name)} = 0; /* cap {cap} */")
    out += [f"#ifdef {MONITORS}", *_ghost_declarations(monitors), "#endif", ""]
    out += ["active proctype machine() {", "end_loop:", "  do"]
    for s in spec.states:
        if s.terminal:
            continue
        for event in dict.fromkeys((*s.emits, spec.abort_event)):
            cands = groups.get((s.name, event), ())
            out.append(f"  /* {s.name} on {event}: " + (", ".join(t.reason for t in cands) or "no candidate") + " */")
            outcomes = _outcomes(cands, caps, monitors.before)
            for winner, earlier, conjs in outcomes:
                cond = _condition(s.name, conjs, caps)
                if winner is None:
                    fail = f"stuck in {s.name} on {event}: no candidate can fire"
                    out += [
                        f"#ifndef {MONITORS}",
                        f'  :: d_step {{ {cond} -> printf("{FAILURE_MARK}{fail}\\n"); assert(false) }}',
                    ]
                    out.append("#endif")
                    continue
                out += _option(spec, cands[winner], cond, earlier, caps, resets, monitors)
            winners = {w for w, _, _ in outcomes}
            for i, t in enumerate(cands):
                if i not in winners:
                    why = f"the cap of {t.counter} is 0" if caps.get(t.counter or "") == 0 else "shadowed"
                    out.append(f"  /* {t.reason} never fires: {why} */")
    out += ["  od", "}", ""]
    return "\n".join(out)


def _ghost_declarations(m: Monitors) -> list[str]:
    out = [
        f"{_int_type(b.limit + 1)} {b.var} = 0; /* at_most {b.name}: its edges this {b.per}, at most {b.limit} */"
        for b in m.budgets
    ]
    out += [
        f"{_int_type(s.cap)} {s.var} = 0; /* in_a_row {s.name}: steps of {s.counter} in a row */" for s in m.streaks
    ]
    out += [
        f"bit {p.var} = {p.start}; /* preceded {p.name}: a step into {', '.join(sorted(p.by))} this {p.per} */"
        for p in m.paths
    ]
    out += [
        "bit step_over = 0; /* the last step was a progress step (a new step scope) or into an end */",
        f"ltl {LIVENESS} {{ [] <> step_over }}",
    ]
    return [_comment_safe(line) for line in out]


def _comment_safe(line: str) -> str:
    head, sep, comment = line.partition("/* ")
    return head + sep + comment[:-3].replace("*/", "* /") + " */" if sep else line


def _option(
    spec: MachineSpec,
    t: TransitionSpec,
    cond: str,
    earlier: frozenset[tuple[str, TransitionSpec]],
    caps: Mapping[str, int],
    resets: Mapping[tuple[str, str], frozenset[str]],
    m: Monitors,
) -> list[str]:
    """One ``d_step`` option: the reason printed, the order checks (counters as they were), the
    resets and the increment, the ghosts and their checks, then, into an end, every counter zeroed
    (a run that ended is its terminal state, whatever its counters were: one configuration per
    end, as the explorer counts)."""
    ended = spec.state_map[t.dest].terminal
    lines = [f"  :: d_step {{ {cond} ->", f'       printf("{REASON_MARK}{t.reason}\\n")']
    lines += _monitored([_order_check(t, p, c, caps) for p, c in sorted(earlier, key=lambda pc: (pc[0], pc[1].reason))])
    lines.append("       ; " + "; ".join(_updates(t, caps, resets)))
    lines += _monitored([*_ghost_updates(spec, t, m, ended), *_end_checks(spec, t, m)])
    if ended:
        lines.append("       ; " + "; ".join(f"{_ct(c)} = 0" for c in caps))
        zeroed = [f"{g} = 0" for g in (*(b.var for b in m.budgets), *(s.var for s in m.streaks))]
        lines += _monitored([*zeroed, *(f"{p.var} = {p.start}" for p in m.paths)])
    lines.append("     }")
    return lines


def _monitored(statements: Sequence[str]) -> list[str]:
    if not statements:
        return []
    return [f"#ifdef {MONITORS}", *(f"       ; {s}" for s in statements), "#endif"]


def _violation(message: str, *args: str) -> str:
    extra = "".join(f", {a}" for a in args)
    return f'printf("{FAILURE_MARK}{message}\\n"{extra}); assert(false)'


def _order_check(t: TransitionSpec, prop: str, c: TransitionSpec, caps: Mapping[str, int]) -> str:
    """``c`` (listed before ``t`` in ``prop``) had its guards hold here: its counter must be at its cap."""
    broken = _violation(
        f"property {prop} broken: {t.reason} taken from {t.source} on {t.event} "
        f"while {c.reason}, listed before it, could fire"
    )
    if c.counter is None or c.counter not in caps:
        return broken
    return f"if :: {_ct(c.counter)} < {caps[c.counter]} -> {broken} :: else -> skip fi"


def _ghost_updates(spec: MachineSpec, t: TransitionSpec, m: Monitors, ended: bool) -> list[str]:
    """Each budget and streak the step counts or restarts, with its check; each counter a ``resets``
    property wants 0 after the step checked; ``step_over`` set or cleared."""
    out: list[str] = []
    for prop, counter in m.zeroed.get(t.reason, ()):
        broken = _violation(f"property {prop} broken: {counter} is %d after {t.reason}, not 0", _ct(counter))
        out.append(f"if :: {_ct(counter)} != 0 -> {broken} :: else -> skip fi")
    for b in m.budgets:
        if t.reason in b.counts:
            broken = _violation(
                f"property {b.name} broken: {t.reason} makes %d of its edges this {b.per}, above {b.limit}", b.var
            )
            out += [f"{b.var}++", f"if :: {b.var} > {b.limit} -> {broken} :: else -> skip fi"]
        elif t.reason in b.restarts and not ended:
            out.append(f"{b.var} = 0")
    for s in m.streaks:
        c = _ct(s.counter)
        if t.reason in s.counts:
            # saturated at the cap: the counter never passes it, so `c > ghost` keeps its truth
            broken = _violation(
                f"property {s.name} broken: {s.counter} is %d after {t.reason}, %d step(s) in a row", c, s.var
            )
            out += [f"{s.var} = ({s.var} < {s.cap} -> {s.var} + 1 : {s.cap})"]
            out.append(f"if :: {c} > {s.var} -> {broken} :: else -> skip fi")
        elif t.reason in s.restarts and not ended:
            out.append(f"{s.var} = 0")
    for p in m.paths:
        if scope_ended(spec, t, p.per) and not ended:
            out.append(f"{p.var} = 0")
        if t.dest in p.by:
            out.append(f"{p.var} = 1")
        if t.dest in p.states:
            broken = _violation(
                f"property {p.name} broken: {t.reason} enters {t.dest} with no step into "
                f"{' or '.join(sorted(p.by))} since the {p.per} began"
            )
            out.append(f"if :: {p.var} == 0 -> {broken} :: else -> skip fi")
    out.append(f"step_over = {1 if t.progress or ended else 0}")
    return out


def _end_checks(spec: MachineSpec, t: TransitionSpec, m: Monitors) -> list[str]:
    """An ``ends`` property's rule that covers ``t`` (its reason of a listed kind or listed, not excepted)
    and that ``t``'s target does not keep: the step itself breaks it."""
    out: list[str] = []
    dest = spec.state_map[t.dest]
    for prop in m.ends:
        for rule in prop.rules:
            kinds = any(t.reason.endswith("_" + k) for k in rule.kinds)
            if t.reason in rule.unless or not (kinds or t.reason in rule.reasons):
                continue
            if not dest.terminal or any(dest.result.get(k) != v for k, v in rule.result):
                out.append(_violation(f"property {prop.name} broken: {t.reason} goes to {t.dest}"))
            break
    return out


def wrapped(head: str, items: Sequence[str], tail: str, width: int = 100) -> list[str]:
    """``head`` + the comma-separated items + ``tail``, continued on indented lines past ``width``."""
    lines = [head]
    for i, item in enumerate(items):
        text = item + ("," if i < len(items) - 1 else "")
        if len(lines[-1]) + len(text) + 1 > width and lines[-1].strip():
            lines.append("    ")
        lines[-1] += ("" if lines[-1].endswith((" ", "{")) else " ") + text
    lines[-1] += tail
    return lines


def _comment(text: str) -> str:
    return "/* " + text.replace("*/", "* /") + " */"


def _st(state: str) -> str:
    return f"s_{state}"


def _ct(counter: str) -> str:
    return f"c_{counter}"


def _int_type(cap: int) -> str:
    return "byte" if cap <= 255 else "short" if cap <= 32767 else "int"


def tracked_caps(spec: MachineSpec, values: Mapping[str, object]) -> dict[str, int]:
    """The cap of every counter whose cap is set at ``values`` (the others are untracked: a free guard)."""
    out: dict[str, int] = {}
    for c in spec.counters:
        cap = spec.cap_of(c, values)
        if cap is not None:
            out[c.name] = cap
    return out


def _free_names(t: TransitionSpec, caps: Mapping[str, int]) -> tuple[str, ...]:
    """The free booleans a candidate needs true: its guards, and an untracked counter's cap test."""
    if t.counter is not None and t.counter not in caps:
        return (*t.guards, f"{t.counter} < unset cap")
    return t.guards


_Outcome = tuple[int | None, frozenset[tuple[str, TransitionSpec]], tuple[_Conj, ...]]


def _outcomes(
    cands: Sequence[TransitionSpec],
    caps: Mapping[str, int],
    before: Mapping[str, Sequence[tuple[str, str]]],
) -> list[_Outcome]:
    """Per winning candidate (``None``: stuck) and set of earlier-listed candidates whose guards held,
    the counter conditions under which it wins.

    Every truth assignment of the decision's guard names (one value per name) gives the
    candidates whose guards hold, in YAML order; along it, a candidate with a tracked
    counter wins when its counter is below its cap and every one before it is at its cap.
    ``before`` maps a reason to the (order property, reason) pairs a property lists before
    it: those of them whose guards hold in the assignment go with the outcome, for the
    monitor to check they could not fire. The conditions of one outcome are OR-ed, reduced
    by absorption.
    """
    names = list(dict.fromkeys(n for t in cands for n in _free_names(t, caps)))
    by_reason = {t.reason: t for t in cands}
    wins: dict[tuple[int | None, frozenset[tuple[str, TransitionSpec]]], set[_Conj]] = {}

    def record(winner: int | None, conj: set[_Atom], true: set[str]) -> None:
        if any(("lt", c) in conj and ("ge", c) in conj for _, c in conj):
            return  # contradictory: a counter both below and at its cap
        if any(op == "lt" and caps[c] == 0 for op, c in conj):
            return  # a counter below a cap of 0
        earlier: frozenset[tuple[str, TransitionSpec]] = frozenset()
        if winner is not None:
            earlier = frozenset(
                (prop, by_reason[r])
                for prop, r in before.get(cands[winner].reason, ())
                if r in by_reason and all(n in true for n in _free_names(by_reason[r], caps))
            )
        kept = frozenset(a for a in conj if not (a[0] == "ge" and caps[a[1]] == 0))
        wins.setdefault((winner, earlier), set()).add(kept)

    for bits in itertools.product((False, True), repeat=len(names)):
        true = {n for n, b in zip(names, bits, strict=True) if b}
        blocked: set[_Atom] = set()
        for i, t in enumerate(cands):
            if not all(n in true for n in _free_names(t, caps)):
                continue
            if t.counter in caps:
                assert t.counter is not None
                record(i, blocked | {("lt", t.counter)}, true)
                blocked.add(("ge", t.counter))
                continue
            record(i, blocked, true)
            break
        else:
            record(None, blocked, true)
    rank = {w: i for i, w in enumerate([*range(len(cands)), None])}
    return [
        (w, earlier, tuple(sorted((c for c in conjs if not any(o < c for o in conjs)), key=_conj_key)))
        for (w, earlier), conjs in sorted(wins.items(), key=lambda kv: (rank[kv[0][0]], _earlier_key(kv[0][1])))
    ]


def _earlier_key(earlier: frozenset[tuple[str, TransitionSpec]]) -> list[tuple[str, str]]:
    return sorted((p, t.reason) for p, t in earlier)


def _conj_key(conj: _Conj) -> tuple[int, list[_Atom]]:
    return (len(conj), sorted(conj, key=lambda a: (a[1], a[0])))


def _condition(state: str, conjs: Sequence[_Conj], caps: Mapping[str, int]) -> str:
    head = f"st == {_st(state)}"
    if any(not c for c in conjs):
        return head
    atoms = [
        " && ".join(f"{_ct(c)} {'<' if op == 'lt' else '>='} {caps[c]}" for op, c in sorted(conj, key=lambda a: a[1]))
        for conj in conjs
    ]
    if len(atoms) == 1:
        return f"{head} && {atoms[0]}"
    return f"{head} && (" + " || ".join(f"({a})" for a in atoms) + ")"


def _updates(t: TransitionSpec, caps: Mapping[str, int], resets: Mapping[tuple[str, str], frozenset[str]]) -> list[str]:
    """The edge's resets (all at once), then its own counter incremented, then the state."""
    out = [f"{_ct(c)} = 0" for c in caps if c in resets[t.source, t.reason]]
    if t.counter in caps:
        assert t.counter is not None
        out.append(f"{_ct(t.counter)}++")
    out.append(f"st = {_st(t.dest)}")
    return out
