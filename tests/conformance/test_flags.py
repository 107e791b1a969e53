"""Flags beside Claude Code 2.1.235: each option of ``claude --help`` given to both programs.

Each row runs one small probe (one model reply, or a refusal before any request) in both and
compares what a script sees: the exit code, the requests sent, the result's fields, the tools
and system prompt of the request, the flag named on a refusal's first line. A flag queryloop
does not take is refused in one line naming it (exit 2, as every usage error here), by design
with the reason (docs/cli.md, "Claude Code's flags"). Every option of ``claude --help`` has a
row here or in another module of the suite, or is named in :data:`ELSEWHERE`: a new flag in
Claude Code's help fails :func:`test_every_flag_of_claude_help_has_a_row`.
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from queryloop.mockapi.server import RecordedRequest

from . import reference
from .reference import Observed, Probe, observe

pytestmark = pytest.mark.slow  # two programs per probe

CLI = "cli.md#claude-codes-flags"
TOUCH = (("Bash", {"command": "touch made"}),)
UUID = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
MARK = "probe-marker-31"

#: Every option of ``claude --help`` (2.1.235), each as its spellings; the help itself is compared with it.
HELP_FLAGS: tuple[tuple[str, ...], ...] = tuple(
    tuple(spellings.split())
    for spellings in """
--add-dir | --agent | --agents | --allow-dangerously-skip-permissions | --allowedTools --allowed-tools
| --append-system-prompt | --autocompact | --ax-screen-reader | --bg --background | --bare | --betas | --brief
| --chrome | --cloud | -c --continue | --dangerously-skip-permissions | -d --debug | --debug-file
| --disable-slash-commands | --disallowedTools --disallowed-tools | --effort | --environment
| --exclude-dynamic-system-prompt-sections | --fallback-model | --file | --fork-session | --forward-subagent-text
| --from-pr | -h --help | --ide | --include-hook-events | --include-partial-messages | --input-format
| --json-schema | --max-budget-usd | --mcp-config | --model | -n --name | --no-chrome | --no-session-persistence
| --output-format | --permission-mode | --plugin-dir | --plugin-url | -p --print | --prompt-suggestions
| --remote-control | --remote-control-session-name-prefix | --replay-user-messages | -r --resume | --safe-mode
| --session-id | --setting-sources | --settings | --strict-mcp-config | --system-prompt | --teleport | --tmux
| --tools | --verbose | -v --version | -w --worktree
""".split("|")
)

#: Flags whose rows another module brings (being written beside this one), by the module.
ELSEWHERE = {"--json-schema": "test_prompt_tools.py"}
#: Flags every probe gives (reference.observe): -p PROMPT --model MODEL --output-format stream-json --verbose.
EVERY_PROBE = frozenset({"-p", "--model", "--output-format", "--verbose"})


@attrs.frozen(kw_only=True)
class Row(reference.Row):
    """A flag's row; ``flag``: the spelling a refusal's first line must name (``refused``)."""

    flag: str = ""


def _first_line(observed: Observed) -> str:
    lines = [line for line in observed.stderr.splitlines() if line.strip()]
    return lines[0] if lines else ""


def _system(observed: Observed) -> str:
    system = observed.requests[0].system if observed.requests else ""
    if isinstance(system, list):
        return "\n".join(str(block.get("text", "")) for block in system)
    return str(system or "")


def _tools(observed: Observed) -> tuple[str, ...]:
    return tuple(sorted(observed.requests[0].tools)) if observed.requests else ()


def _request_text(request: RecordedRequest) -> str:
    """Everything a request tells the model: the system prompt, the tools' definitions, the messages."""
    return json.dumps([request.system, request.tool_definitions, request.messages])


def _version(observed: Observed) -> str:
    """The leading version of the first line of stdout (what the Agent SDK reads of ``-v``)."""
    found = re.match(r"\s*(\d+\.\d+\.\d+)", observed.stdout)
    return found.group(1) if found else ""


