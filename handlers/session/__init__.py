"""The session layer: what survives the process — transcripts, resume, file checkpoints, the side-effect ledger.

Its state is ``opening_session``; its reasons elsewhere are ``file_checkpoint_taken`` and ``ledger_hit_replayed``.
Here: ``data``, ``opening`` and ``services`` (``store``, ``transcript``, ``ledger``).
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
