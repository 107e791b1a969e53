"""The run state is the whole run: a run rebuilt from its JSON snapshot after every step ends as one never stopped.

Both runs play the seed's failure chain (three 529s → fallback model → Edit → a
side-effecting Bash call → answer) through the real ``anthropic`` SDK against the
embedded server over loopback, with the scenario's permission rules at the gate.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import anthropic

from queryloop.handlers.request import AnthropicBackend
from queryloop.mockapi import MockServer, load_scenario
from queryloop.run.agent import AgentRun, query_loop_program, restore_run, snapshot_run
from queryloop.run.config import AgentOptions, Limits, PermissionSettings, RequestSettings, SessionSettings
from queryloop.run.settings import load_settings

ROOT = Path(__file__).resolve().parent.parent.parent
SCENARIO = ROOT / "machines" / "scenarios" / "fallback_chain.yaml"
VOLATILE = ("duration_ms", "duration_api_ms", "ttft_ms", "ttft_stream_ms", "time_to_request_ms", "uuid")


def _options(cwd: Path) -> AgentOptions:
    scenario = load_scenario(SCENARIO)
    for name, content in scenario.files.items():
        (cwd / name).write_text(content, encoding="utf-8")
    settings = load_settings(cwd=cwd, home=cwd)
    rules = settings.permissions.to_rules(cwd=cwd, allowed_tools=scenario.cli["allowed_tools"])
    return AgentOptions(
        prompt=scenario.cli["prompt"],
        cwd=cwd,
        request=RequestSettings(
            model=scenario.model, fallback_models=scenario.fallback_models, retry_base_delay_s=0.001
        ),
        limits=Limits(max_turns=scenario.cli["max_turns"]),
        permissions=PermissionSettings(mode=scenario.cli["permission_mode"], rules=rules),
        session=SessionSettings(session_id="00000000-0000-4000-8000-000000000000"),
    )


def _numbered_ids(messages: list[dict[str, Any]]) -> str:
    """The transcript with the server's random tool_use ids numbered in order of appearance."""
    text = json.dumps(messages)
    for n, tool_id in enumerate(dict.fromkeys(re.findall(r'"(toolu_[A-Za-z0-9_]+)"', text))):
        text = text.replace(tool_id, f"toolu_{n}")
    return text


async def _play(cwd: Path, *, rebuild_every_step: bool) -> tuple[dict[str, Any], str, int, list[str]]:
    server = MockServer(load_scenario(SCENARIO))
    await server.start()
    client = anthropic.AsyncAnthropic(api_key="test-key", base_url=server.url, max_retries=0)
    options = _options(cwd)
    program = query_loop_program()
    reasons: list[str] = []
    try:
        run = AgentRun(options, AnthropicBackend(client))
        while not run.runner.done:
            items = await run.runner.step_once()
            reasons.append(items[-1].reason)
            if rebuild_every_step:
                text = json.dumps(snapshot_run(program, run.runner.final))  # plain JSON, nothing else
                state = restore_run(program, json.loads(text))
                assert state == run.runner.final, f"the snapshot after {reasons[-1]!r} lost part of the run"
                run = AgentRun(options, AnthropicBackend(client), state=state)  # fresh services, nothing carried over
        result = {k: v for k, v in run.result().items() if k not in VOLATILE}
        return result, _numbered_ids(run.data.messages.to_list()), len(server.requests), reasons
    finally:
        await client.close()
        await server.stop()


def test_a_run_rebuilt_from_its_snapshot_after_every_step_ends_like_an_uninterrupted_one(tmp_path: Path) -> None:
    (tmp_path / "straight").mkdir()
    (tmp_path / "rebuilt").mkdir()
    straight = asyncio.run(_play(tmp_path / "straight", rebuild_every_step=False))
    rebuilt = asyncio.run(_play(tmp_path / "rebuilt", rebuild_every_step=True))
    assert straight[3][:5] == [
        "session_started",
        "prompt_submitted",
        "tool_catalog_current",
        "context_ok",
        "overloaded_backoff",
    ]
    assert "model_fallback" in straight[3] and straight[3][-1] == "stop_hooks_passed"
    assert straight[0]["terminal_reason"] == "completed" and straight[0]["num_turns"] == 3
    assert rebuilt == straight
    for name in ("checkpoint.txt", "side_effect.log"):
        assert (tmp_path / "rebuilt" / name).read_text() == (tmp_path / "straight" / name).read_text()