READERS: dict[str, Callable[[Observed, Row], object]] = {
    "returncode": lambda seen, row: seen.returncode,
    "requests": lambda seen, row: len(seen.requests),
    "refused": lambda seen, row: seen.returncode != 0 and row.flag in _first_line(seen),
    "warned": lambda seen, row: seen.returncode == 0 and row.flag in _first_line(seen),
    "told": lambda seen, row: bool(seen.requests) and MARK in _request_text(seen.requests[0]),
    "subtype": lambda seen, row: seen.result.get("subtype"),
    "is_error": lambda seen, row: seen.result.get("is_error"),
    "session_id": lambda seen, row: seen.result.get("session_id"),
    "mode": lambda seen, row: seen.mode,
    "denied": lambda seen, row: seen.denied,
    "made": lambda seen, row: seen.made,
    "tools": lambda seen, row: _tools(seen),
    "marked": lambda seen, row: MARK in _system(seen),
    "version": lambda seen, row: _version(seen),
    "help": lambda seen, row: "--print" in seen.stdout and "--output-format" in seen.stdout,
    "stdout": lambda seen, row: seen.stdout.strip(),
    "json_lines": lambda seen, row: [type(json.loads(line)).__name__ for line in seen.stdout.splitlines()],
    "json_array": lambda seen, row: _messages(seen),
}


def _messages(observed: Observed) -> list[tuple[str, str | None]]:
    """The type and subtype of each message of a JSON array on stdout, queryloop's own system lines (each
    transition and request attempt, as in stream-json: test_stream.py) left out."""
    ours = ("transition", "api_request")
    return [
        (m["type"], m.get("subtype"))
        for m in json.loads(observed.stdout)
        if not (m["type"] == "system" and m.get("subtype") in ours)
    ]


RUNS = {"returncode": 0, "requests": 1}
REFUSED = {"returncode": 2, "requests": 0, "refused": True}


def _flag(*args: str, **probe: Any) -> Probe:
    return Probe(calls=(), args=args, **probe)


def _refused(flag: str, *values: str, reference: dict[str, object] | None = None, why: str) -> Row:
    """``flag`` (with ``values``) refused by queryloop, before any request; Claude Code runs (or ``reference``)."""
    return Row(
        probe=_flag(flag, *values),
        flag=flag,
        queryloop=REFUSED,
        reference=reference if reference is not None else RUNS,
        design=f"refused: {why} ([details]({CLI}))",
    )


def _ignored(flag: str, *values: str, why: str) -> Row:
    """``flag`` accepted by queryloop with a warning naming it, and ignored; Claude Code honours it."""
    return Row(
        probe=_flag(flag, *values),
        flag=flag,
        queryloop={**RUNS, "warned": True},
        reference=RUNS,
        design=f"accepted with a warning and ignored: {why} ([details]({CLI}))",
    )


def _both_refuse(flag: str, *values: str, why: str, named: bool = True) -> Row:
    """Claude Code refuses ``flag`` here too (exit 1; its line names it, or not); queryloop as a usage error."""
    return Row(
        probe=_flag(flag, *values),
        flag=flag,
        queryloop=REFUSED,
        reference={"returncode": 1, "requests": 0, "refused": named},
        design=f"refused (exit 2, where Claude Code exits 1 in this probe): {why} ([details]({CLI}))",
    )


