"""Scenario files: the script the embedded fake Anthropic server plays.

Owns loading and checking a scenario and the records the server reads. Each problem is a :class:`ScenarioError` with
``file:line``. The format: docs/scenarios.md.
"""

from __future__ import annotations

import copy
import difflib
import os
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import attrs

from queryloop.fsm import Source, SpecError, read_yaml, schema_problems
from queryloop.machines import shipped_scenarios

from .holds import Hold, hold_of, hold_problem
from .scenario_schema import SCENARIO_SCHEMA_VERSION, SCHEMA

__all__ = [
    "ERROR_TYPE_BY_STATUS",
    "ErrorSpec",
    "ModelScript",
    "Rule",
    "SCENARIO_SCHEMA_VERSION",
    "Scenario",
    "ScenarioError",
    "Step",
    "load_scenario",
    "parse_scenario",
    "resolve_scenario",
    "scenario_names",
]

ERROR_TYPE_BY_STATUS: Mapping[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
"""The ``error.type`` the real API sends for each status; other 5xx use ``api_error``."""


class ScenarioError(ValueError):
    """A scenario file cannot become a scenario; the message reads ``file:line: what (fix)``."""


# ---- records ---------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ErrorSpec:
    """An HTTP error answer: status, API error type, message and extra headers."""

    status: int
    type: str
    message: str
    headers: Mapping[str, str] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class Step:
    """One scripted answer; ``where`` is its YAML path (``models.mock-primary[0]``)."""

    kind: Literal["reply", "error"]
    where: str
    line: int | None
    content: tuple[Mapping[str, Any], ...] = ()
    """API-format blocks without ids: ``{"type": "text", "text": ...}``, ``thinking`` (+
    ``signature`` when given), ``tool_use`` (``name``, ``input``, ``id`` when given)."""
    stop_reason: str = "end_turn"
    usage: Mapping[str, Any] = attrs.field(factory=dict)  # token counts; ``server_tool_use``: a mapping of counts
    error: ErrorSpec | None = None
    name: str | None = None  # what a hold elsewhere calls it
    hold: Hold | None = None  # the event its answer waits for
    repeat: int = 1
    delay_ms: int = 0
    pause_s: float = 0.0
    """Model time (seconds) that passed before the request this step answers; only the cache's clock moves."""
    cut_after_block: int | None = None
    error_event_after_block: int | None = None
    error_event_type: str = "overloaded_error"
    error_event_message: str = "Overloaded"
    stall_after_block: int | None = None
    stall_seconds: float = 0.0
    malformed: Literal["sse", "json"] | None = None
    cut_body: bool = False  # a non-streamed answer: the 200's JSON body stops half-way and the connection closes


@attrs.frozen(kw_only=True)
class Rule:
    """A step answered whenever its ``when`` conditions all hold (at most ``times`` times)."""

    step: Step
    input_tokens_over: int | None = None
    system_contains: str | None = None
    last_user_contains: str | None = None
    first_user_contains: str | None = None
    model: str | None = None
    times: int | None = None


@attrs.frozen(kw_only=True)
class ModelScript:
    """One model's ordered steps and the step answered once they are exhausted."""

    steps: tuple[Step, ...]
    otherwise: Step | None = None

    def step_at(self, index: int) -> Step | None:
        """The step answering the ``index``-th (0-based) request, counting ``repeat``."""
        for step in self.steps:
            if index < step.repeat:
                return step
            index -= step.repeat
        return None

    @property
    def length(self) -> int:
        """How many requests the ordered steps answer."""
        return sum(step.repeat for step in self.steps)


@attrs.frozen(kw_only=True)
class Scenario:
    """A validated scenario file."""

    name: str
    model: str
    path: str = "<string>"
    doc: str = ""
    fallback_models: tuple[str, ...] = ()
    cli: Mapping[str, Any] = attrs.field(factory=dict)
    files: Mapping[str, str] = attrs.field(factory=dict)
    rules: tuple[Rule, ...] = ()
    models: Mapping[str, ModelScript] = attrs.field(factory=dict)
    default: ModelScript | None = None
    otherwise: Step | None = None
    cache_min_tokens: int | None = None
    """The shortest prefix (server tokens) the server's prompt cache writes; None: each model's documented one."""

    def script_for(self, model: str) -> ModelScript | None:
        """The script a request to ``model`` consumes: its own, else ``default``."""
        return self.models.get(model, self.default)


_Path = tuple[str | int, ...]


def _dotted(path: Iterable[str | int]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<top level>"


# ---- building records ------------------------------------------------------------------


class _Builder:
    def __init__(self, source: Source) -> None:
        self.source = source

    def fail(self, path: _Path, message: str, fix: str) -> ScenarioError:
        return ScenarioError(str(self.source.problem(path, f"{_dotted(path)}: {message}", fix)))

    def step(self, raw: Mapping[str, Any], path: _Path) -> Step:
        kinds = [k for k in ("reply", "error") if k in raw]
        if len(kinds) != 1:
            found = " and ".join(kinds) if kinds else "neither"
            raise self.fail(path, f"a step needs exactly one of 'reply' or 'error', found {found}", "keep one")
        common: dict[str, Any] = {
            "where": _dotted(path),
            "line": self.source.line_of(path),
            "name": raw.get("name"),
            "hold": self.hold(raw["hold"], (*path, "hold")) if "hold" in raw else None,
            "repeat": raw.get("repeat", 1),
            "delay_ms": raw.get("delay_ms", 0),
            "pause_s": float(raw.get("pause_s", 0)),
        }
        faults = [
            k for k in ("cut_after_block", "error_event_after_block", "stall", "malformed", "cut_body") if k in raw
        ]
        if kinds[0] == "error":
            if faults:
                raise self.fail(
                    (*path, faults[0]), f"fault {faults[0]!r} only applies to a reply step", "remove it or use reply:"
                )
            err = raw["error"]
            status = int(err["status"])
            etype = err.get("type") or ERROR_TYPE_BY_STATUS.get(
                status, "api_error" if status >= 500 else "invalid_request_error"
            )
            message = err.get("message") or _default_message(status, etype)
            headers = {str(k): str(v) for k, v in (err.get("headers") or {}).items()}
            return Step(
                kind="error", error=ErrorSpec(status=status, type=etype, message=message, headers=headers), **common
            )

        reply = raw["reply"]
        content = tuple(self.block(b, (*path, "reply", "content", i)) for i, b in enumerate(reply["content"]))
        has_tool = any(b["type"] == "tool_use" for b in content)
        stop_reason = reply.get("stop_reason", "tool_use" if has_tool else "end_turn")
        stream_faults = [k for k in ("cut_after_block", "error_event_after_block") if k in raw]
        if len(stream_faults) + (raw.get("malformed") == "sse") > 1:
            raise self.fail(
                (*path, stream_faults[-1] if stream_faults else "malformed"),
                "a step can end its stream only one way: cut_after_block, error_event_after_block or malformed: sse",
                "keep one of them",
            )
        fields: dict[str, Any] = {}
        if raw.get("cut_body"):
            fields["cut_body"] = True
        if "cut_after_block" in raw:
            fields["cut_after_block"] = self.block_index(raw["cut_after_block"], content, (*path, "cut_after_block"))
        if "error_event_after_block" in raw:
            ev = raw["error_event_after_block"]
            if isinstance(ev, int):
                ev = {"after_block": ev}
            fields["error_event_after_block"] = self.block_index(
                ev["after_block"], content, (*path, "error_event_after_block")
            )
            fields["error_event_type"] = ev.get("type", "overloaded_error")
            fields["error_event_message"] = ev.get(
                "message", "Overloaded" if fields["error_event_type"] == "overloaded_error" else "Internal server error"
            )
        if "stall" in raw:
            fields["stall_after_block"] = self.block_index(raw["stall"]["after_block"], content, (*path, "stall"))
            fields["stall_seconds"] = float(raw["stall"]["seconds"])
        return Step(
            kind="reply",
            content=content,
            stop_reason=stop_reason,
            usage=dict(reply.get("usage") or {}),
            malformed=raw.get("malformed"),
            **fields,
            **common,
        )

    def hold(self, raw: Mapping[str, Any], path: _Path) -> Hold:
        found = hold_of(raw)
        if isinstance(found, str):
            raise self.fail(path, found, "write e.g. hold: {step: child-asked} or hold: {file: /tmp/go}")
        return found

    def block_index(self, k: int, content: tuple[Mapping[str, object], ...], path: _Path) -> int:
        if k > len(content):
            raise self.fail(
                path,
                f"after {k} blocks, but the reply has only {len(content)}",
                f"use a number from 0 to {len(content)}",
            )
        return k

    def block(self, raw: Mapping[str, Any], path: _Path) -> Mapping[str, object]:
        kinds = [k for k in ("text", "thinking", "tool_use", "raw") if k in raw]
        if len(kinds) != 1 or ("signature" in raw and kinds != ["thinking"]):
            raise self.fail(
                path,
                f"a content block needs exactly one of text, thinking, tool_use or raw, found {sorted(raw) or 'none'}",
                'write e.g. {text: "..."} or {tool_use: {name: Edit, input: {...}}}',
            )
        kind = kinds[0]
        if kind == "raw":
            return copy.deepcopy(dict(raw["raw"]))
        if kind == "text":
            return {"type": "text", "text": raw["text"]}
        if kind == "thinking":
            block: dict[str, Any] = {"type": "thinking", "thinking": raw["thinking"]}
            if "signature" in raw:
                block["signature"] = raw["signature"]
            return block
        tool = raw["tool_use"]
        block = {"type": "tool_use", "name": tool["name"], "input": dict(tool.get("input") or {})}
        if "id" in tool:
            block["id"] = tool["id"]
        return block

    def script(self, raw: Any, path: _Path) -> ModelScript:
        if isinstance(raw, list):
            return ModelScript(steps=tuple(self.step(s, (*path, i)) for i, s in enumerate(raw)))
        steps = tuple(self.step(s, (*path, "steps", i)) for i, s in enumerate(raw["steps"]))
        otherwise = self.step(raw["otherwise"], (*path, "otherwise")) if "otherwise" in raw else None
        return ModelScript(steps=steps, otherwise=otherwise)

    def rule(self, raw: Mapping[str, Any], path: _Path) -> Rule:
        step = self.step({k: v for k, v in raw.items() if k not in ("when", "times")}, path)
        when = raw["when"]
        return Rule(
            step=step,
            input_tokens_over=when.get("input_tokens_over"),
            system_contains=when.get("system_contains"),
            last_user_contains=when.get("last_user_contains"),
            first_user_contains=when.get("first_user_contains"),
            model=when.get("model"),
            times=raw.get("times"),
        )


def _default_message(status: int, etype: str) -> str:
    return {
        "overloaded_error": "Overloaded",
        "api_error": "Internal server error",
        "rate_limit_error": "Number of request tokens has exceeded your per-minute rate limit",
        "authentication_error": "invalid x-api-key",
        "permission_error": "Your API key does not have permission to use the specified resource.",
        "not_found_error": "Not found",
        "request_too_large": "Request exceeds the maximum allowed number of bytes.",
        "billing_error": "Your credit balance is too low to access the Anthropic API.",
    }.get(etype, f"scripted error {status}")


def _check_holds(path: str, steps: Iterable[Step | None]) -> None:
    """Each step name used once, and each hold naming a step there is (a hold that can never end fails here)."""
    found = hold_problem([s for s in steps if s is not None])
    if found is not None:
        step, message, fix = found
        raise ScenarioError(f"{path}:{step.line}: {step.where}: {message} ({fix})")


def parse_scenario(text: str, path: str = "<string>") -> Scenario:
    """Parse and validate scenario YAML ``text``; ``path`` names it in error messages."""
    fix = f"start the file with `schema_version: {SCENARIO_SCHEMA_VERSION}`, `scenario:` and `model:`"
    try:
        source = read_yaml(text, path, empty_fix=fix)
    except SpecError as exc:
        raise ScenarioError(str(exc.first)) from None
    if not isinstance(source.data, dict):
        raise ScenarioError(f"{path}:1: a scenario must be a mapping ({fix})")
    version_fix = f"add `schema_version: {SCENARIO_SCHEMA_VERSION}` at the top"
    problems = schema_problems(SCHEMA, source, fixes={"schema_version": version_fix})
    if problems:
        raise ScenarioError(str(problems[0]))
    data = source.data

    build = _Builder(source)
    for name in data.get("files") or {}:
        parts = name.replace("\\", "/").split("/")
        if os.path.isabs(name) or ".." in parts or not name:
            raise build.fail(("files", name), f"file path {name!r} leaves the working directory", "use a relative path")
    rules = tuple(build.rule(r, ("rules", i)) for i, r in enumerate(data.get("rules") or ()))
    models = {name: build.script(raw, ("models", name)) for name, raw in (data.get("models") or {}).items()}
    default = build.script(data["default"], ("default",)) if "default" in data else None
    otherwise = build.step(data["otherwise"], ("otherwise",)) if "otherwise" in data else None

    scripts = [*models.values(), *([default] if default else [])]
    _check_holds(path, [*(r.step for r in rules), *(s for m in scripts for s in (*m.steps, m.otherwise)), otherwise])
    seen_ids: dict[str, _Path] = {}
    all_steps: list[Step] = [r.step for r in rules] + [s for m in models.values() for s in m.steps]
    all_steps += list(default.steps) if default else []
    for step in all_steps:
        for block in step.content:
            tid = block.get("id")
            if tid is not None and block["type"] == "tool_use":
                if tid in seen_ids:
                    raise ScenarioError(
                        f"{path}:{step.line}: {step.where}: tool_use id {tid!r} is also used at "
                        f"{_dotted(seen_ids[tid])} (ids must be unique; omit id to get a generated one)"
                    )
                seen_ids[tid] = (step.where,)

    return Scenario(
        name=data["scenario"],
        model=data["model"],
        path=path,
        doc=data.get("doc") or "",
        fallback_models=tuple(data.get("fallback_models") or ()),
        cli=dict(data.get("cli") or {}),
        files=dict(data.get("files") or {}),
        rules=rules,
        models=models,
        default=default,
        otherwise=otherwise,
        cache_min_tokens=(data.get("prompt_cache") or {}).get("min_tokens"),
    )


def scenario_names() -> list[str]:
    """The names of the scenarios shipped with the package (``queryloop mock-api --list``), sorted."""
    return list(shipped_scenarios())


def resolve_scenario(ref: str | os.PathLike[str]) -> str:
    """The file ``ref`` names: itself when it exists, else the shipped scenario of that name.

    A bare name (no directory part), with or without ``.yaml``, is looked up among the
    scenarios shipped in the installed package (``queryloop.machines``' ``scenarios/``), so
    ``--scenario hello`` works from any directory and any install. A path that exists is
    always read as a path first; anything else is returned unchanged (its read then fails).
    Raises :class:`ScenarioError` for a bare name that is neither a file nor a shipped scenario.
    """
    name = os.fspath(ref)
    if os.path.exists(name) or os.path.dirname(name):
        return name
    shipped = shipped_scenarios()
    stem = name.removesuffix(".yaml").removesuffix(".yml")
    if stem in shipped:
        return str(shipped[stem])
    close = difflib.get_close_matches(stem, list(shipped), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise ScenarioError(
        f"{name}: no such file, nor a shipped scenario ({hint}shipped: {', '.join(shipped)}; "
        "or give the path of a scenario file)"
    )


def load_scenario(path: str | os.PathLike[str]) -> Scenario:
    """Read and validate the scenario file at ``path``, or the shipped scenario it names (:func:`resolve_scenario`)."""
    name = resolve_scenario(path)
    try:
        with open(name, encoding="utf-8") as fh:
            text = fh.read()
    except UnicodeDecodeError as exc:
        raise ScenarioError(
            f"{name}: not UTF-8 text ({exc.reason} at byte {exc.start}) (save the file as UTF-8)"
        ) from None
    except OSError as exc:
        raise ScenarioError(f"{name}: cannot read scenario file: {exc.strerror} (check the path)") from None
    return parse_scenario(text, name)
