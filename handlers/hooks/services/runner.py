"""Hooks: :func:`run_hooks`, every hook matching an event run at once, and the Python hooks' calls.

Commands run under ``/bin/sh -c`` (``process``); their answers fold into one :class:`HookOutcome` (``results``).
The settings block is ``config``'s. What the loop does with the outcome is the machine's.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import time
from collections.abc import Awaitable, Mapping, Sequence
from pathlib import Path

from .config import HOOK_CALLBACK_TIMEOUT_S, HookConfig, HookFunction
from .process import CAPTURE_LIMIT_BYTES, run_command
from .results import HookContribution, HookError, HookOutcome, HookResult, fold_outcome, output_problem

__all__ = ["run_hooks"]


async def _call_function(
    hook: HookFunction, input_data: Mapping[str, object], *, event: str, timeout_s: float
) -> HookContribution:
    """Await one Python hook; what it returns is read as a command's JSON output, what it raises is a hook error."""
    started = time.monotonic()
    label = hook.label

    def ended(*, ok: bool, timed_out: bool = False) -> HookResult:
        duration_ms = int((time.monotonic() - started) * 1000)
        code = 0 if ok else None
        return HookResult(
            command=label, exit_code=code, duration_ms=duration_ms, stdout="", stderr="", timed_out=timed_out
        )

    tool_use_id = input_data.get("tool_use_id")
    try:
        async with asyncio.timeout(timeout_s):
            answer: object = hook.callback(
                dict(input_data), tool_use_id if isinstance(tool_use_id, str) else None, {"signal": None}
            )
            if inspect.isawaitable(answer):
                answer = await answer
    except TimeoutError:
        error = HookError(command=label, message=f"timed out after {timeout_s:g} s; it was cancelled")
        return HookContribution(result=ended(ok=False, timed_out=True), errors=(error,))
    except Exception as exc:
        error = HookError(command=label, message=f"raised {type(exc).__name__}: {exc}")
        return HookContribution(result=ended(ok=False), errors=(error,))
    output, problem = _python_output(answer, event)
    if problem is not None:
        error = HookError(command=label, message=f"returned output that was ignored: {problem}")
        return HookContribution(result=ended(ok=False), errors=(error,))
    return HookContribution(result=ended(ok=True), output=output)


def _python_output(answer: object, event: str) -> tuple[Mapping[str, object], str | None]:
    """A Python hook's answer as a command's JSON output (the SDK's ``continue_`` read as ``continue``), or why not."""
    if answer is None:
        return {}, None
    if not isinstance(answer, Mapping):
        return {}, f"expected a dict, found {type(answer).__name__}"
    if "async_" in answer or "async" in answer:
        return {}, "asynchronous hook output (async_) is not supported; return the answer itself"
    output = {("continue" if key == "continue_" else key): value for key, value in answer.items()}
    return output, output_problem(output, event)


async def run_hooks(
    event: str,
    payload: Mapping[str, object],
    config: HookConfig,
    *,
    cwd: Path | str,
    session_id: str,
    transcript_path: Path | str,
    permission_mode: str,
    timeout_default_s: float = 600,
    env: Mapping[str, str] | None = None,
    output_limit_bytes: int = CAPTURE_LIMIT_BYTES,
) -> HookOutcome:
    """Run every hook of ``config`` matching ``event``/``payload`` in parallel and fold the results.

    Each hook gets on stdin ``session_id, transcript_path, cwd, permission_mode,
    hook_event_name`` plus ``payload`` (``tool_name, tool_input, tool_use_id``,
    ``tool_response``, ``stop_hook_active``, ``prompt``, ...). It runs as ``/bin/sh -c``
    in its own process group with ``CLAUDE_PROJECT_DIR=cwd`` added to ``env`` (default:
    this process's environment) and is killed with its group after its ``timeout``
    (default ``timeout_default_s``). Of its stdout and of its stderr the first
    ``output_limit_bytes`` are kept (a cut is reported as a hook error). A Python hook
    gets the same fields as its ``input_data`` and is cancelled after its timeout
    (default :data:`HOOK_CALLBACK_TIMEOUT_S`). Cancelling this coroutine kills every
    running hook and re-raises. Hook failures never raise: they are ``HookOutcome.errors``.
    """
    hooks = config.commands_for(event, payload)
    if not hooks:
        return HookOutcome(event=event)
    cwd_path = Path(cwd)
    stdin_doc = {
        "session_id": session_id,
        "transcript_path": str(transcript_path),
        "cwd": str(cwd_path),
        "permission_mode": permission_mode,
        "hook_event_name": event,
        **payload,
    }
    stdin = json.dumps(stdin_doc, default=str).encode("utf-8")
    hook_env = _hook_environment(env, cwd_path)
    runs = [
        _call_function(
            hook,
            stdin_doc,
            event=event,
            timeout_s=hook.timeout_s if hook.timeout_s is not None else HOOK_CALLBACK_TIMEOUT_S,
        )
        if isinstance(hook, HookFunction)
        else run_command(
            hook,
            stdin,
            event=event,
            cwd=cwd_path,
            env=hook_env,
            timeout_s=hook.timeout_s if hook.timeout_s is not None else timeout_default_s,
            output_limit_bytes=output_limit_bytes,
        )
        for hook in hooks
    ]
    if len(runs) == 1:  # no task of its own: cancelled, the hook still kills and reaps before this re-raises
        return fold_outcome(event, [await runs[0]])
    return fold_outcome(event, await _gather(runs))


def _hook_environment(env: Mapping[str, str] | None, cwd: Path) -> Mapping[str, str] | Mapping[bytes, bytes]:
    """``env`` (default: this process's environment, as it is now) with ``CLAUDE_PROJECT_DIR`` set to ``cwd``.

    The default comes as the bytes ``os.environ`` keeps (``os.environb``'s), copied at C speed: no entry is
    decoded here and encoded again by ``Popen``, which a hook on every tool call paid for every variable.
    """
    if env is not None:
        return {**env, "CLAUDE_PROJECT_DIR": str(cwd)}
    kept = getattr(os.environ, "_data", None)  # CPython's store behind os.environ and os.environb
    if not (os.supports_bytes_environ and isinstance(kept, dict)):  # elsewhere: the text form, encoded by Popen
        return {**os.environ, "CLAUDE_PROJECT_DIR": str(cwd)}
    return {**kept, b"CLAUDE_PROJECT_DIR": os.fsencode(cwd)}


async def _gather(runs: Sequence[Awaitable[HookContribution]]) -> list[HookContribution]:
    """Every hook's run, in parallel; cancelled, each kills and reaps its hook before this re-raises."""
    tasks = [asyncio.ensure_future(run) for run in runs]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        # Let every task run its kill-and-reap cleanup before propagating.
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
