"""Benchmark: what a coding session costs in tokens, queryloop beside Claude Code 2.1.235.

Each session is a fixed script the embedded server plays (``queryloop.mockapi``): the model
reads and edits Python modules of realistic size (generated, 180-420 lines each) one tool
call per turn, then answers. The same script is played to ``queryloop run`` and to Claude
Code (``claude -p``, found at ``$CLAUDE_BIN`` or ``/tmp/ref/node_modules/.bin/claude``),
each against a fresh server, both with the same ``--system-prompt``, ``--model`` and
``--permission-mode acceptEdits``, in a fresh copy of the files.

Sessions:

* ``long`` — 34 tool turns: read 17 modules, edit each, then a closing answer.
* ``compacting`` — 52 tool turns over larger modules (700-950 lines) so the history
  crosses each client's own auto-compact threshold and is compacted; a summary request is
  answered by a rule, whichever client sends it, and billed like any other. Claude Code is
  given ``CLAUDE_CODE_AUTO_COMPACT_WINDOW=200000`` (the model's window): without it, it
  never compacted here and sent 249,000-token prompts. A prompt over 200,000 tokens gets
  the API's 400 in every session.
* ``resumed`` — 12 tool turns, the process exits, then ``--resume`` with a new prompt and
  12 more (the same server: its cache is warm, as Anthropic's would be).
* ``paused`` — 16 tool turns with three pauses of 6 minutes of model time (the server's
  ``pause_s``: the cache clock moves, nothing waits), as when a user steps away.
* ``subagent`` — the model hands a search to a ``general-purpose`` sub-agent (the Agent tool,
  in the foreground: ``run_in_background: false``), which reads 8 modules one per turn and
  reports; then the model reads and edits the 4 it named and answers. The sub-agent's
  requests are told from the parent's by their first user message (the Agent call's prompt)
  and answered by rules, whichever client sends them; they are billed with the parent's.

Every request either client makes, a sub-agent's included, is billed from the server's log:
its input split into uncached, cache-read and cache-write tokens (the server's prompt cache,
which follows the documented rules: per-model minimum, 20-block lookback, 5-minute lifetime
refreshed on a hit, the 1-hour ttl), and its output tokens. One price table for both:
Claude Sonnet 4.5, $3 input / $15 output per million tokens, cache writes 1.25x input
(5-minute) or 2x (1-hour), cache reads 0.1x. Every figure is the server's estimate (a token is 4 characters
of compact JSON), the same for both clients.

The **fixed prefix** (tool definitions and system prompt, which come first in the cached
prompt) is reported apart from the **conversation** (the messages). Within a request the
prompt is read from the cache first, then written, then sent uncached (that is the order
of the three parts in a prompt), so the prefix's tokens are billed from the front of that
order and the conversation's are the rest. The cache hit ratio per request (read / whole
input) is printed as a row of percentages.

Usage: ``python tools/bench_cost.py [--session NAME ...] [--only queryloop|claude]``
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from queryloop.mockapi.background import ServerThread
from queryloop.mockapi.scenario import parse_scenario
from queryloop.mockapi.server import RecordedRequest

ROOT = Path(__file__).resolve().parent.parent
CLAUDE = os.environ.get("CLAUDE_BIN", "/tmp/ref/node_modules/.bin/claude")
MODEL = "claude-sonnet-4-5"
PRICE = {"input": 3.0, "output": 15.0}  # USD per million tokens, Claude Sonnet 4.5
WRITE_5M, WRITE_1H, READ = 1.25, 2.0, 0.1
SYSTEM_PROMPT = (
    "You are a careful software engineer working in the user's repository. Read files before "
    "changing them, keep edits small and explain what you changed in one short paragraph."
)
COMPACTING_FILES = 26
AGENT_TASK = "[search task]"
"""Opens the Agent call's prompt: the sub-agent's first user message, which routes its requests."""
AGENT_READS = 8
AGENT_FOUND = (1, 3, 4, 6)
SUMMARY_TEXT = "Summary: the modules mod_00 to mod_19 were read and their VERSION constants bumped; nothing else."

# ---- the files: Python modules of realistic size --------------------------------------------

_WORDS = "account batch cache config digest event frame group index journal ledger member node order".split()


def module(index: int, *, large: bool = False) -> str:
    """A deterministic Python module of 180-420 lines (700-950 when ``large``): a docstring, a constant, classes."""
    rng = random.Random(index)
    lines = [f'"""Module {index}: {" ".join(rng.sample(_WORDS, 6))}."""', "", "from __future__ import annotations", ""]
    lines += ["import dataclasses", "import json", "", f"VERSION_{index:02d} = 1", ""]
    target = rng.randint(700, 950) if large else rng.randint(180, 420)
    n = 0
    while len(lines) < target:
        n += 1
        noun = rng.choice(_WORDS)
        lines += ["", "@dataclasses.dataclass", f"class {noun.title()}{index:02d}x{n}:"]
        lines += [f'    """A {noun} record kept by module {index}."""', ""]
        for field in rng.sample(_WORDS, 4):
            lines.append(f"    {field}_{n}: int = {rng.randint(0, 999)}")
        for m in range(rng.randint(2, 4)):
            other = rng.choice(_WORDS)
            lines += [
                "",
                f"    def {other}_{m}(self, limit: int = {rng.randint(1, 64)}) -> dict[str, int]:",
                f'        """Return the {other} totals up to ``limit``."""',
                f"        total = sum(range(min(limit, self.{field}_{n})))",
                f"        return {{{other!r}: total, 'n': {n}}}",
            ]
    return "\n".join(lines) + "\n"


def files(count: int, *, large: bool = False) -> dict[str, str]:
    return {f"pkg/mod_{i:02d}.py": module(i, large=large) for i in range(count)}


# ---- the scripts ------------------------------------------------------------------------------


def _tool(name: str, **inputs: Any) -> dict[str, Any]:
    return {"reply": {"content": [{"text": f"Next: {name}."}, {"tool_use": {"name": name, "input": inputs}}]}}


def _read_edit(root: Path, index: int) -> list[dict[str, Any]]:
    path = str(root / f"pkg/mod_{index:02d}.py")
    old = f"VERSION_{index:02d} = 1"
    return [_tool("Read", file_path=path), _tool("Edit", file_path=path, old_string=old, new_string=old[:-1] + "2")]


def _answer(text: str) -> dict[str, Any]:
    return {"reply": {"content": [{"text": text}]}}


@attrs.frozen(kw_only=True)
class Phase:
    """One invocation of the program: its prompt and the steps its requests consume."""

    prompt: str
    steps: tuple[dict[str, Any], ...]
    resume: bool = False


@attrs.frozen(kw_only=True)
class Session:
    name: str
    files: int
    phases: tuple[Phase, ...]
    large: bool = False
    agent_rules: tuple[dict[str, Any], ...] = ()
    """Rules answering a sub-agent's requests (tried before the others); their hits are its requests."""

    @property
    def tool_turns(self) -> int:
        steps = [s for p in self.phases for s in p.steps] + list(self.agent_rules)
        return sum(1 for s in steps if "tool_use" in json.dumps(s))


