"""Faults found in use, one test each: markup in data, tools that hang or lose files, symlink loops,
requests without deadlines, unbounded memory.

Tools run on a real temporary filesystem (FIFOs, symlink loops) and, where a fault could
freeze or kill the process, in a child Python process that the test can time out or kill.
Memory is measured with ``tracemalloc`` (Python allocations), never RSS.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from queryloop.frontends.console import renderer_for
from queryloop.handlers.hooks.services.config import parse_hook_config
from queryloop.handlers.hooks.services.runner import run_hooks
from queryloop.handlers.messages import ToolCall, ToolResultBlock
from queryloop.handlers.outcome import Notice
from queryloop.handlers.request import ApiRetry
from queryloop.handlers.request.services.attempt import ModelFailure, ModelReply, ModelRequest
from queryloop.handlers.request.services.backends import AnthropicBackend, ModelCall
from queryloop.handlers.request.services.client import send_request
from queryloop.handlers.tools import (
    ToolContext,
    ToolOutput,
    ToolRegistry,
    ToolResultPublished,
    ToolSpec,
    default_registry,
    run_tool_calls,
)
from queryloop.mockapi.scenario import parse_scenario
from queryloop.mockapi.server import MockServer
from queryloop.run.agent import AgentRun
from queryloop.run.config import AgentOptions, RequestSettings
from queryloop.run.data import AgentData
from queryloop.testing import ScriptedBackend, scripted_reply

ROOT = Path(__file__).resolve().parent.parent.parent

# ---------------------------------------------------------------------------- helpers


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    work = tmp_path / "work"
    work.mkdir()
    return ToolContext(cwd=work, tool_timeout_s=5.0)


def call(
    ctx: ToolContext, name: str, tool_input: dict[str, Any], registry: ToolRegistry | None = None
) -> ToolResultBlock:
    (block,) = asyncio.run(
        run_tool_calls([ToolCall(id="toolu_1", name=name, input=tool_input)], registry or default_registry(), ctx)
    )
    return block


def ok(block: ToolResultBlock) -> str:
    assert block["is_error"] is False, block["content"]
    return block["content"]


def err(block: ToolResultBlock) -> str:
    assert block["is_error"] is True, block["content"]
    return block["content"]


def _release(path: Path) -> None:
    """Let a tool blocked opening the FIFO ``path`` go (a reader sees end-of-file, a writer a broken pipe)."""
    with contextlib.suppress(OSError):  # ENXIO: nobody is blocked reading it, as it should be
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))  # and a writer blocked on it


@contextlib.contextmanager
def fifo(path: Path, *, watchdog_s: float = 5.0) -> Iterator[Path]:
    """A FIFO at ``path``; a tool that blocks on it is released after ``watchdog_s`` (the test then fails)."""
    os.mkfifo(path)
    watchdog = threading.Timer(watchdog_s, _release, (path,))
    watchdog.start()
    try:
        yield path
    finally:
        watchdog.cancel()
        _release(path)


def python(script: str, *, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a fresh interpreter (the test survives a child that freezes)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def peak_allocated(fn: Any) -> tuple[Any, int]:
    """``fn()``'s result and the peak of Python allocations while it ran, in bytes."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        result = fn()
        return result, tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def _data() -> AgentData:
    run = AgentRun(
        AgentOptions(prompt="hi", request=RequestSettings(model="m")), ScriptedBackend(lambda c: scripted_reply([]))
    )
    return run.data


# ------------------------------------------------------------------ 6. data is never markup


MARKUP = "[/x] a [bold]closing[/bold] tag, [/] and [link=x]"


