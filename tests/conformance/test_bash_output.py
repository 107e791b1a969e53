"""Bash's output beside Claude Code 2.1.235: what the model and a program get of a command's output.

Each row runs one probe in both programs (Bash allowed) and reads the tool results the next
request carries and each ``user`` line's ``tool_use_result`` stdout: ``same``, or by design with
the reason (docs/differences.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .reference import Observed, Probe, SeenRow, seen_alike

pytestmark = pytest.mark.slow  # two programs per probe


def _bash(*commands: str) -> Probe:
    return Probe(calls=tuple(("Bash", {"command": c}) for c in commands), args=("--allowedTools", "Bash"))


def told(observed: Observed) -> list[object]:
    """Each tool result the last request carries, and the stdout of each ``user`` line's record."""
    sent = [
        block["content"]
        for message in observed.requests[-1].messages
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]
    records = [line["tool_use_result"] for line in observed.lines if "tool_use_result" in line]
    return [sent, [r.get("stdout") if isinstance(r, dict) else r for r in records]]


ROWS: dict[str, SeenRow] = {
    "a final newline": SeenRow(probe=_bash("echo b"), seen=told, queryloop=[["b"], ["b"]]),
    "blank lines at both ends": SeenRow(probe=_bash("printf '\\n\\nx  \\n\\n'"), seen=told, queryloop=[["x"], ["x"]]),
    "blank lines inside, stderr after stdout": SeenRow(
        probe=_bash("printf 'a\\n\\n'; echo b; printf 'c\\n\\n\\n' >&2"),
        seen=told,
        queryloop=[["a\n\nb\nc"], ["a\n\nb\nc"]],
    ),
    "no newline at all": SeenRow(probe=_bash("printf z"), seen=told, queryloop=[["z"], ["z"]]),
    "a failed command": SeenRow(
        probe=_bash("echo partial; exit 7"),
        seen=told,
        queryloop=[["Exit code 7\npartial"], ["Error: Exit code 7\npartial"]],
    ),
    "a failed command without output": SeenRow(
        probe=_bash("exit 3"), seen=told, queryloop=[["Exit code 3"], ["Error: Exit code 3"]]
    ),
    "a command killed by a signal": SeenRow(
        probe=_bash("kill -TERM $$"),
        seen=told,
        queryloop=[
            ["Command was killed by signal SIGTERM\n(no output)"],
            ["Error: Command was killed by signal SIGTERM\n(no output)"],
        ],
        reference=[["Exit code 144"], ["Error: Exit code 144"]],
        design="A command a signal ended names the signal; Claude Code gives its shell's exit code "
        "([Bash](configuration.md#bash-commands))",
    ),
}


@pytest.mark.parametrize("name", list(ROWS))
def test_each_bash_output_probe_is_the_same_in_both_programs_or_differs_by_design(name: str, tmp_path: Path) -> None:
    seen_alike(ROWS[name], tmp_path)