def _agent_rules(root: Path) -> tuple[dict[str, Any], ...]:
    """The sub-agent's script: read ``mod_00`` … ``mod_07`` one per request, then report.

    Each request is told by the module its last tool result holds (its docstring opens
    ``Module K: ``); the first holds only the prompt. Matched within the sub-agent's
    conversation only (its first user message is the Agent call's prompt).
    """
    found = ", ".join(f"pkg/mod_{i:02d}.py" for i in AGENT_FOUND)
    report = _answer(f"Found a Ledger class in {found}; the other modules have none.")
    rules = []
    for k in reversed(range(AGENT_READS)):
        after = report if k == AGENT_READS - 1 else _tool("Read", file_path=str(root / f"pkg/mod_{k + 1:02d}.py"))
        rules.append({"when": {"first_user_contains": AGENT_TASK, "last_user_contains": f"Module {k}: "}, **after})
    first = _tool("Read", file_path=str(root / "pkg/mod_00.py"))
    rules.append({"when": {"first_user_contains": AGENT_TASK}, **first})
    return tuple(rules)


def _delegate() -> dict[str, Any]:
    """The parent's Agent call: a search for a general-purpose agent, waited for (foreground)."""
    prompt = (
        f"{AGENT_TASK} Read pkg/mod_00.py to pkg/mod_{AGENT_READS - 1:02d}.py and report which modules "
        "define a class whose name starts with Ledger. Do not change any file."
    )
    inputs = {"description": "Find Ledger modules", "prompt": prompt, "subagent_type": "general-purpose"}
    return _tool("Agent", **inputs, run_in_background=False)


