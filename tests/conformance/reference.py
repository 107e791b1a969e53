"""One probe, two programs: Claude Code 2.1.235 and queryloop run on the same files against the embedded server.

A :class:`Probe` is a script of model replies, the files of a project folder and a home, the
trust record's folders and the arguments; :func:`observe` runs one program on it in a fresh
copy and returns what a user sees (:class:`Observed`). Claude Code is the pinned npm package
in ``tests/conformance/npm`` (``tools/test.sh`` installs it); where it is missing, a test
using :func:`reference` is skipped with the reason, never passed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import attrs
import pytest

from queryloop.mockapi.background import ServerThread
from queryloop.mockapi.scenario import parse_scenario
from queryloop.mockapi.server import RecordedRequest

ROOT = Path(__file__).resolve().parent.parent.parent
CLAUDE = ROOT / "tests" / "conformance" / "npm" / "node_modules" / ".bin" / "claude"

Program = Literal["claude", "queryloop"]


@attrs.frozen(kw_only=True)
class Probe:
    """The model's tool calls (one per turn, then "done"), the files, the trusted folders and the arguments."""

    calls: tuple[tuple[str, Mapping[str, Any]], ...]
    files: Mapping[str, Any] = attrs.field(factory=dict)  # under the probe's folder; JSON unless a str or bytes
    home_files: Mapping[str, Any] = attrs.field(factory=dict)
    trusted: tuple[str, ...] = ()  # folders under the probe's folder its user trusts ("project")
    cwd: str = "project"
    args: tuple[str, ...] = ()  # after -p PROMPT --model MODEL --output-format stream-json
    env: Mapping[str, str] = attrs.field(factory=dict)
    prompt: str = "go"
    model: str | None = "mock-primary"  # None: no --model
    scenario: str | None = None  # a whole scenario (YAML or JSON) instead of ``calls``


@attrs.frozen(kw_only=True)
class Observed:
    """What a user sees of one run: the exit code, the tools refused, the files made, the mode, stderr."""

    returncode: int
    denied: tuple[str, ...]  # permission_denials' tool names, in order
    made: frozenset[str]  # files that exist after the run and were not there before (under the probe's folder)
    mode: str | None  # the init line's permissionMode
    stderr: str
    requests: tuple[RecordedRequest, ...] = ()  # the Messages API requests it sent, in order
    lines: tuple[dict[str, Any], ...] = ()  # its stream-json lines
    result: Mapping[str, Any] = attrs.field(factory=dict)  # the result line ({} if none)
    stdout: str = ""  # all of it, as written


@attrs.frozen(kw_only=True)
class Row:
    """A probe and what each program is seen to do: ``queryloop``'s values (a module's view of
    :class:`Observed`, by key), and Claude Code's where they differ by design, with the reason."""

    probe: Probe
    queryloop: dict[str, object]
    reference: dict[str, object] | None = None  # None: the same as queryloop's
    design: str = ""  # why queryloop differs

    @property
    def expected(self) -> dict[str, object]:
        """What Claude Code is expected to show."""
        return self.queryloop if self.reference is None else self.reference

    @property
    def verdict(self) -> str:
        return "same" if self.reference is None else f"by design: {self.design}"


def held_to_its_row(row: Row, read: Callable[[Observed, str], object], base: Path) -> None:
    """Run ``row``'s probe in both programs under ``base`` and hold each to its values, read by key with
    ``read``: queryloop's, and Claude Code's (the same, or by design)."""
    for program in ("queryloop", "claude"):
        (base / program).mkdir()
    ours = observe("queryloop", row.probe, base / "queryloop")
    theirs = observe("claude", row.probe, base / "claude")
    assert {key: read(ours, key) for key in row.queryloop} == row.queryloop, ours.stderr
    expected = row.expected
    seen = {key: read(theirs, key) for key in expected}
    assert seen == expected, f"Claude Code 2.1.235 ({row.verdict}): {theirs.stderr}"


@attrs.frozen(kw_only=True)
class SeenRow:
    """A probe, the one value ``seen`` reads of each run, and what each program is seen to give
    (``reference`` None: the same)."""

    probe: Probe
    seen: Callable[[Observed], object]
    queryloop: object
    reference: object = None
    design: str = ""  # why queryloop differs, ending in a link to the page that explains it

    @property
    def expected(self) -> object:
        """What Claude Code is expected to show."""
        return self.queryloop if self.reference is None else self.reference

    @property
    def verdict(self) -> str:
        return "same" if self.reference is None else f"by design: {self.design}"


