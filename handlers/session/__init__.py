"""The session layer: what survives the process — transcripts, resume, file checkpoints, the side-effect ledger.

Its state is ``opening_session``; its reasons elsewhere are ``file_checkpoint_taken`` and ``ledger_hit_replayed``.
Here: ``data``, ``opening`` and ``services`` (``store``, ``transcript``, ``ledger``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from queryloop.fsm import lazy_exports

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
        is_blob_digest,
        is_session_id,
        machine_cache_dir,
        queryloop_home,
        read_jsonl,
    )
    from .services.transcript import TranscriptSink, TranscriptWriter, load_history, load_ledger, now
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
            ".opening": (
                "answer_dangling_calls",
                "open_session",
                "resume_history",
                "start_session",
            ),
            ".services.ledger": (
                "hidden_calls",
                "hidden_calls_note",
                "matching_entry",
                "replayed_result",
            ),
            ".services.store": (
                "CheckpointEntry",
                "CheckpointStore",
                "MAX_CHECKPOINTS",
                "SessionPaths",
                "encode_cwd",
                "is_blob_digest",
                "is_session_id",
                "machine_cache_dir",
                "queryloop_home",
                "read_jsonl",
            ),
            ".services.transcript": (
                "TranscriptSink",
                "TranscriptWriter",
                "load_history",
                "load_ledger",
                "now",
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
    "TranscriptSink",
    "TranscriptWriter",
    "answer_dangling_calls",
    "encode_cwd",
    "hidden_calls",
    "hidden_calls_note",
    "input_hash",
    "is_blob_digest",
    "is_session_id",
    "load_history",
    "load_ledger",
    "machine_cache_dir",
    "matching_entry",
    "now",
    "open_session",
    "queryloop_home",
    "read_jsonl",
    "replayed_result",
    "resume_history",
    "start_session",
    "with_session",
]