INTERACTIVE = "it belongs to the interactive session or Claude Code's own services, which queryloop does not have"
ROWS: dict[str, Row] = {
    # flags both programs take
    "--agents": Row(
        probe=_flag("--agents", json.dumps({"reviewer": {"description": MARK, "prompt": "Review the change."}})),
        queryloop={**RUNS, "told": True},
    ),
    "--append-system-prompt": Row(probe=_flag("--append-system-prompt", MARK), queryloop={**RUNS, "marked": True}),
    "--system-prompt": Row(probe=_flag("--system-prompt", MARK), queryloop={**RUNS, "marked": True}),
    "--disallowedTools": Row(
        probe=Probe(calls=TOUCH, args=("--disallowedTools", "Bash")),
        queryloop={"returncode": 0, "denied": (), "made": frozenset()},
    ),
    "--tools Read,Bash": Row(probe=_flag("--tools", "Read,Bash"), queryloop={**RUNS, "tools": ("Bash", "Read")}),
    "--tools ''": Row(probe=_flag("--tools", ""), queryloop={**RUNS, "tools": ()}),
    "--session-id": Row(probe=_flag("--session-id", UUID), queryloop={**RUNS, "session_id": UUID}),
    "--resume an unknown id": Row(
        probe=_flag("--resume", UUID), queryloop={"returncode": 1, "requests": 0, "subtype": "error_during_execution"}
    ),
    "--continue with no session": Row(probe=_flag("--continue"), queryloop={**RUNS, "subtype": "success"}),
    "--fork-session with --continue": Row(probe=_flag("--continue", "--fork-session"), queryloop=RUNS),
    "--no-session-persistence": Row(probe=_flag("--no-session-persistence"), queryloop={**RUNS, "subtype": "success"}),
    "--max-budget-usd spent at once": Row(
        probe=_flag("--max-budget-usd", "0.0000001"),
        queryloop={"returncode": 1, "requests": 1, "subtype": "error_max_budget_usd", "is_error": True},
    ),
    "--input-format stream-json with nothing on stdin": Row(
        probe=_flag("--input-format", "stream-json"), queryloop={"returncode": 0, "requests": 0}
    ),
    "--replay-user-messages without stream-json input": Row(
        probe=_flag("--replay-user-messages"),
        flag="--replay-user-messages",
        queryloop=REFUSED,
        reference={"returncode": 1, "requests": 0, "refused": True},
        design="a usage error exits 2, as POSIX tools do (Claude Code: 1) ([details](cli.md#a-headless-run))",
    ),
    "--mcp-config with --strict-mcp-config": Row(
        probe=_flag("--strict-mcp-config", "--mcp-config", '{"mcpServers": {}}'), queryloop=RUNS
    ),
    "--setting-sources user": Row(
        probe=Probe(
            calls=TOUCH,
            files={".claude/settings.json": {"permissions": {"deny": ["Bash"]}}},
            trusted=("project",),
            args=("--setting-sources", "user", "--allowedTools", "Bash"),
        ),
        queryloop={"returncode": 0, "denied": (), "made": frozenset({"project/made"})},
    ),
    "--dangerously-skip-permissions": Row(
        probe=Probe(calls=TOUCH, args=("--dangerously-skip-permissions",), env={"IS_SANDBOX": "1"}),
        queryloop={"returncode": 0, "mode": "bypassPermissions", "made": frozenset({"project/made"})},
    ),
    "--forward-subagent-text": Row(probe=_flag("--forward-subagent-text"), queryloop={**RUNS, "subtype": "success"}),
    "--output-format json": Row(
        probe=_flag("--output-format", "json", "--no-verbose"), queryloop={**RUNS, "json_lines": ["dict"]}
    ),
    "--output-format json with --verbose": Row(
        probe=_flag("--output-format", "json"),  # every message of the run in one array, the result last
        queryloop={
            **RUNS,
            "json_lines": ["list"],
            "json_array": [("system", "init"), ("assistant", None), ("result", "success")],
        },
    ),
    "--output-format text": Row(probe=_flag("--output-format", "text"), queryloop={**RUNS, "stdout": "done"}),
    "--version": Row(probe=_flag("--version"), queryloop={"returncode": 0, "requests": 0, "version": "2.1.235"}),
    "-v": Row(probe=_flag("-v"), queryloop={"returncode": 0, "requests": 0, "version": "2.1.235"}),
    "--help": Row(probe=_flag("--help"), queryloop={"returncode": 0, "requests": 0, "help": True}),
    "-h": Row(probe=_flag("-h"), queryloop={"returncode": 0, "requests": 0, "help": True}),
    "--max-turns 0": Row(
        probe=_flag("--max-turns", "0"),
        flag="--max-turns",
        queryloop=REFUSED,
        reference=RUNS,
        design="a value no one means, such as `--max-turns 0`, is a usage error before anything runs (Claude Code "
        "2.1.235 runs as if it were not given) ([details](cli.md#a-headless-run))",
    ),
    "--max-turns beyond its declared range": Row(
        probe=_flag("--max-turns", "100001"),
        flag="--max-turns",
        queryloop=REFUSED,
        reference=RUNS,
        design="a value above the machine's declared range (`max: 100000`) is a usage error before anything runs, "
        "so every figure `queryloop check` proves holds for each value a run takes (Claude Code 2.1.235 takes any) "
        "([details](cli.md#a-headless-run))",
    ),
    "a second prompt word": Row(
        probe=_flag("second"),
        flag="second",
        queryloop=REFUSED,
        reference=RUNS,
        design="a second prompt word is a usage error, as it is usually a forgotten pair of quotes (Claude Code "
        "ignores it) ([details](cli.md#a-headless-run))",
    ),
    "--add-dir that does not exist": Row(
        probe=_flag("--add-dir", "/nonexistent-probe-dir"),
        flag="--add-dir",
        queryloop={**RUNS, "warned": True},
        reference={**RUNS, "warned": False},
        design="an `--add-dir` that does not exist is named in a warning (Claude Code leaves it out without a "
        "word) ([details](cli.md#a-headless-run))",
    ),
    # Claude Code's choices queryloop does not have
    "--permission-mode auto": _refused(
        "--permission-mode",
        "auto",
        why="the mode `auto` (a model classifies each call) is not offered: the gate's rules decide",
    ),
    "--permission-mode manual": _refused(
        "--permission-mode",
        "manual",
        why="the mode `manual` is Claude Code's newer name for `default`, which queryloop takes",
    ),
    # flags queryloop refuses
    "--agent": _both_refuse(
        "--agent",
        "reviewer",
        why="the main thread cannot run as a custom agent yet (Claude Code refuses an unknown agent too)",
    ),
    "--allow-dangerously-skip-permissions": Row(
        probe=_flag("--allow-dangerously-skip-permissions", env={"IS_SANDBOX": "1"}),  # Claude Code: not as root else
        flag="--allow-dangerously-skip-permissions",
        queryloop=REFUSED,
        reference={**RUNS, "mode": "default"},
        design="refused: an Agent SDK session may switch to bypassPermissions without it, so it would promise "
        f"nothing ([details]({CLI}))",
    ),
    "--autocompact": _refused(
        "--autocompact", "auto", why="queryloop's own `--auto-compact-threshold PCT` and `--no-auto-compact` set it"
    ),
    "--ax-screen-reader": _refused("--ax-screen-reader", why=INTERACTIVE),
    "--bg": _both_refuse("--bg", why=INTERACTIVE),
    "--bare": _refused("--bare", why="not yet: `--setting-sources ''` leaves out the settings and CLAUDE.md files"),
    "--betas": _ignored("--betas", "context-1m-2025-08-07", why="requests carry no `anthropic-beta` header yet"),
    "--brief": _refused("--brief", why="there is no SendUserMessage tool"),
    "--chrome": _refused("--chrome", why=INTERACTIVE),
    "--no-chrome": _refused("--no-chrome", why=INTERACTIVE),
    "--cloud": _both_refuse("--cloud", "x", why=INTERACTIVE),
    "--debug": _refused("--debug", why="`--verbose` and the stream's `system/transition` lines show what a run does"),
    "-d": _refused("-d", "api", why="`--verbose` and the stream's `system/transition` lines show what a run does"),
    "--debug-file": _refused(
        "--debug-file", "debug.log", why="`--verbose` and the stream's `system/transition` lines show what a run does"
    ),
    "--disable-slash-commands": _refused("--disable-slash-commands", why="there are no skills to disable"),
    "--effort": _ignored("--effort", "high", why="requests carry no effort parameter"),
    "--environment": _both_refuse("--environment", "ccpool_x", why=INTERACTIVE),
    "--exclude-dynamic-system-prompt-sections": _refused(
        "--exclude-dynamic-system-prompt-sections", why="the system prompt is one block, cached as a whole"
    ),
    "--file": _both_refuse("--file", "file_abc:doc.txt", why=INTERACTIVE, named=False),
    "--from-pr": _refused("--from-pr", "1", why=INTERACTIVE),
    "--ide": _refused("--ide", why=INTERACTIVE),
    "--include-hook-events": _ignored("--include-hook-events", why="hooks' runs are not written as lines yet"),
    "--name": _refused("--name", "probe", why="sessions have no display names yet"),
    "-n": _refused("-n", "probe", why="sessions have no display names yet"),
    "--plugin-dir": _refused("--plugin-dir", "plugin", why="there are no plugins"),
    "--plugin-url": _refused("--plugin-url", "http://127.0.0.1:9/p.zip", why="there are no plugins"),
    "--prompt-suggestions": _refused("--prompt-suggestions", why="no next prompt is predicted"),
    "--remote-control": _refused("--remote-control", why=INTERACTIVE),
    "--remote-control-session-name-prefix": _refused("--remote-control-session-name-prefix", "pre", why=INTERACTIVE),
    "--safe-mode": _refused("--safe-mode", why="not yet: `--setting-sources ''` leaves out the settings files"),
    "--teleport": Row(
        probe=_flag("--teleport", "x"),
        flag="--teleport",
        queryloop=REFUSED,
        reference={"returncode": 1, "requests": 0, "refused": False},  # Claude Code exits 1 without a word
        design=f"refused (exit 2, where Claude Code exits 1 in this probe): {INTERACTIVE} ([details]({CLI}))",
    ),
    "--tmux": _both_refuse("--tmux", why=INTERACTIVE),
    "--worktree": _both_refuse("--worktree", "wt", why="not yet: a run works in the folder it is given"),
    "-w": _both_refuse("-w", why="not yet: a run works in the folder it is given"),
}


