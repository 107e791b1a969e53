"""The session layer: what survives the process — transcripts, resume, file checkpoints, the side-effect ledger.

Its state in ``machines/query_loop.yaml`` is ``opening_session`` (a new session, or a
stored one resumed with its dangling calls answered); its reasons elsewhere are a file
checkpoint taken before a Write or Edit (``file_checkpoint_taken``, in the gate) and a
ledger hit (``ledger_hit_replayed``: a completed call the model re-proposed after it
lost sight of it is answered with its recorded result, not run again). Here: the slice
of the run data it owns and the ledger's records (``data``), opening a session
(``opening``, the edges the YAML names) and the services they drive: the files on disk
(``services.store``), the transcript written as the run goes and read back
(``services.transcript``) and which completed calls the model can no longer see
(``services.ledger``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from queryloop.fsm.lazy import lazy_exports

if TYPE_CHECKING:
    from .data import LedgerEntry, Restored, SessionData, SessionServices, SessionStore, input_hash, with_session
    from .opening import answer_dangling_calls, open_session, resume_history, start_session
    from .services.ledger import hidden_calls, hidden_calls_note, matching_entry, replayed_result
    from .services.store import (
        MAX_CHECKPOINTS,
        CheckpointEntry,
        CheckpointStore,
        SessionPaths,
        encode_cwd,
        is_session_id,
        queryloop_home,
    )
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            ".data": (
                "LedgerEntry",
                "Restored",
                "SessionData",
                "SessionServices",
                "SessionStore",
                "input_hash",
                "with_session",
            ),
            ".services.ledger": ("hidden_calls", "hidden_calls_note", "matching_entry", "replayed_result"),
            ".opening": ("answer_dangling_calls", "open_session", "resume_history", "start_session"),
            ".services.store": (
                "MAX_CHECKPOINTS",
                "CheckpointEntry",
                "CheckpointStore",
                "SessionPaths",
                "encode_cwd",
                "is_session_id",
                "queryloop_home",
            ),
        },
    )

__all__ = [
    "CheckpointEntry",
    "CheckpointStore",
    "LedgerEntry",
    "MAX_CHECKPOINTS",
    "Restored",
    "SessionData",
    "SessionPaths",
    "SessionServices",
    "SessionStore",
    "answer_dangling_calls",
    "encode_cwd",
    "hidden_calls",
    "hidden_calls_note",
    "input_hash",
    "is_session_id",
    "matching_entry",
    "open_session",
    "queryloop_home",
    "replayed_result",
    "resume_history",
    "start_session",
    "with_session",
]
