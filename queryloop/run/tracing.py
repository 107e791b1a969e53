"""Recording the path of every run: one JSON-lines file per run in ``QUERYLOOP_TRACE_DIR``.

Each step is one ``O_APPEND`` write. A folder that cannot be written never fails a run: one line on stderr, then
silence.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
import weakref
from pathlib import Path

from queryloop.fsm import Step

__all__ = ["TRACE_DIR_ENV", "TraceRecorder", "recorder_from_env"]

TRACE_DIR_ENV = "QUERYLOOP_TRACE_DIR"
"""The environment variable naming the directory runs record their steps in."""

_warned: set[str] = set()  # directories already reported unwritable by this process


class TraceRecorder:
    """Appends each step of one run to ``<directory>/<session id>-<random>.jsonl`` (a sub-agent's run:
    ``<session id>.agent-<agent id>-<random>.jsonl``, apart from the session's own runs)."""

    def __init__(self, directory: Path, *, machine: str, session_id: str, agent_id: str | None = None) -> None:
        self.machine = machine
        self.session_id = session_id
        run = session_id if agent_id is None else f"{session_id}.agent-{agent_id}"
        self.path = directory / f"{run}-{uuid.uuid4().hex[:12]}.jsonl"
        self.failed = False
        self._made = False  # its directory exists
        self._fd: int | None = None  # open from the first step to the terminal one
        self._closer: weakref.finalize[[int], TraceRecorder] | None = None  # closes it if the run is dropped unfinished

    def __call__(self, step: Step) -> None:
        if self.failed:
            return
        line = {
            "type": "system",
            "subtype": "transition",
            "machine": self.machine,
            "session_id": self.session_id,
            "step": step.index,
            "from": step.source,
            "event": step.event,
            "reason": step.reason,
            "to": step.dest,
            "progress": step.progress,
            "counters": step.counter_dict(),
        }
        data = (json.dumps(line, separators=(",", ":")) + "\n").encode()
        try:
            if not self._made:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._made = True
            if self._fd is None:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                self._closer = weakref.finalize(self, os.close, self._fd)
            # one O_APPEND write per step, in the kernel at once: a killed run leaves every line it took.
            # Held open, not opened and closed per step: that cost a persisted run's tool turn 6 opens and closes.
            os.write(self._fd, data)
        except OSError as exc:
            self.close()
            self.failed = True
            directory = str(self.path.parent)
            if directory not in _warned:
                _warned.add(directory)
                print(
                    f"queryloop: cannot record the run's path in {directory} ({exc.strerror or exc}); "
                    "the run goes on without it",
                    file=sys.stderr,
                )
            return
        if step.terminal:
            self.close()

    def close(self) -> None:
        """Close the file (the next step, if one came, would open it again)."""
        if self._closer is not None:
            self._closer()
        self._fd = self._closer = None


SESSION_STEPS = "steps"
"""The folder in a session's folder where its runs record their paths when ``QUERYLOOP_TRACE_DIR`` is unset."""


def recorder_from_env(
    *, machine: str, session_id: str, agent_id: str | None = None, session_folder: Path | None = None
) -> TraceRecorder | None:
    """A recorder for one run (``agent_id``: a sub-agent's): into ``QUERYLOOP_TRACE_DIR`` when it is set
    (and not empty), else into the session's folder (``session_folder``/steps) when the session is kept on
    disk; None when neither."""
    directory = os.environ.get(TRACE_DIR_ENV)
    if directory:
        where = Path(directory)
    elif session_folder is not None:
        where = session_folder / SESSION_STEPS
    else:
        return None
    return TraceRecorder(where, machine=machine, session_id=session_id, agent_id=agent_id)