def sessions(root: Path) -> list[Session]:
    """The fixed set, its edits aimed at files under ``root`` (the run's working directory)."""

    def turns(indices: Sequence[int]) -> list[dict[str, Any]]:
        return [step for i in indices for step in _read_edit(root, i)]

    paused = turns(range(8))
    for at in (4, 8, 12):
        paused[at] = {**paused[at], "pause_s": 360}
    return [
        Session(
            name="long",
            files=17,
            phases=(
                Phase(prompt="Bump VERSION in every module under pkg/.", steps=(*turns(range(17)), _answer("Done."))),
            ),
        ),
        Session(
            name="compacting",
            files=COMPACTING_FILES,
            large=True,
            phases=(
                Phase(
                    prompt="Bump VERSION in every module under pkg/.",
                    steps=(*turns(range(COMPACTING_FILES)), _answer("Done.")),
                ),
            ),
        ),
        Session(
            name="resumed",
            files=12,
            phases=(
                Phase(prompt="Bump VERSION in pkg/mod_00 to mod_05.", steps=(*turns(range(6)), _answer("Half done."))),
                Phase(
                    prompt="Now bump mod_06 to mod_11 too.",
                    steps=(*turns(range(6, 12)), _answer("Done.")),
                    resume=True,
                ),
            ),
        ),
        Session(
            name="paused",
            files=8,
            phases=(Phase(prompt="Bump VERSION in every module under pkg/.", steps=(*paused, _answer("Done."))),),
        ),
        Session(
            name="subagent",
            files=AGENT_READS,
            phases=(
                Phase(
                    prompt="Bump VERSION in the pkg/ modules that define a Ledger class; an agent finds them.",
                    steps=(_delegate(), *turns(AGENT_FOUND), _answer("Done.")),
                ),
            ),
            agent_rules=_agent_rules(root),
        ),
    ]


def scenario_yaml(session: Session) -> str:
    steps = [step for phase in session.phases for step in phase.steps]
    data = {
        "schema_version": 1,
        "scenario": f"cost_{session.name}",
        "model": MODEL,
        # A compaction's summary request, whichever client sends it (each asks for it in its last
        # user message), and the API's answer to a prompt over the model's 200K-token window.
        "rules": [
            *session.agent_rules,
            {
                "when": {"last_user_contains": "[queryloop context summary]"},
                "reply": {"content": [{"text": SUMMARY_TEXT}]},
            },
            {
                "when": {"last_user_contains": "summary of the conversation"},
                "reply": {"content": [{"text": SUMMARY_TEXT}]},
            },
            {
                "when": {"input_tokens_over": 200_000},
                "error": {"status": 400, "message": "prompt is too long: {n} tokens > {limit} maximum"},
            },
        ],
        "models": {MODEL: steps},
        "otherwise": {"reply": {"content": [{"text": "ok"}]}},
    }
    return json.dumps(data)


# ---- running a client against the server --------------------------------------------------------


def _command(client: str, phase: Phase, session_id: str, cwd: Path) -> list[str]:
    common = ["-p", phase.prompt, "--output-format", "json", "--model", MODEL, "--system-prompt", SYSTEM_PROMPT]
    common += ["--permission-mode", "acceptEdits"]
    common += ["--resume", session_id] if phase.resume else ["--session-id", session_id]
    if client == "queryloop":
        return [sys.executable, "-m", "queryloop", "run", "--cwd", str(cwd), *common]
    return [CLAUDE, *common]