def _seen(observed: Observed, row: Row, keys: dict[str, object]) -> dict[str, object]:
    return {key: READERS[key](observed, row) for key in keys}


@pytest.mark.parametrize("name", list(ROWS))
def test_each_flag_probe_is_the_same_in_both_programs_or_differs_by_design(name: str, tmp_path: Path) -> None:
    row = ROWS[name]
    for program in ("queryloop", "claude"):
        (tmp_path / program).mkdir()
    ours = observe("queryloop", row.probe, tmp_path / "queryloop")
    theirs = observe("claude", row.probe, tmp_path / "claude")
    assert _seen(ours, row, row.queryloop) == row.queryloop, ours.stderr
    expected = row.expected
    assert _seen(theirs, row, expected) == expected, f"Claude Code 2.1.235 ({row.verdict}): {theirs.stderr}"


def _help_flags(text: str) -> set[tuple[str, ...]]:
    """The options of a commander help text, each as its spellings (``-c, --continue`` → ``("-c", "--continue")``)."""
    options = text.split("\nOptions:\n", 1)[1].split("\nCommands:\n", 1)[0]
    found = re.findall(r"^  (-[-\w]+(?:, -[-\w]+)*)", options, re.M)
    return {tuple(spelling.split(", ")) for spelling in found}