def test_text_output_prints_tool_output_hook_notices_and_api_errors_containing_markup_as_they_are() -> None:
    out, errors = io.StringIO(), io.StringIO()
    renderer = renderer_for("text", session_id="s", verbose=True, stdout=out, stderr=errors)
    result: dict[str, Any] = {"tool_use_id": "t1", "type": "tool_result", "content": MARKUP, "is_error": False}
    renderer.observe(ToolResultPublished(call=ToolCall(id="t1", name="Read", input={}), result=result))
    renderer.observe(Notice(f"PreToolUse hook error (echo [/bold]): {MARKUP}"))
    renderer.observe(ApiRetry(attempt=1, max_retries=3, retry_delay_ms=5, error_status=500, error="[/red] oops"))
    final = {
        "is_error": True,
        "terminal_reason": "api_error",
        "result": f"API Error: [/bold] {MARKUP}",
        "num_turns": 1,
        "duration_ms": 1,
        "total_cost_usd": None,
    }
    renderer.finish(final, _data())
    shown = errors.getvalue()
    assert MARKUP in shown
    assert "echo [/bold]" in shown
    assert f"API Error: [/bold] {MARKUP}" in shown


def test_text_output_leaves_emoji_codes_and_brackets_in_transition_lines_alone() -> None:
    errors = io.StringIO()
    renderer = renderer_for("text", session_id="s", stdout=io.StringIO(), stderr=errors)
    result: dict[str, Any] = {"tool_use_id": "t1", "type": "tool_result", "content": ":thumbs_up: [b]x", "is_error": 1}
    renderer.observe(ToolResultPublished(call=ToolCall(id="t1", name="Grep", input={}), result=result))
    assert ":thumbs_up: [b]x" in errors.getvalue()


# --------------------------------------------------------- 15. hook errors in stream-json


def test_stream_json_reports_hook_errors_as_system_lines() -> None:
    out = io.StringIO()
    renderer = renderer_for("stream-json", session_id="s", stdout=out, stderr=io.StringIO())
    renderer.observe(Notice("PreToolUse hook error (./check.sh): exited with code 1: no such file"))
    renderer.observe(Notice("fell back to model b"))  # other notices stay verbose-text only
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines == [
        {
            "type": "system",
            "subtype": "hook_error",
            "hook_event_name": "PreToolUse",
            "error": "(./check.sh): exited with code 1: no such file",
            "session_id": "s",
            "uuid": lines[0]["uuid"],
        }
    ]


# ---------------------------------------------------------------- 8. tools under a deadline


def test_read_of_a_fifo_is_a_tool_error_and_does_not_block(ctx: ToolContext) -> None:
    with fifo(ctx.cwd / "pipe"):
        message = err(call(ctx, "Read", {"file_path": "pipe"}))  # a Read that opened it would block, not say this
    assert "pipe" in message and "FIFO" in message and "regular file" in message


def test_grep_and_glob_skip_fifos_sockets_and_other_non_regular_files(ctx: ToolContext) -> None:
    (ctx.cwd / "notes.txt").write_text("needle here\n")
    (ctx.cwd / "sub").mkdir()
    with fifo(ctx.cwd / "sub" / "pipe.txt"):
        assert "notes.txt" in ok(call(ctx, "Grep", {"pattern": "needle"}))
        assert ok(call(ctx, "Glob", {"pattern": "**/*.txt"})).splitlines() == ["notes.txt"]
        assert "FIFO" in err(call(ctx, "Grep", {"pattern": "needle", "path": "sub/pipe.txt"}))


def test_write_and_edit_refuse_a_fifo(ctx: ToolContext) -> None:
    with fifo(ctx.cwd / "pipe"):
        assert "FIFO" in err(call(ctx, "Write", {"file_path": "pipe", "content": "x"}))
        assert "FIFO" in err(call(ctx, "Edit", {"file_path": "pipe", "old_string": "a", "new_string": "b"}))
        assert stat.S_ISFIFO(os.lstat(ctx.cwd / "pipe").st_mode)


def test_a_tool_that_overruns_the_deadline_becomes_an_error_result(tmp_path: Path) -> None:
    async def sleepy(tool_input: Any, ctx: ToolContext) -> ToolOutput:
        await asyncio.sleep(30)
        return ToolOutput(content="never")

    spec = ToolSpec(
        name="Sleepy",
        description="sleeps",
        input_schema={"type": "object"},
        concurrency_safe=True,
        read_only=True,
        idempotent=True,
        run=sleepy,
    )
    ctx = ToolContext(cwd=tmp_path, tool_timeout_s=0.2)
    message = err(call(ctx, "Sleepy", {}, ToolRegistry(tools=[spec])))  # run to its end, it would say "never"
    assert message == "Sleepy did not finish within 0.2 s and was stopped"


