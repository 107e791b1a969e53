"""queryloop: the benchmark agent of ``tools/bench/agent.py`` in-process, and over HTTP.

In-process: ``MaterialisingBackend`` (every request's body encoded as the HTTP backend
would, then a scripted reply), persistence off — ``tools/bench_loop.py``'s headline.
Over HTTP: ``AnthropicBackend`` (the real SDK, streamed) against the embedded server
in its own process, persistence off. Each run builds its ``AgentRun`` inside the timing;
the machine is loaded once per process, outside it.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from importlib.metadata import version
from pathlib import Path

from contract import PeerAgent

from bench.agent import MaterialisingBackend, bench_options, run_agent

__all__ = ["load_http", "load_inprocess"]


def _scratch_dir() -> Path:
    """An empty working directory for the runs, removed when the process exits."""
    cwd = Path(tempfile.mkdtemp(prefix="bench-peers-"))
    atexit.register(shutil.rmtree, cwd, True)
    return cwd


def _version() -> str:
    return f"queryloop {version('queryloop')}"


def load_inprocess(url: str) -> PeerAgent:
    from queryloop.run.agent import query_loop_program

    query_loop_program()
    cwd = _scratch_dir()

    async def run(turns: int, model: str) -> None:
        await run_agent(bench_options(cwd=cwd, persist=False), MaterialisingBackend(turns), turns, "queryloop")

    return PeerAgent(
        framework="queryloop in-process", version=_version(), run=run, note="materialises every request body"
    )


def load_http(url: str) -> PeerAgent:
    import anthropic

    from queryloop.handlers.request.services.backends import AnthropicBackend
    from queryloop.run.agent import query_loop_program

    query_loop_program()
    cwd = _scratch_dir()
    client = anthropic.AsyncAnthropic(api_key="bench", base_url=url, max_retries=0)

    async def run(turns: int, model: str) -> None:
        options = bench_options(cwd=cwd, model=model, persist=False)
        await run_agent(options, AnthropicBackend(client), turns, "queryloop over HTTP")

    return PeerAgent(framework="queryloop over HTTP", version=_version(), run=run, note="separate-process server")
