"""A bare ``anthropic`` SDK loop over HTTP (``tools/bench/bare_sdk.py``) against the embedded server's process."""

from __future__ import annotations

from importlib.metadata import version

from contract import PeerAgent

from bench.bare_sdk import bare_sdk_loop

__all__ = ["load"]


def load(url: str) -> PeerAgent:
    import anthropic

    client = anthropic.AsyncAnthropic(api_key="bench", base_url=url, max_retries=0)

    async def run(turns: int, model: str) -> None:
        await bare_sdk_loop(client, model, turns)

    return PeerAgent(
        framework="bare anthropic SDK over HTTP",
        version=f"anthropic {version('anthropic')}",
        run=run,
        note="separate-process server",
    )