def test_the_tool_deadline_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="tool_timeout_s"):
        ToolContext(cwd=tmp_path, tool_timeout_s=0)


def test_bash_keeps_its_own_longer_timeout_under_the_tool_deadline(tmp_path: Path) -> None:
    ctx = ToolContext(cwd=tmp_path, tool_timeout_s=0.2)
    assert ok(call(ctx, "Bash", {"command": "sleep 0.6; echo slept", "timeout": 5000})).strip() == "slept"


def test_a_catastrophic_grep_pattern_is_stopped_at_the_deadline_and_the_loop_stays_responsive(tmp_path: Path) -> None:
    (tmp_path / "victim.txt").write_text("a" * 64 + "!\n")
    script = f"""
        import asyncio, time
        from queryloop.handlers.messages import ToolCall
        from queryloop.handlers.tools import ToolContext, default_registry, run_tool_calls

        async def main():
            ctx = ToolContext(cwd={str(tmp_path)!r}, tool_timeout_s=1.0)
            calls = [ToolCall(id="t", name="Grep", input={{"pattern": "(a+)+$", "output_mode": "content"}})]
            search = asyncio.create_task(run_tool_calls(calls, default_registry(), ctx))
            # A timer due before the search's 1 s deadline fires first on a loop that is free, however slow
            # the machine: it finds the search still running. A loop the pattern froze would never get to it.
            await asyncio.sleep(0.05)
            print("searching" if not search.done() else "done already", end="|")
            (block,) = await search
            print(block["is_error"], block["content"], sep="|")

        asyncio.run(main())
    """
    try:
        proc = python(script, timeout=300)  # a guard against a hang only: the deadline's event decides
    except subprocess.TimeoutExpired:
        pytest.fail("the catastrophic pattern froze the process")
    assert proc.returncode == 0, proc.stderr
    during, is_error, content = proc.stdout.strip().split("|", 2)
    assert during == "searching", "the event loop ran a timer while the pattern was searched"
    assert is_error == "True" and "did not finish within 1 s" in content


def test_cancelling_a_grep_stops_it_at_once(tmp_path: Path) -> None:
    (tmp_path / "victim.txt").write_text("a" * 64 + "!\n")
    script = f"""
        import asyncio, os
        from pathlib import Path
        from queryloop.handlers.messages import ToolCall
        from queryloop.handlers.tools import ToolContext, default_registry, run_tool_calls

        def workers():
            mine = str(os.getpid())
            found = []
            for entry in Path("/proc").iterdir():
                try:
                    fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                except (OSError, IndexError):
                    continue
                if fields[1] == mine and fields[0] != "Z":
                    found.append(entry.name)
            return found

        async def main():
            ctx = ToolContext(cwd={str(tmp_path)!r}, tool_timeout_s=3600)
            calls = [ToolCall(id="t", name="Grep", input={{"pattern": "(a+)+$"}})]
            task = asyncio.create_task(run_tool_calls(calls, default_registry(), ctx))
            while not workers():  # the search's worker process has started: the event the cancel waits for
                await asyncio.sleep(0.01)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                print("cancelled", len(workers()))

        asyncio.run(main())
    """
    try:
        proc = python(script, timeout=300)  # a hang's bound: the deadline is an hour, only the cancel stops it
    except subprocess.TimeoutExpired:
        pytest.fail("the cancelled search went on")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["cancelled", "0"], "the worker was killed and reaped when the cancel returned"


# ------------------------------------------------------------------ 9. atomic Write and Edit


