"""Refused tool calls beside Claude Code 2.1.235: the ``system/permission_denied`` line and ``permission_denials``.

Each row runs one probe in both programs and reads one value: the ``permission_denied`` lines
(their keys, ``decision_reason_type``, a hook's reason, and whether ``message`` is the error
result the model got), where they sit among the lines, the ``tool_result_meta`` of each
``user`` line, or the result's ``permission_denials`` with the probe's folder written ``BASE``.
The sentences are each program's own; the values a program reads are compared
(docs/cli.md#output-formats).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from .reference import Observed, Probe, SeenRow, seen_alike

pytestmark = pytest.mark.slow  # two programs per probe

KEYS = ["message", "session_id", "subtype", "tool_name", "tool_use_id", "type", "uuid"]
WRITE = ("Write", {"file_path": "a.txt", "content": "x"})
ECHO = ("Bash", {"command": "echo hi"})


def _hook(matcher: str, decision: str) -> dict[str, Any]:
    """A PreToolUse hook answering ``decision`` with the reason ``nope``, as project settings."""
    said = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": decision}}
    said["hookSpecificOutput"]["permissionDecisionReason"] = "nope"
    hook = {"type": "command", "command": f"echo '{json.dumps(said)}'"}
    return {".claude/settings.json": {"hooks": {"PreToolUse": [{"matcher": matcher, "hooks": [hook]}]}}}


def _settings(permissions: Mapping[str, list[str]]) -> dict[str, Any]:
    return {".claude/settings.json": {"permissions": dict(permissions)}}


def _results(observed: Observed) -> dict[str, object]:
    """Each tool result the run printed, by its call's id."""
    return {
        block["tool_use_id"]: block["content"]
        for line in observed.lines
        if line["type"] == "user" and isinstance(line["message"]["content"], list)
        for block in line["message"]["content"]
        if block.get("type") == "tool_result"
    }


def denied_lines(observed: Observed) -> list[dict[str, object]]:
    """The ``permission_denied`` lines: keys, tool, what decided, a hook's reason, and the message's match."""
    results = _results(observed)
    return [
        {
            "keys": sorted(line),
            "tool_name": line["tool_name"],
            "decision_reason_type": line.get("decision_reason_type"),
            "hook's reason": line.get("decision_reason") if line.get("decision_reason_type") == "hook" else None,
            "message is the tool result": line["message"] == results.get(line["tool_use_id"]),
        }
        for line in observed.lines
        if line.get("subtype") == "permission_denied"
    ]


def stamped(observed: Observed) -> list[object]:
    """Each ``user`` line's ``tool_result_meta``: why the call did not run, and whether it names that call."""
    return [
        [
            {"kind": meta["non_execution_kind"], "its call": meta["id"] == line["message"]["content"][0]["tool_use_id"]}
            for meta in line["tool_result_meta"]
        ]
        if "tool_result_meta" in line
        else None
        for line in observed.lines
        if line["type"] == "user"
    ]


def _stamp(kind: str) -> list[object]:
    return [[{"kind": kind, "its call": True}]]


def order(observed: Observed) -> list[str]:
    """The kinds of the lines after ``init``, queryloop's own (transitions, attempts) left out."""
    kinds = [f"{line['type']}/{line['subtype']}" if "subtype" in line else line["type"] for line in observed.lines]
    return [k for k in kinds if k not in ("system/init", "system/transition", "system/api_request")]


def listed(observed: Observed) -> list[object]:
    """The result's ``permission_denials`` without the ids, the probe's folder written ``BASE``."""
    cwd = next(line["cwd"] for line in observed.lines if line.get("subtype") == "init")
    base = str(Path(cwd).parent)
    denials = [{k: v for k, v in d.items() if k != "tool_use_id"} for d in observed.result["permission_denials"]]
    return json.loads(json.dumps(denials).replace(base, "BASE"))


def _line(kind: str | None, *, hook: str | None = None, extra: tuple[str, ...] = ()) -> dict[str, object]:
    return {
        "keys": sorted([*KEYS, *extra, *(["decision_reason_type"] if kind else [])]),
        "decision_reason_type": kind,
        "hook's reason": hook,
        "message is the tool result": True,
    }