def _env(client: str, url: str, home: Path, session: Session) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE"))}
    env |= {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "bench", "HOME": str(home)}
    env |= {"DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    env["QUERYLOOP_HOME"] = str(home / ".queryloop")
    if client == "claude":  # the model's 200K window for its auto-compact threshold, as queryloop takes it
        env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] = "200000"
    return env


def run_session(client: str, session: Session) -> tuple[list[RecordedRequest], list[dict[str, Any]]]:
    """Play ``session`` to ``client``; the server's log of every request and each invocation's result."""
    with tempfile.TemporaryDirectory(prefix=f"cost-{client}-") as tmp:
        cwd, home = Path(tmp) / "project", Path(tmp) / "home"
        for rel, text in files(session.files, large=session.large).items():
            (cwd / rel).parent.mkdir(parents=True, exist_ok=True)
            (cwd / rel).write_text(text)
        home.mkdir()
        script = sessions(cwd)
        this = next(s for s in script if s.name == session.name)
        results = []
        with ServerThread(parse_scenario(scenario_yaml(this), "<bench_cost>"), max_recorded=100_000) as server:
            session_id = str(uuid.uuid4())
            for phase in this.phases:
                cmd = _command(client, phase, session_id, cwd)
                proc = subprocess.run(
                    cmd,
                    capture_output=True,
                    text=True,
                    cwd=cwd,
                    env=_env(client, server.url, home, this),
                    timeout=900,
                )
                lines = [line for line in proc.stdout.splitlines() if line.strip().startswith("{")]
                result = json.loads(lines[-1]) if lines else {"is_error": True, "stderr": proc.stderr[-2000:]}
                results.append(result)
            return list(server.server.requests), results


# ---- billing --------------------------------------------------------------------------------------


def _chars(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False))


@attrs.frozen(kw_only=True)
class Bill:
    input: int = 0
    write_5m: int = 0
    write_1h: int = 0
    read: int = 0
    output: int = 0

    def __add__(self, other: Bill) -> Bill:
        return Bill(**{f: getattr(self, f) + getattr(other, f) for f in attrs.fields_dict(Bill)})

    @property
    def usd(self) -> float:
        base = PRICE["input"] / 1e6
        write = self.write_5m * WRITE_5M + self.write_1h * WRITE_1H
        return (self.input + write + self.read * READ) * base + self.output * PRICE["output"] / 1e6


def prefix_tokens(request: RecordedRequest) -> int:
    """The tool definitions and system prompt's tokens, as the server counts the cached prompt."""
    system = request.system
    blocks = [{"type": "text", "text": system}] if isinstance(system, str) and system else system or []
    return math.ceil((sum(_chars(t) for t in request.tool_definitions) + sum(_chars(b) for b in blocks)) / 4)


def bill(request: RecordedRequest) -> tuple[Bill, Bill]:
    """``(fixed prefix, conversation)`` of one request: read, then written, then uncached, from the front."""
    read, write = request.cache_read_input_tokens, request.cache_creation_input_tokens
    write_1h = request.cache_creation_1h_input_tokens
    uncached = max(0, request.input_tokens - read - write)
    left = min(prefix_tokens(request), request.input_tokens)
    p_read = min(left, read)
    left -= p_read
    p_write = min(left, write)
    left -= p_write
    p_input = min(left, uncached)
    p_write_1h = min(p_write, write_1h)  # a 1-hour breakpoint comes first, so the prefix holds its part first
    fixed = Bill(input=p_input, write_5m=p_write - p_write_1h, write_1h=p_write_1h, read=p_read)
    conv = Bill(
        input=uncached - p_input,
        write_5m=(write - write_1h) - (p_write - p_write_1h),
        write_1h=write_1h - p_write_1h,
        read=read - p_read,
        output=request.output_tokens,
    )
    return fixed, conv