def seen_alike(row: SeenRow, base: Path) -> None:
    """Run ``row``'s probe in both programs under ``base`` and hold what ``row.seen`` reads of each to the
    row: queryloop's value, and Claude Code's (the same, or by design)."""
    for program in ("queryloop", "claude"):
        (base / program).mkdir()
    ours = observe("queryloop", row.probe, base / "queryloop")
    theirs = observe("claude", row.probe, base / "claude")
    assert row.seen(ours) == row.queryloop, ours.stderr
    assert row.seen(theirs) == row.expected, f"Claude Code 2.1.235 ({row.verdict}): {theirs.stderr}"


def reference() -> Path:
    """Claude Code's program, or skip the test saying how to get it."""
    if not os.access(CLAUDE, os.X_OK):
        pytest.skip(f"Claude Code 2.1.235 is not installed at {CLAUDE}: tools/test.sh runs npm ci there")
    return CLAUDE


def _scenario(probe: Probe) -> str:
    if probe.scenario is not None:
        return probe.scenario
    steps: list[dict[str, Any]] = [
        {"reply": {"content": [{"tool_use": {"name": name, "input": dict(args)}}]}} for name, args in probe.calls
    ]
    steps.append({"reply": {"content": [{"text": "done"}]}})
    return json.dumps({"schema_version": 1, "scenario": "probe", "model": "mock-primary", "default": steps})


def _lay_out(probe: Probe, base: Path) -> tuple[Path, Path]:
    home, cwd = base / "home", base / probe.cwd
    for root, files in ((base / "project", probe.files), (home, probe.home_files)):
        for rel, content in files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content if isinstance(content, str) else json.dumps(content))
    home.mkdir(exist_ok=True)
    cwd.mkdir(parents=True, exist_ok=True)
    if probe.trusted:
        projects = {str((base / f).resolve()): {"hasTrustDialogAccepted": True} for f in probe.trusted}
        (home / ".claude.json").write_text(json.dumps({"projects": projects}))
    return home, cwd


def _command(program: Program, probe: Probe) -> list[str]:
    verbose = [] if "--no-verbose" in probe.args else ["--verbose"]  # stream-json needs it in Claude Code
    if program == "claude":
        return [str(reference()), *verbose]
    return [sys.executable, "-m", "queryloop", "run", *verbose]


def observe(program: Program, probe: Probe, base: Path) -> Observed:
    """Run ``program`` on ``probe`` in the fresh folder ``base``, against the embedded server playing its calls."""
    home, cwd = _lay_out(probe, base)
    before = {p for p in base.rglob("*") if p.is_file()}
    with ServerThread(parse_scenario(_scenario(probe), "<probe>")) as server:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "ANTHROPIC_BASE_URL": server.url,
            "ANTHROPIC_API_KEY": "probe",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "CLAUDE_CODE_MAX_RETRIES": "0",
            "QUERYLOOP_HOME": str(base / "queryloop-home"),
            **probe.env,
        }
        model = ["--model", probe.model] if probe.model is not None else []
        args = ["-p", probe.prompt, *model, "--output-format", "stream-json", *probe.args]
        proc = subprocess.run(
            [*_command(program, probe), *(a for a in args if a != "--no-verbose")],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=120,
        )
        requests = tuple(r for r in server.server.requests if r.path == "/v1/messages")
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    result = next((line for line in reversed(lines) if line.get("type") == "result"), {})
    init = next((line for line in lines if line.get("subtype") == "init"), {})
    made = {p for p in base.rglob("*") if p.is_file()} - before
    return Observed(
        returncode=proc.returncode,
        denied=tuple(d["tool_name"] for d in result.get("permission_denials") or ()),
        made=frozenset(str(p.relative_to(base)) for p in made if _the_users(p.relative_to(base))),
        mode=init.get("permissionMode"),
        stderr=proc.stderr,
        requests=requests,
        lines=tuple(lines),
        result=result,
        stdout=proc.stdout,
    )


def _the_users(rel: Path) -> bool:
    """A file the run made for the user, not a program's own bookkeeping (sessions, caches, its record)."""
    return rel.parts[0] not in ("home", "queryloop-home")
