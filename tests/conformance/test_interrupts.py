"""An interrupted prompt's transcript beside Claude Code 2.1.235: the marker it keeps, where, and what follows.

Each row runs one conversation as the Agent SDK does (``converse``): a prompt, an ``interrupt``
while a tool runs or while the model is awaited, then a second prompt; then it reads the
session's transcript file: its user and assistant entries in order, each block as its kind
(text as written). Claude Code's other entry types (``queue-operation``, ``attachment``, …)
are left out: queryloop writes its own (docs/differences.md). ``same``, or by design with the reason.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs
import pytest

from .converse import Await, Step, converse
from .reference import Probe
from .test_control import AGAIN, INTERRUPT, MARKERS, SLEEP, SLOW, TOOL_RUNS, _interrupt_row

pytestmark = pytest.mark.slow  # two programs per probe


@attrs.frozen(kw_only=True)
class Row:
    """A conversation, the value read of the run's folder, and what each program is seen to give."""

    probe: Probe
    script: Sequence[Step]
    seen: Callable[[Path], object]
    queryloop: object
    reference: object = None
    design: str = ""

    @property
    def expected(self) -> object:
        return self.queryloop if self.reference is None else self.reference


def transcript(base: Path) -> list[tuple[str, object]]:
    """The session transcript's user and assistant entries: (type, content), each block named by its kind."""
    [path] = [*base.glob("home/.claude/projects/*/*.jsonl"), *base.glob("queryloop-home/projects/*/*.jsonl")]
    entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    said: list[tuple[str, object]] = []
    for entry in entries:
        if entry.get("type") not in ("user", "assistant"):
            continue
        content = entry["message"]["content"]
        if isinstance(content, list):
            content = [block["text"] if block["type"] == "text" else block["type"] for block in content]
        said.append((entry["type"], content))
    return said


def _row(*steps: Step, model: dict[str, object], queryloop: object) -> Row:
    built = _interrupt_row((model,), *steps, seen=lambda _: None, queryloop=None)
    return Row(probe=built.probe, script=built.script, seen=transcript, queryloop=queryloop)


ROWS: dict[str, Row] = {
    "the transcript after an interrupted tool": _row(
        TOOL_RUNS,
        INTERRUPT,
        *AGAIN,
        Await("the second answer", lambda line: line.get("type") == "result" and line.get("result") == "later"),
        model=SLEEP,
        queryloop=[
            ("user", "go"),
            ("assistant", ["tool_use"]),
            ("user", ["tool_result"]),
            ("user", [MARKERS[1]]),
            ("user", "again"),
            ("assistant", ["later"]),
        ],
    ),
    "the transcript after an interrupted model call": _row(
        Await("the request sent", requests=1),
        INTERRUPT,
        *AGAIN,
        Await("the second answer", lambda line: line.get("type") == "result" and line.get("result") == "later"),
        model=SLOW,
        queryloop=[("user", "go"), ("user", [MARKERS[0]]), ("user", "again"), ("assistant", ["later"])],
    ),
}


@pytest.mark.parametrize("name", list(ROWS))
def test_each_interrupt_transcript_is_the_same_in_both_programs_or_differs_by_design(name: str, tmp_path: Path) -> None:
    row = ROWS[name]
    for who in ("queryloop", "claude"):
        (tmp_path / who).mkdir()
    ours = converse("queryloop", row.probe, row.script, tmp_path / "queryloop")
    theirs = converse("claude", row.probe, row.script, tmp_path / "claude")
    assert row.seen(tmp_path / "queryloop") == row.queryloop, ours.stderr
    assert row.seen(tmp_path / "claude") == row.expected, f"Claude Code 2.1.235: {theirs.stderr}"
