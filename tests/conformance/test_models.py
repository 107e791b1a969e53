"""Model names and max_tokens beside Claude Code 2.1.235: what each program sends for an alias, an id, a variable.

Each probe runs in both programs against the embedded server (which answers any model), and
compares the (model, max_tokens) of every Messages API request, sorted (a sub-agent's
requests interleave with its parent's differently). ``same``: queryloop sends what Claude
Code sends. By design, with the reason: the reference's value is pinned too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest

from .reference import Observed, Probe, Program, observe

pytestmark = pytest.mark.slow  # two programs per probe

HAIKU, OPUS, SONNET, FABLE = "claude-haiku-4-5-20251001", "claude-opus-5", "claude-sonnet-5", "claude-fable-5"


def _agent_scenario(**extra: Any) -> str:
    """The model starts one sub-agent (its prompt says SUBTASK, which a rule answers), then answers: the parent
    sends three requests (the call, its answer, the answer to the agent's notice), the agent one."""
    call = {"description": "sub", "prompt": "SUBTASK read", "subagent_type": "general-purpose", **extra}
    done = {"reply": {"content": [{"text": "done"}]}}
    return json.dumps(
        {
            "schema_version": 1,
            "scenario": "agent",
            "model": "mock-primary",
            "rules": [{"when": {"first_user_contains": "SUBTASK"}, "reply": {"content": [{"text": "sub done"}]}}],
            "default": [{"reply": {"content": [{"tool_use": {"name": "Agent", "input": call}}]}}],
            "otherwise": done,
        }
    )


OVERLOADED = json.dumps(
    {
        "schema_version": 1,
        "scenario": "overloaded",
        "model": "mock-primary",
        "models": {SONNET: [{"error": {"status": 529}, "repeat": 20}]},
        "default": [{"reply": {"content": [{"text": "done"}]}}],
    }
)
READER = {".claude/agents/rd.md": "---\nname: rd\ndescription: reads\nmodel: {}\n---\nYou read."}


def _reader(model: str) -> dict[str, str]:
    return {path: text.replace("{}", model) for path, text in READER.items()}


@attrs.frozen(kw_only=True)
class Row:
    """A probe and the (model, max_tokens) of its requests in queryloop (``reference``: Claude Code's, if other)."""

    probe: Probe
    sent: tuple[tuple[str, int], ...]
    reference: tuple[tuple[str, int], ...] | None = None
    design: str = ""


def _cli(model: str | None, sent: tuple[str, int], **probe: Any) -> Row:
    return Row(probe=Probe(calls=(), model=model, **probe), sent=(sent,))


ROWS: dict[str, Row] = {
    "--model opus": _cli("opus", (OPUS, 64_000)),
    "--model sonnet": _cli("sonnet", (SONNET, 64_000)),
    "--model haiku": _cli("haiku", (HAIKU, 32_000)),
    "--model fable": _cli("fable", (FABLE, 64_000)),
    "--model opusplan": _cli("opusplan", (SONNET, 64_000)),
    "--model opusplan in plan mode": _cli("opusplan", (OPUS, 64_000), args=("--permission-mode", "plan")),
    "--model OPUS[1m]": _cli("OPUS[1m]", (OPUS, 64_000)),
    "--model best": _cli("best", (OPUS, 64_000)),
    "--model default": _cli("default", (OPUS, 64_000)),
    "no model named": _cli(None, (OPUS, 64_000)),
    "a full id": _cli("claude-opus-4-5", ("claude-opus-4-5", 32_000)),
    "a full id with [1m]": _cli("claude-sonnet-4-5[1m]", ("claude-sonnet-4-5", 32_000)),
    "a retired Opus id": _cli("claude-opus-4-1", (OPUS, 64_000)),
    "a retired Opus id, remap off": _cli(
        "claude-opus-4-1", ("claude-opus-4-1", 32_000), env={"CLAUDE_CODE_DISABLE_LEGACY_MODEL_REMAP": "1"}
    ),
    "an older model's max_tokens": _cli("claude-3-5-haiku-latest", ("claude-3-5-haiku-latest", 8_192)),
    "an unknown model": _cli("mock-primary", ("mock-primary", 32_000)),
    "the settings' model": _cli(None, (HAIKU, 32_000), home_files={".claude/settings.json": {"model": "haiku"}}),
    "ANTHROPIC_MODEL above the settings": _cli(
        None,
        (FABLE, 64_000),
        env={"ANTHROPIC_MODEL": "fable"},
        home_files={".claude/settings.json": {"model": "haiku"}},
    ),
    "--model above ANTHROPIC_MODEL": _cli("sonnet", (SONNET, 64_000), env={"ANTHROPIC_MODEL": "haiku"}),
    "the settings' env above the environment": _cli(
        None,
        (HAIKU, 32_000),
        env={"ANTHROPIC_MODEL": "fable"},
        home_files={".claude/settings.json": {"env": {"ANTHROPIC_MODEL": "haiku"}}},
    ),
    "ANTHROPIC_DEFAULT_OPUS_MODEL": _cli(None, ("my-opus", 32_000), env={"ANTHROPIC_DEFAULT_OPUS_MODEL": "my-opus"}),
    "ANTHROPIC_DEFAULT_SONNET_MODEL": _cli(
        "sonnet", ("claude-sonnet-4-5", 32_000), env={"ANTHROPIC_DEFAULT_SONNET_MODEL": "claude-sonnet-4-5"}
    ),
    "ANTHROPIC_DEFAULT_HAIKU_MODEL": _cli(
        "haiku", ("claude-3-5-haiku-latest", 8_192), env={"ANTHROPIC_DEFAULT_HAIKU_MODEL": "claude-3-5-haiku-latest"}
    ),
    "ANTHROPIC_DEFAULT_FABLE_MODEL": _cli(
        "fable", ("my-fable", 32_000), env={"ANTHROPIC_DEFAULT_FABLE_MODEL": "my-fable"}
    ),
    # it names the model of Claude Code's side requests (none in a -p run), never the run's
    "ANTHROPIC_SMALL_FAST_MODEL": _cli(None, (OPUS, 64_000), env={"ANTHROPIC_SMALL_FAST_MODEL": "my-small"}),
    "CLAUDE_CODE_MAX_OUTPUT_TOKENS": _cli("opus", (OPUS, 1_000), env={"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "1000"}),
    "CLAUDE_CODE_MAX_OUTPUT_TOKENS over the cap": _cli(
        "haiku", (HAIKU, 64_000), env={"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "1000000"}
    ),
    "CLAUDE_CODE_MAX_OUTPUT_TOKENS not a number": _cli(
        "opus", (OPUS, 64_000), env={"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "lots"}
    ),
    "CLAUDE_CODE_MAX_OUTPUT_TOKENS a number and more": _cli(
        "opus", (OPUS, 12), env={"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "12abc"}
    ),
    "an agent file's model: opus": Row(
        probe=Probe(calls=(), model="haiku", scenario=_agent_scenario(subagent_type="rd"), files=_reader("opus")),
        sent=((HAIKU, 32_000),) * 3 + ((OPUS, 64_000),),
    ),
    "an agent file's model: inherit": Row(
        probe=Probe(calls=(), model="haiku", scenario=_agent_scenario(subagent_type="rd"), files=_reader("inherit")),
        sent=((HAIKU, 32_000),) * 4,
    ),
    "an agent file's retired id": Row(
        probe=Probe(
            calls=(), model="haiku", scenario=_agent_scenario(subagent_type="rd"), files=_reader("claude-opus-4-1")
        ),
        sent=((HAIKU, 32_000),) * 3 + ((OPUS, 64_000),),
    ),
    "an Agent call's model": Row(
        probe=Probe(calls=(), model="haiku", scenario=_agent_scenario(model="fable")),
        sent=((HAIKU, 32_000),) * 3 + ((FABLE, 64_000),),
    ),
    "an Agent call's model that is no family": Row(  # refused: no sub-agent runs
        probe=Probe(calls=(), model="haiku", scenario=_agent_scenario(model="opusplan")),
        sent=((HAIKU, 32_000), (HAIKU, 32_000)),
    ),
    "CLAUDE_CODE_SUBAGENT_MODEL above the call's": Row(
        probe=Probe(
            calls=(), model="haiku", scenario=_agent_scenario(model="opus"), env={"CLAUDE_CODE_SUBAGENT_MODEL": "fable"}
        ),
        sent=((HAIKU, 32_000),) * 3 + ((FABLE, 64_000),),
    ),
    "a sub-agent's CLAUDE_CODE_MAX_OUTPUT_TOKENS": Row(
        probe=Probe(
            calls=(),
            model="opus",
            scenario=_agent_scenario(model="haiku"),
            env={"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "50000"},
        ),
        sent=((HAIKU, 50_000),) + ((OPUS, 50_000),) * 3,
    ),
    "--fallback-model with an alias": Row(
        probe=Probe(
            calls=(),
            model="sonnet",
            scenario=OVERLOADED,
            args=("--fallback-model", "haiku"),
            env={"CLAUDE_CODE_MAX_RETRIES": "3"},
        ),
        sent=((HAIKU, 32_000), (SONNET, 64_000), (SONNET, 64_000), (SONNET, 64_000)),
    ),
}


def _sent(observed: Observed) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((r.model or "", r.max_tokens or 0) for r in observed.requests))


def test_model_usage_reports_each_models_own_default_max_tokens_in_both_programs(tmp_path: Path) -> None:
    probe = Probe(
        calls=(),
        model="opus",
        scenario=_agent_scenario(model="haiku"),
        env={"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "1000"},
    )
    seen = []
    programs: tuple[Program, ...] = ("queryloop", "claude")
    for who in programs:
        (tmp_path / who).mkdir()
        usage = observe(who, probe, tmp_path / who).result["modelUsage"]
        seen.append({model: entry["maxOutputTokens"] for model, entry in usage.items()})
    assert seen[0] == seen[1] == {OPUS: 64_000, HAIKU: 32_000}


@pytest.mark.parametrize("name", list(ROWS))
def test_each_model_probe_sends_the_same_model_and_max_tokens_in_both_programs(name: str, tmp_path: Path) -> None:
    row = ROWS[name]
    for who in ("queryloop", "claude"):
        (tmp_path / who).mkdir()  # a probe with no files: its folder is made here
    ours = observe("queryloop", row.probe, tmp_path / "queryloop")
    theirs = observe("claude", row.probe, tmp_path / "claude")
    assert _sent(ours) == tuple(sorted(row.sent)), ours.stderr
    expected = tuple(sorted(row.sent if row.reference is None else row.reference))
    assert _sent(theirs) == expected, f"Claude Code 2.1.235 ({row.design or 'same'}): {theirs.stderr}"