def _row(probe: Probe, queryloop: object, **row: Any) -> SeenRow:
    return SeenRow(probe=probe, seen=denied_lines, queryloop=queryloop, **row)


def _lines(tool: str, kind: str | None, **more: Any) -> list[dict[str, object]]:
    return [{**_line(kind, **more), "tool_name": tool}]


TRUSTED = ("project",)
ROWS: dict[str, SeenRow] = {
    # ---- which refusals print the line, and what it says ----
    "a Bash deny rule": _row(
        Probe(calls=(("Bash", {"command": "rm -f x"}),), files=_settings({"deny": ["Bash(rm:*)"]}), trusted=TRUSTED),
        _lines("Bash", "subcommandResults"),
    ),
    "a WebFetch deny rule": _row(
        Probe(
            calls=(("WebFetch", {"url": "https://example.com/", "prompt": "x"}),),
            args=("--disallowedTools", "WebFetch(domain:example.com)"),
        ),
        _lines("WebFetch", "rule"),
    ),
    "an ask rule in -p": _row(
        Probe(calls=(ECHO,), files=_settings({"ask": ["Bash(echo:*)"]}), trusted=TRUSTED), _lines("Bash", "rule")
    ),
    "a Write that would ask in -p": _row(Probe(calls=(WRITE,)), _lines("Write", None)),
    "an output redirection that would ask in -p": _row(
        Probe(calls=(("Bash", {"command": "echo hi > out.txt"}),)), _lines("Bash", None)
    ),
    "dontAsk mode": _row(Probe(calls=(WRITE,), args=("--permission-mode", "dontAsk")), _lines("Write", "mode")),
    "dontAsk mode over an ask rule": _row(
        Probe(
            calls=(ECHO,),
            args=("--permission-mode", "dontAsk"),
            files=_settings({"ask": ["Bash(echo:*)"]}),
            trusted=TRUSTED,
        ),
        _lines("Bash", "mode"),
    ),
    "plan mode": _row(Probe(calls=(WRITE,), args=("--permission-mode", "plan")), _lines("Write", "mode")),
    "a Write outside the working directories": _row(
        Probe(calls=(("Write", {"file_path": "../out.txt", "content": "x"}),)),
        _lines("Write", "workingDir", extra=("decision_reason",)),
    ),
    "a Read outside the working directories": _row(
        Probe(calls=(("Read", {"file_path": "../home/h.txt"}),), home_files={"h.txt": "x"}),
        _lines("Read", "workingDir", extra=("decision_reason",)),
    ),
    "a PreToolUse hook's ask in -p": _row(
        Probe(calls=(ECHO,), files=_hook("Bash", "ask"), trusted=TRUSTED),
        _lines("Bash", "hook", hook="nope", extra=("decision_reason",)),
    ),
    "a PreToolUse hook's deny": _row(Probe(calls=(ECHO,), files=_hook("Bash", "deny"), trusted=TRUSTED), []),
    "a path deny rule on Read": _row(
        Probe(
            calls=(("Read", {"file_path": "secret.txt"}),),
            files={"secret.txt": "s", **_settings({"deny": ["Read(./secret.txt)"]})},
            trusted=TRUSTED,
        ),
        [],
    ),
    # ---- the refused call's tool result: why it did not run ----
    "a deny rule's result, stamped": SeenRow(
        probe=Probe(
            calls=(("Bash", {"command": "rm -f x"}),), files=_settings({"deny": ["Bash(rm:*)"]}), trusted=TRUSTED
        ),
        seen=stamped,
        queryloop=_stamp("permission-rule"),
    ),
    "dontAsk mode's result, stamped": SeenRow(
        probe=Probe(calls=(WRITE,), args=("--permission-mode", "dontAsk")),
        seen=stamped,
        queryloop=_stamp("permission-rule"),
    ),
    "a hook's deny, stamped": SeenRow(
        probe=Probe(calls=(ECHO,), files=_hook("Bash", "deny"), trusted=TRUSTED),
        seen=stamped,
        queryloop=_stamp("permission-rule"),
    ),
    "an ask in -p, stamped": SeenRow(probe=Probe(calls=(WRITE,)), seen=stamped, queryloop=_stamp("user-rejected")),
    "plan mode's result, stamped": SeenRow(
        probe=Probe(calls=(WRITE,), args=("--permission-mode", "plan")),
        seen=stamped,
        queryloop=_stamp("user-rejected"),
    ),
    "a hook's ask in -p, stamped": SeenRow(
        probe=Probe(calls=(ECHO,), files=_hook("Bash", "ask"), trusted=TRUSTED),
        seen=stamped,
        queryloop=_stamp("user-rejected"),
    ),
    "a path deny rule's result, not stamped": SeenRow(
        probe=Probe(
            calls=(("Read", {"file_path": "secret.txt"}),),
            files={"secret.txt": "s", **_settings({"deny": ["Read(./secret.txt)"]})},
            trusted=TRUSTED,
        ),
        seen=stamped,
        queryloop=[None],
    ),
    "a result that ran, not stamped": SeenRow(
        probe=Probe(calls=(("Bash", {"command": "echo hi"}),), args=("--allowedTools", "Bash")),
        seen=stamped,
        queryloop=[None],
    ),
    # ---- where the line sits ----
    "the line's place": SeenRow(
        probe=Probe(
            calls=(("Bash", {"command": "rm -f x"}),), files=_settings({"deny": ["Bash(rm:*)"]}), trusted=TRUSTED
        ),
        seen=order,
        queryloop=["assistant", "system/permission_denied", "user", "assistant", "result/success"],
    ),
    # ---- the input permission_denials lists ----
    "a Write's relative path, listed": SeenRow(
        probe=Probe(calls=(WRITE,)),
        seen=listed,
        queryloop=[{"tool_name": "Write", "tool_input": {"file_path": "BASE/project/a.txt", "content": "x"}}],
    ),
    "a Write's path through ..": SeenRow(
        probe=Probe(calls=(("Write", {"file_path": "./sub/../a.txt", "content": "x"}),)),
        seen=listed,
        queryloop=[{"tool_name": "Write", "tool_input": {"file_path": "BASE/project/a.txt", "content": "x"}}],
    ),
    "a Write's path under ~": SeenRow(
        probe=Probe(calls=(("Write", {"file_path": "~/t.txt", "content": "x"}),)),
        seen=listed,
        queryloop=[{"tool_name": "Write", "tool_input": {"file_path": "BASE/home/t.txt", "content": "x"}}],
    ),
    "a Write a hook denies, listed": SeenRow(
        probe=Probe(calls=(WRITE,), files=_hook("Write", "deny"), trusted=TRUSTED),
        seen=listed,
        queryloop=[{"tool_name": "Write", "tool_input": {"file_path": "BASE/project/a.txt", "content": "x"}}],
    ),
    "an Edit's relative path, listed": SeenRow(
        probe=Probe(
            calls=(("Edit", {"file_path": "b.txt", "old_string": "a", "new_string": "b"}),), files={"b.txt": "a"}
        ),
        seen=listed,
        queryloop=[
            {
                "tool_name": "Edit",
                "tool_input": {
                    "file_path": "BASE/project/b.txt",
                    "old_string": "a",
                    "new_string": "b",
                    "replace_all": False,
                },
            }
        ],
    ),
    "a Read's path outside, listed": SeenRow(
        probe=Probe(calls=(("Read", {"file_path": "../home/h.txt"}),), home_files={"h.txt": "x"}),
        seen=listed,
        queryloop=[{"tool_name": "Read", "tool_input": {"file_path": "BASE/home/h.txt"}}],
    ),
    "a Bash command, listed as given": SeenRow(
        probe=Probe(calls=(("Bash", {"command": "cat ../home/h.txt"}),), home_files={"h.txt": "x"}),
        seen=listed,
        queryloop=[{"tool_name": "Bash", "tool_input": {"command": "cat ../home/h.txt"}}],
    ),
}


@pytest.mark.parametrize("name", list(ROWS))
def test_each_refusal_probe_is_the_same_in_both_programs_or_differs_by_design(name: str, tmp_path: Path) -> None:
    seen_alike(ROWS[name], tmp_path)
