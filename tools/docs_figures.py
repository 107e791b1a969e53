"""The checker's figures in the docs: every block of them rendered from ``queryloop check``, never copied.

Owns the blocks of docs/ that quote the query loop's bounds — the model requests per turn,
its expression of the caps and its declared ``max``, and the bound composed with the
sub-agents a turn starts — each between a ``<!-- figures: NAME -->`` line and an
``<!-- end figures -->`` line, and what goes between them: the prose with the numbers
:func:`queryloop.fsm.check_spec` gives for ``machines/query_loop.yaml``.
``python tools/docs_figures.py`` rewrites the blocks; ``--check`` rewrites nothing and
fails naming each stale block (``tests/test_docs.py`` runs it). A page that only mentions
a figure links to its block (README.md links to docs/checker.md).

Does not own the checker (``queryloop.fsm``) nor the rest of the pages.
"""

from __future__ import annotations

import argparse
import itertools
import math
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from queryloop.fsm import MachineSpec, check_spec, load_machine
from queryloop.fsm.verify.bounds import figure_values
from queryloop.machines import MACHINES_DIR

if TYPE_CHECKING:
    from queryloop.fsm.verify.check import CheckReport, Composed, OverRanges

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"(<!-- figures: (?P<name>[a-z-]+) -->\n)(?P<body>.*?)(<!-- end figures -->)", re.S)
FIGURE = "model_requests"
TURNS = 10  # the sub-agents' tool turns the composed bound is quoted at (`--max-agent-turns 10`)
# The run budgets a child's run pays once, not once per turn: the prose names them.
BLOCKS, HOPS = "max_stop_hook_blocks", "max_fallback_hops"


def _n(value: float) -> str:
    """A count as the docs write it: ``15 750``."""
    if value == math.inf:
        raise ValueError(f"the figure '{FIGURE}' is unbounded where the docs quote a bound")
    return f"{int(value):,}".replace(",", " ")


def _per_turn(spec: MachineSpec, **caps: int) -> float:
    """The figure's bound per turn at the defaults with ``caps`` set: the number ``check --set`` prints."""
    return figure_values(spec, {**spec.param_defaults, **caps})[0][FIGURE]


def _step(spec: MachineSpec, cap: str) -> float:
    """The most one more of ``cap`` adds to a turn's figure, anywhere between 0 and its default."""
    values = [_per_turn(spec, **{cap: k}) for k in range(int(spec.param_defaults[cap]) + 1)]
    return max(b - a for a, b in itertools.pairwise(values))


def _composed(spec: MachineSpec) -> Composed:
    """The figures of a turn with the sub-agents it starts, each child run at most :data:`TURNS` tool turns."""
    (children,) = spec.children
    return check_spec(spec, {children.steps: TURNS}, explore=False).composed[children.name]


def per_turn_bound(spec: MachineSpec) -> str:
    """docs/checker.md: the bound on a turn's model requests, its expression and its declared max."""
    report = check_spec(spec, explore=False)
    return (
        f"At the defaults a turn sends at most **{_n(report.per_step[FIGURE])} model requests per turn**\n"
        "(`model_requests` = model calls + summary requests, retries of both included). The\n"
        "bound is:\n\n"
        f"`{report.expressions[FIGURE][0]}`\n\n"
        "A run with `--max-turns N` sends at most N times that. For every value a run accepts\n"
        "(each param from 0 to its declared `max:`, which the run refuses to exceed), a turn sends at most\n"
        f"**{_n(_over_ranges(report).per_step[FIGURE])} model requests**. `check` fails if a change takes that\n"
        f"above the figure's declared `max: {spec.figure_max[FIGURE]}`.\n"
    )


def _over_ranges(report: CheckReport) -> OverRanges:
    if report.over_ranges is None:
        raise ValueError(f"the machine declares no `max` for the figure '{FIGURE}'")
    return report.over_ranges


