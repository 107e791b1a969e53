"""Side by side: the same agent on queryloop and its peers, each framework in a process of its own.

The agent: N turns of a no-op tool (one string argument, returns ``"ok"``), then a final
text answer, with a zero-latency fake model — LangGraph (``create_react_agent`` + a
scripted ``BaseChatModel``), pydantic-ai (``FunctionModel``), the OpenAI Agents SDK (a
custom ``Model``), a hand-written minimal loop as the floor (and the same loop also
``json.dumps``-ing each request body), queryloop in-process (its no-op tool allowed by a
rule through the normal gate; every request body materialised, which the peers' fake
models do not do), and over loopback HTTP a bare ``anthropic`` SDK streaming loop and
queryloop, both against the embedded fake server running as a process of its own
(``python -m queryloop mock-api``).

Each repeat starts one child process per framework (``child.py``), in an order rotated
from repeat to repeat so drift on the (shared) machine hits them alike; a child warms
up with a 5-turn run, then times one run at each N. A figure is the wall time of one
run (the framework's per-process setup — compiling a graph, building an agent, loading
queryloop's machine — is outside it) divided by N: median (min–max) over the repeats.
Peak RSS is the child's peak resident set (``VmHWM``; see ``bench.machine.peak_rss_mib``)
after its runs, the largest over the repeats. The largest N (when there are
three or more) is run only where feasible: a run there projected, from the framework's
run at the N before it growing as N², to take longer than ``--budget-s`` (default 60 s)
is not made ("not run (over budget)"), and one that took longer is not repeated (the
cell says how many runs it holds). A framework that cannot be installed or imported, or whose run
went wrong, is reported in the table, not dropped. Needs the ``bench-peers`` extra:
``pip install -e '.[bench-peers]'``.

``--clock cpu`` times each run by the child's CPU (user + system) instead of the wall clock,
which a loaded machine inflates; over HTTP that leaves out the server's CPU. ``--only
floor,floor-body,queryloop`` runs the in-process loops alone, without the peers' extra.

Usage: ``python tools/bench/peers/run.py [--quick] [--n 50,500,1000] [--repeat 3] [--only a,b] [--clock cpu]``
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2])]

from child import FRAMEWORKS, HTTP_FRAMEWORKS, WARM_UP_TURNS  # noqa: E402

from bench.machine import Spread, describe_machine  # noqa: E402  (found through the path set just above)
from bench.server import MockApiProcess, tool_turn_scenario  # noqa: E402

CHILD = Path(__file__).resolve().parent / "child.py"
CHILD_TIMEOUT_S = 600


def scenario_runs(keys: list[str], ns: list[int], repeat: int) -> dict[str, tuple[int, str]]:
    """One server script per HTTP framework, repeat and N (and warm-up): each run names its own model."""
    runs: dict[str, tuple[int, str]] = {}
    for key in keys:
        if key in HTTP_FRAMEWORKS:
            for r in range(repeat):
                runs[f"{key}-r{r}-warm"] = (WARM_UP_TURNS, "again")
                for n in ns:
                    runs[f"{key}-r{r}-{n}"] = (n, "again")
    return runs or {"unused": (0, "again")}


def run_child(key: str, ns: list[int], url: str, tag: str, budget_s: float, clock: str) -> dict[str, object]:
    command = [sys.executable, str(CHILD), key, "--ns", ",".join(map(str, ns)), "--url", url, "--tag", tag]
    command += ["--clock", clock]
    if len(ns) > 2:  # only the largest N is optional: the others are always run
        command += ["--budget-s", str(budget_s), "--budget-from", str(ns[-1])]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {CHILD_TIMEOUT_S} s"}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit {proc.returncode}: {tail}"}
    result: dict[str, object] = json.loads(lines[-1])
    return result


def measure(
    keys: list[str], ns: list[int], repeat: int, budget_s: float, url: str, clock: str = "wall"
) -> dict[str, dict[str, object]]:
    """Per framework: its name, version, note, per-N per-turn times (µs) over repeats, peak RSS, or an error."""
    table: dict[str, dict[str, object]] = {key: {"times": {n: [] for n in ns}, "rss": []} for key in keys}
    skip_largest: set[str] = set()
    for r in range(repeat):
        order = keys[r % len(keys) :] + keys[: r % len(keys)]
        for key in order:
            entry = table[key]
            if "error" in entry:
                continue
            wanted = [n for n in ns if not (n == ns[-1] and key in skip_largest)]
            result = run_child(key, wanted, url, f"{key}-r{r}", budget_s, clock)
            print(f"  repeat {r + 1}/{repeat} {key}: {summary(result)}", file=sys.stderr, flush=True)
            if "error" in result:
                entry["error"] = result["error"]
                continue
            for name in ("framework", "version", "note"):
                entry[name] = result[name]
            per_step = result["per_turn_us"]
            assert isinstance(per_step, dict)
            for n in wanted:
                if str(n) in per_step:
                    entry["times"][n].append(per_step[str(n)])  # type: ignore[index]
                else:
                    skip_largest.add(key)  # projected past the budget: not tried again
            entry["rss"].append(result["peak_rss_mib"])  # type: ignore[attr-defined]
            run_s = result["run_s"]
            assert isinstance(run_s, dict)
            if run_s.get(str(ns[-1]), 0.0) > budget_s or str(ns[-1]) not in run_s:
                skip_largest.add(key)
    return table


def summary(result: dict[str, object]) -> str:
    if "error" in result:
        return f"error: {result['error']}"
    per_step = result["per_turn_us"]
    assert isinstance(per_step, dict)
    return ", ".join(f"N={n}: {us:.0f} µs/turn" for n, us in per_step.items())


def cell(values: list[float], repeat: int) -> str:
    if not values:
        return "not run (over budget)"
    us = Spread.of(values)
    if us.median < 1000:
        text = us.show("µs", 1 if us.median < 100 else 0)
    else:
        text = Spread.of([v / 1000 for v in values]).show("ms", 2)
    runs = "" if len(values) == repeat else f" [{len(values)} run{'s' if len(values) > 1 else ''}]"
    return text + runs


def report(table: dict[str, dict[str, object]], ns: list[int], repeat: int, clock: str = "wall") -> None:
    print(f"machine: {describe_machine()}")
    clocked = "CPU time (the child process, user + system)" if clock == "cpu" else "wall time"
    print(
        f"{clocked} per tool turn (one run / N), median (min–max) over {repeat} repeat(s), each framework in its own "
        "process, zero-latency fake model, no-op tool"
    )
    print()
    head = ["framework", "version", *(f"N={n}" for n in ns), f"growth from N={ns[0]}", "peak RSS"]
    rows = [head]
    for key, entry in table.items():
        if "error" in entry:
            rows.append([key, f"FAILED: {entry['error']}"[:100], *("—" for _ in ns), "—", "—"])
            continue
        times: dict[int, list[float]] = entry["times"]  # type: ignore[assignment]
        rss: list[float] = entry["rss"]  # type: ignore[assignment]
        growth = "—"
        top = max((n for n in ns if times[n]), default=ns[0])
        if top != ns[0] and times[ns[0]]:
            ratio = Spread.of(times[top]).median / Spread.of(times[ns[0]]).median
            growth = f"{ratio:.2f}×" + ("" if top == ns[-1] else f" (→{top})")
        name = str(entry["framework"]) + (f" ({entry['note']})" if entry.get("note") else "")
        rows.append([name, str(entry["version"]), *(cell(times[n], repeat) for n in ns), growth, f"{max(rss):.0f} MiB"])
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    for row in rows:
        print("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", help="tool turns per run, comma-separated (default 50,500,1000; --quick: 50,500)")
    parser.add_argument("--repeat", type=int, help="repeats (default 3; --quick: 1)")
    parser.add_argument("--quick", action="store_true", help="N = 50 and 500, one repeat")
    parser.add_argument("--only", help=f"comma-separated subset of {','.join(FRAMEWORKS)}")
    parser.add_argument("--budget-s", type=float, default=60.0, help="seconds a run may take (projected, as N²)")
    parser.add_argument(
        "--clock", choices=("wall", "cpu"), default="wall", help="wall time, or the child's CPU (for a loaded machine)"
    )
    args = parser.parse_args()
    ns = sorted({int(p) for p in (args.n or ("50,500" if args.quick else "50,500,1000")).split(",")})
    repeat = args.repeat or (1 if args.quick else 3)
    keys = [k for k in FRAMEWORKS if args.only is None or k in args.only.split(",")]
    unknown = sorted(set((args.only or "").split(",")) - set(FRAMEWORKS) - {""})
    if unknown:
        raise SystemExit(f"run.py: --only names no framework {unknown}; the frameworks are {', '.join(FRAMEWORKS)}")
    with MockApiProcess(tool_turn_scenario(scenario_runs(keys, ns, repeat))) as server:
        table = measure(keys, ns, repeat, args.budget_s, server.url, args.clock)
    report(table, ns, repeat, args.clock)


if __name__ == "__main__":
    main()