def test_a_write_killed_midway_leaves_the_old_file_whole(tmp_path: Path) -> None:
    target = tmp_path / "data.txt"
    old = "old line\n" * 1000
    target.write_text(old)
    script = f"""
        import asyncio, sys
        from queryloop.handlers.messages import ToolCall
        from queryloop.handlers.tools import ToolContext, default_registry, run_tool_calls

        content = "new line\\n" * 8_000_000
        ctx = ToolContext(cwd={str(tmp_path)!r})
        print("ready", flush=True)
        asyncio.run(run_tool_calls(
            [ToolCall(id="t", name="Write", input={{"file_path": "data.txt", "content": content}})],
            default_registry(), ctx))
        print("done", flush=True)
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        original = os.stat(target)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # kill -9 at the first sign of writing
            now = os.stat(target)
            if (now.st_size, now.st_mtime_ns, now.st_ino) != (
                original.st_size,
                original.st_mtime_ns,
                original.st_ino,
            ) or any(p.name != "data.txt" for p in tmp_path.iterdir()):
                break
            time.sleep(0.001)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    content = target.read_text()
    assert content in (old, "new line\n" * 8_000_000), f"a torn file of {len(content)} characters"


def test_write_and_edit_keep_the_file_mode(ctx: ToolContext) -> None:
    target = ctx.cwd / "run.sh"
    target.write_text("echo one\n")
    target.chmod(0o751)
    ok(call(ctx, "Write", {"file_path": "run.sh", "content": "echo two\n"}))
    assert stat.S_IMODE(target.stat().st_mode) == 0o751
    ok(call(ctx, "Edit", {"file_path": "run.sh", "old_string": "two", "new_string": "three"}))
    assert stat.S_IMODE(target.stat().st_mode) == 0o751 and target.read_text() == "echo three\n"


def test_a_new_file_gets_the_usual_mode_under_the_umask(ctx: ToolContext) -> None:
    old = os.umask(0o027)
    try:
        ok(call(ctx, "Write", {"file_path": "new.txt", "content": "x"}))
    finally:
        os.umask(old)
    assert stat.S_IMODE((ctx.cwd / "new.txt").stat().st_mode) == 0o640


def test_writing_through_a_symlink_inside_cwd_replaces_the_target_and_keeps_the_link(ctx: ToolContext) -> None:
    (ctx.cwd / "real.txt").write_text("before\n")
    (ctx.cwd / "link.txt").symlink_to("real.txt")
    ok(call(ctx, "Write", {"file_path": "link.txt", "content": "after\n"}))
    assert (ctx.cwd / "link.txt").is_symlink() and (ctx.cwd / "real.txt").read_text() == "after\n"
    assert sorted(p.name for p in ctx.cwd.iterdir()) == ["link.txt", "real.txt"]


def test_a_failed_write_or_edit_leaves_the_file_and_no_temporary_file(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = ctx.cwd / "keep.txt"
    target.write_text("precious\n")

    def broken_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    assert "No space left on device" in err(call(ctx, "Write", {"file_path": "keep.txt", "content": "new\n"}))
    assert "No space left" in err(call(ctx, "Edit", {"file_path": "keep.txt", "old_string": "pre", "new_string": "x"}))
    assert target.read_text() == "precious\n"
    assert [p.name for p in ctx.cwd.iterdir()] == ["keep.txt"]


# ------------------------------------------------------------------------ 10. symlink loops


def _loops(cwd: Path) -> None:
    (cwd / "self").symlink_to("self")
    (cwd / "a").symlink_to("b")
    (cwd / "b").symlink_to("a")
    (cwd / "dir").mkdir()
    (cwd / "dir" / "up").symlink_to("..")
    (cwd / "dir" / "real.txt").write_text("needle\n")


def test_a_symlink_loop_in_the_tree_is_skipped_by_glob_and_grep(ctx: ToolContext) -> None:
    _loops(ctx.cwd)
    assert ok(call(ctx, "Glob", {"pattern": "**/*"})).splitlines() == ["dir/real.txt"]
    assert ok(call(ctx, "Grep", {"pattern": "needle"})).splitlines() == ["Found 1 files", "dir/real.txt"]
    assert ok(call(ctx, "Grep", {"pattern": "needle", "glob": "*"})).splitlines()[1:] == ["dir/real.txt"]


@pytest.mark.parametrize(
    ("name", "tool_input"),
    [
        ("Read", {"file_path": "self"}),
        ("Write", {"file_path": "a", "content": "x"}),
        ("Edit", {"file_path": "b", "old_string": "x", "new_string": "y"}),
        ("Grep", {"pattern": "x", "path": "self"}),
        ("Glob", {"pattern": "*", "path": "a"}),
    ],
)
def test_a_tool_aimed_at_a_symlink_loop_reports_the_loop_as_a_tool_error(
    ctx: ToolContext, name: str, tool_input: dict[str, Any]
) -> None:
    _loops(ctx.cwd)
    message = err(call(ctx, name, tool_input))
    assert "symlink loop" in message and "RuntimeError" not in message, message


# ------------------------------------------------------------------ 11. request deadlines


def _send(scenario_yaml: str, req: ModelRequest) -> ModelReply | ModelFailure:
    async def main() -> ModelReply | ModelFailure:
        async with MockServer(parse_scenario(scenario_yaml)) as server:
            client = anthropic.AsyncAnthropic(api_key="x", base_url=server.url, max_retries=0)
            try:
                return await send_request(client, req)
            finally:
                await client.close()

    return asyncio.run(main())


def _one_step(step: str) -> str:
    return "schema_version: 1\nscenario: t\nmodel: m\nmodels:\n  m:\n    - " + step + "\n"


def _request(**overrides: Any) -> ModelRequest:
    fields: dict[str, Any] = {
        "model": "m",
        "messages": ({"role": "user", "content": "hi"},),
        "system": None,
        "tools": (),
        "max_tokens": 64,
        "idle_timeout_s": 90.0,
    }
    return ModelRequest(**{**fields, **overrides})


def test_a_non_streaming_request_honours_the_idle_timeout() -> None:
    outcome = _send(
        _one_step('reply: {content: [{text: "late"}]}\n      delay_ms: 20000'),
        _request(stream=False, idle_timeout_s=0.3),
    )
    assert isinstance(outcome, ModelFailure) and outcome.kind == "retryable", outcome
    assert outcome.error_type == "timeout_error"  # the reply, 20 s late, would have been a success


def test_a_streamed_request_past_its_deadline_is_a_retryable_timeout() -> None:
    outcome = _send(
        _one_step('reply: {content: [{text: "a"}, {text: "b"}]}\n      stall: {after_block: 1, seconds: 20}'),
        _request(idle_timeout_s=10, deadline_s=0.5),
    )
    assert isinstance(outcome, ModelFailure) and outcome.kind == "retryable", outcome
    assert outcome.error_type == "timeout_error" and "deadline of 0.5 s" in outcome.message
    assert outcome.log.status == 200 and outcome.log.request_id is not None


def test_a_non_streaming_request_past_its_deadline_is_a_retryable_timeout() -> None:
    outcome = _send(
        _one_step('reply: {content: [{text: "late"}]}\n      delay_ms: 20000'),
        _request(stream=False, idle_timeout_s=10, deadline_s=0.4),
    )
    assert isinstance(outcome, ModelFailure) and outcome.kind == "retryable", outcome
    assert "deadline of 0.4 s" in outcome.message  # not the idle timeout's, nor the late reply


def test_the_run_option_gives_every_model_call_the_request_deadline() -> None:
    seen: list[ModelCall] = []

    class Recording(AnthropicBackend):
        def __init__(self) -> None:
            pass

        async def send(self, call: ModelCall, on_text: Any) -> ModelReply | ModelFailure:
            seen.append(call)
            return scripted_reply([{"type": "text", "text": "ok"}], call=call)

    run = AgentRun(AgentOptions(prompt="hi", request=RequestSettings(model="m", request_timeout_s=7.5)), Recording())

    async def drive() -> None:
        async for _ in run.events():
            pass

    asyncio.run(drive())
    assert [c.deadline_s for c in seen] == [7.5]
    assert run.result()["is_error"] is False


# ------------------------------------------------------------------------------ 12. memory


def test_hook_output_is_read_with_a_cap_and_the_outcome_says_so(tmp_path: Path) -> None:
    size = 8_000_000
    config = parse_hook_config(
        {"Stop": [{"hooks": [{"type": "command", "command": f"head -c {size} /dev/zero | tr '\\0' x; exit 1"}]}]}
    )

    def run() -> Any:
        return asyncio.run(
            run_hooks(
                "Stop",
                {},
                config,
                cwd=tmp_path,
                session_id="s",
                transcript_path="t",
                permission_mode="default",
                output_limit_bytes=64_000,
            )
        )

    outcome, peak = peak_allocated(run)
    assert peak < size / 8, f"peak {peak} bytes for {size} bytes of output"
    (error,) = outcome.errors
    assert "exited with code 1" in error.message
    assert f"stdout was cut at 64000 bytes; {size - 64_000} more bytes were discarded" in error.message
    assert len(outcome.results[0].stdout) < 11_000


def test_hook_output_is_cut_at_1_mib_by_default(tmp_path: Path) -> None:
    config = parse_hook_config({"Stop": [{"hooks": [{"type": "command", "command": "head -c 1100000 /dev/zero"}]}]})
    outcome = asyncio.run(
        run_hooks("Stop", {}, config, cwd=tmp_path, session_id="s", transcript_path="t", permission_mode="default")
    )
    (error,) = outcome.errors
    assert error.message == f"stdout was cut at {1 << 20} bytes; {1_100_000 - (1 << 20)} more bytes were discarded"


def test_read_of_one_huge_line_stops_at_the_output_limit_without_holding_the_line(ctx: ToolContext) -> None:
    size = 20_000_000
    with open(ctx.cwd / "minified.js", "w") as out:
        for _ in range(size // 100_000):
            out.write("x" * 100_000)
        out.write("\nsecond line\n")
    block, peak = peak_allocated(lambda: call(ctx, "Read", {"file_path": "minified.js"}))
    text = ok(block)
    assert peak < size / 8, f"peak {peak} bytes for a {size}-character line"
    assert text.startswith("1\txxx") and "line cut at 2000 characters" in text
    assert "\n2\tsecond line" in text


def test_read_of_many_lines_stops_at_the_output_limit(tmp_path: Path) -> None:
    ctx = ToolContext(cwd=tmp_path, max_output_chars=2000)
    (tmp_path / "long.txt").write_text("".join(f"line {i}\n" for i in range(1, 200_001)))
    block, peak = peak_allocated(lambda: call(ctx, "Read", {"file_path": "long.txt", "offset": 100_000}))
    assert ok(block).startswith("100000\tline 100000\n") and "offset=" in ok(block)
    assert peak < 1_000_000


def test_the_embedded_server_keeps_a_bounded_log_of_the_most_recent_requests() -> None:
    scenario = parse_scenario(_one_step('reply: {content: [{text: "ok"}]}\n      repeat: 1000'))
    big = "y" * 100_000

    async def main() -> tuple[list[str], list[str], int]:
        async with MockServer(scenario, max_recorded=5) as server:
            client = anthropic.AsyncAnthropic(api_key="x", base_url=server.url, max_retries=0)
            try:
                ids = []
                tracemalloc.start()
                for n in range(40):
                    if n == 10:  # the log is full by now: from here on it may not grow
                        full = tracemalloc.get_traced_memory()[0]
                    out = await send_request(client, _request(messages=({"role": "user", "content": big},)))
                    assert isinstance(out, ModelReply)
                    ids.append(str(out.request_id))
                grown = tracemalloc.get_traced_memory()[0] - full
                tracemalloc.stop()
                return ids, [r.request_id for r in server.requests], grown
            finally:
                await client.close()

    ids, kept, grown = asyncio.run(main())
    assert kept == ids[-5:]
    # Thirty more requests of 100 kB each: a log that kept them would grow by megabytes.
    assert grown < 2 * len(big), f"{grown} bytes more after 30 further requests of {len(big)} characters"


def test_the_server_log_cap_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_recorded"):
        MockServer(parse_scenario(_one_step('reply: {content: [{text: "ok"}]}')), max_recorded=0)