@attrs.frozen(kw_only=True)
class Report:
    client: str
    session: str
    requests: int
    fixed: Bill
    conversation: Bill
    hit_ratio: tuple[float, ...]
    errors: int
    agent_requests: int = 0
    """How many of ``requests`` a sub-agent sent (answered by the session's ``agent_rules``)."""
    agent: Bill = Bill()
    """Their part of the bill, fixed prefix and conversation together."""

    @property
    def total(self) -> Bill:
        return self.fixed + self.conversation


def report(client: str, session: Session, requests: list[RecordedRequest], results: list[dict[str, Any]]) -> Report:
    billed = [r for r in requests if r.path == "/v1/messages" and r.response_status == 200]
    fixed = conv = Bill()
    for request in billed:
        f, c = bill(request)
        fixed, conv = fixed + f, conv + c
    ratios = tuple(r.cache_read_input_tokens / r.input_tokens if r.input_tokens else 0.0 for r in billed)
    agent_steps = {f"rules[{i}]" for i in range(len(session.agent_rules))}
    agent = [r for r in billed if r.step in agent_steps]
    return Report(
        client=client,
        session=session.name,
        requests=len(billed),
        fixed=fixed,
        conversation=conv,
        hit_ratio=ratios,
        errors=sum(1 for r in results if r.get("is_error")),
        agent_requests=len(agent),
        agent=sum((f + c for f, c in map(bill, agent)), Bill()),
    )


def _row(r: Report) -> str:
    t, c = r.total, r.conversation
    return (
        f"| {r.session} | {r.client} | {r.requests} | {t.input:,} | {t.write_5m + t.write_1h:,} | {t.read:,} "
        f"| {t.output:,} | ${r.fixed.usd:.4f} | ${c.usd:.4f} | ${t.usd:.4f} |"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--session", action="append", help="a session's name (repeatable); default: all")
    parser.add_argument("--only", choices=("queryloop", "claude"), help="one client only")
    parser.add_argument("--json", type=Path, help="also write the reports here")
    args = parser.parse_args(argv)
    clients = [args.only] if args.only else ["queryloop", "claude"]
    if "claude" in clients and not shutil.which(CLAUDE):
        print(f"Claude Code not found at {CLAUDE} (set CLAUDE_BIN)", file=sys.stderr)
        return 2
    chosen = [s for s in sessions(Path("/")) if not args.session or s.name in args.session]
    reports: list[Report] = []
    for session in chosen:
        for client in clients:
            requests, results = run_session(client, session)
            reports.append(report(client, session, requests, results))
            r = reports[-1]
            agent = f" ({r.agent_requests} the sub-agent's)" if session.agent_rules else ""
            print(f"{session.name}/{client}: {r.requests} requests{agent}, errors {r.errors}", file=sys.stderr)
    print(f"Sonnet 4.5 prices; tokens are the embedded server's estimate; {MODEL} minimum cacheable 1024 tokens.\n")
    head = ("session", "client", "requests", "input", "cache write", "cache read", "output", "fixed prefix")
    print("| " + " | ".join((*head, "conversation", "total")) + " |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in reports:
        print(_row(r))
    print()
    for r in reports:
        ratios = " ".join(f"{round(100 * x)}" for x in r.hit_ratio)
        mean = sum(r.hit_ratio) / len(r.hit_ratio) if r.hit_ratio else 0.0
        print(f"{r.session}/{r.client} cache hit % per request (mean {100 * mean:.0f}): {ratios}")
    for r in reports:
        if r.agent_requests:
            share = f"${r.agent.usd:.4f} of ${r.total.usd:.4f}"
            print(f"{r.session}/{r.client}: the sub-agent's {r.agent_requests} requests cost {share}")
    for session in chosen:
        pair = {r.client: r for r in reports if r.session == session.name}
        if len(pair) == 2:
            ours, theirs = pair["queryloop"].conversation.usd, pair["claude"].conversation.usd
            print(f"{session.name}: conversation queryloop/claude = {ours / theirs:.2f}" if theirs else "")
    if args.json:
        args.json.write_text(json.dumps([attrs.asdict(r) for r in reports], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