def with_sub_agents(spec: MachineSpec) -> str:
    """docs/checker.md: the bound of a turn with the sub-agents it starts, and how a child's run is counted."""
    composed = _composed(spec)
    ranged = _over_ranges(check_spec(spec, explore=False)).composed[spec.children[0].name]
    turn, run, total = _per_turn(spec), composed.child_run[FIGURE], composed.per_step[FIGURE]
    blocks, hops = int(spec.param_defaults[BLOCKS]), int(spec.param_defaults[HOPS])
    per_block, per_hop = _step(spec, BLOCKS), _step(spec, HOPS)
    base = turn - blocks * per_block - hops * per_hop
    if TURNS * base + blocks * per_block + hops * per_hop != run:
        raise ValueError(
            f"a child's run of {TURNS} turns is {_n(run)} model requests, not {TURNS} × {_n(base)} + "
            f"{blocks} × {_n(per_block)} + {hops} × {_n(per_hop)}: the run budgets are no longer "
            f"{BLOCKS} and {HOPS} alone; say what they are in tools/docs_figures.py"
        )
    return (
        f"A [sub-agent](agents.md) is a run of the same machine (`children: {spec.children[0].name}` in the\n"
        "YAML, [machine files](machines.md#children)): one tool turn starts at most\n"
        f"`{composed.starts_param}` ({composed.starts}) of them, a child starts none, and each runs at most\n"
        f"`{composed.steps_param}` tool turns. That last one is unset by default, as in Claude Code,\n"
        f"so `check` says a turn with its agents is unbounded. With `--max-agent-turns {TURNS}`\n"
        f"(`check --set {composed.steps_param}={TURNS}`), a child's whole run sends at most {_n(run)} model\n"
        "requests, and a turn with the agents it starts at most\n"
        f"**{_n(total)} model requests** ({_n(turn)} + {composed.starts} × {_n(run)}). Each term is a bound "
        "the checker\n"
        "proves; the machine counts the starts, and a child runs with the turn limit. A child's run\n"
        "pays its run budgets once, not once\n"
        f"per turn: a turn's {_n(turn)} is {_n(base)} + {_n(per_block)} per Stop-hook block + {_n(per_hop)} "
        "per fallback hop, and a run's\n"
        f"turns share the {blocks} blocks and {hops} hops, so a run of T turns is at most T × {_n(base)} + "
        f"{blocks} × {_n(per_block)} +\n"
        f"{hops} × {_n(per_hop)} ({_n(run)} at T = {TURNS}).\n"
        "The step per block and per hop is the largest anywhere between 0 and the cap (every\n"
        "point evaluated), so the sum holds at every cap value. For every value a run accepts\n"
        f"({composed.steps_param} set, up to {_n(ranged.child_steps or 0)}; "
        f"{ranged.starts_param} up to {ranged.starts};\n"
        f"every other cap within its range) a turn with its agents sends at most **{_n(ranged.per_step[FIGURE])}**\n"
        f"({_n(ranged.per_step[FIGURE] - ranged.starts * ranged.child_run[FIGURE])} + {ranged.starts} × "
        f"{_n(ranged.child_run[FIGURE])}), and `check` fails above the figure's\n"
        f"`max_with_children` ({_n(spec.figure_max_with_children[FIGURE])}).\n"
    )


def agents_page(spec: MachineSpec) -> str:
    """docs/agents.md: the composed bound, where the sub-agents are explained."""
    composed = _composed(spec)
    return (
        f"The YAML declares the sub-agents as children of the machine (`children: {spec.children[0].name}`):\n"
        f"runs of the same machine, at most `{composed.starts_param}` per tool turn, one level\n"
        f"deep, each with at most `{composed.steps_param}` tool turns. The machine counts each start\n"
        f"(`{spec.children[0].starts}`); a run as deep as its `depth` is not offered the Agent tool and\n"
        "admits none. `queryloop check` composes\n"
        "the figures: a turn with the agents it starts sends at most its own bound plus\n"
        f"that many whole runs of the machine. With `--max-agent-turns {TURNS}` that is\n"
        f"{_n(composed.per_step[FIGURE])} model requests (`check --set {composed.steps_param}={TURNS}`;\n"
        "[the checker](checker.md#with-its-sub-agents)); unset, `check` says it is unbounded\n"
        "and why.\n"
    )


BLOCKS_BY_NAME: Mapping[str, Callable[[MachineSpec], str]] = {
    "per-turn-bound": per_turn_bound,
    "with-sub-agents": with_sub_agents,
    "agents-page": agents_page,
}
PAGES = ("docs/checker.md", "docs/agents.md")


def render(text: str, spec: MachineSpec, *, page: str = "") -> str:
    """``text`` with every figures block rendered anew; an unknown block name is an error naming it."""

    def fill(match: re.Match[str]) -> str:
        make = BLOCKS_BY_NAME.get(match.group("name"))
        if make is None:
            raise ValueError(
                f"{page}: no figures block is named {match.group('name')!r}; the blocks are {', '.join(BLOCKS_BY_NAME)}"
            )
        return match.group(1) + make(spec) + match.group(4)

    return BLOCK.sub(fill, text)


def stale_pages(*, write: bool) -> list[str]:
    """The pages whose figures differ from the checker's (rewritten when ``write``)."""
    spec = load_machine(MACHINES_DIR / "query_loop.yaml").spec
    stale = []
    for page in PAGES:
        path = ROOT / page
        text = path.read_text(encoding="utf-8")
        fresh = render(text, spec, page=page)
        if fresh != text:
            stale.append(page)
            if write:
                path.write_text(fresh, encoding="utf-8")
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; fail if a page's figures are stale")
    args = parser.parse_args(argv)
    stale = stale_pages(write=not args.check)
    if args.check and stale:
        print(f"stale figures in {', '.join(stale)}: run python tools/docs_figures.py", file=sys.stderr)
        return 1
    for page in stale:
        print(f"rewrote the figures in {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