def test_the_flag_list_is_claude_codes_help() -> None:
    """:data:`HELP_FLAGS` is what ``claude --help`` lists (2.1.235): a new flag shows up here first."""
    help_text = subprocess.run([str(reference.reference()), "--help"], capture_output=True, text=True, check=True)
    assert _help_flags(help_text.stdout) == set(HELP_FLAGS)


def _probes() -> Iterator[Probe]:
    """Every probe of every module of the suite (each module's ``ROWS``)."""
    for path in sorted(Path(__file__).parent.glob("test_*.py")):
        module = importlib.import_module(f"{__package__}.{path.stem}")
        for row in getattr(module, "ROWS", {}).values():
            if isinstance(getattr(row, "probe", None), Probe):
                yield row.probe


def test_every_flag_of_claude_help_has_a_row() -> None:
    """Each option of ``claude --help`` is given in some row's probe, or by every probe, or has its module named."""
    given = set(EVERY_PROBE)
    for probe in _probes():
        given.update(arg for arg in probe.args if arg.startswith("-"))
    missing = [s for s in HELP_FLAGS if not (set(s) & given) and not set(s) & ELSEWHERE.keys()]
    assert missing == [], (
        f"flags of claude --help without a row: {missing} (add one to tests/conformance/test_flags.py)"
    )
