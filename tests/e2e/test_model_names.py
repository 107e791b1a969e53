"""Model names through the real CLI: aliases, the variables Claude Code 2.1.235 reads, and each model's max_tokens."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .harness import HANG_GUARD_S, MockApi, cli_env, run_cli

ANSWER = """
schema_version: 1
scenario: any_model
model: mock-primary
default:
  - reply: {content: [{text: "done"}]}
"""

OVERLOADED = """
schema_version: 1
scenario: sonnet_overloaded
model: mock-primary
models:
  claude-sonnet-5:
    - error: {status: 529}
      repeat: 20
default:
  - reply: {content: [{text: "done"}]}
"""

AGENT = """
schema_version: 1
scenario: opus_agent
model: mock-primary
rules:
  - when: {first_user_contains: SUBTASK}
    reply: {content: [{text: "sub done"}]}
default:
  - reply:
      content:
        - tool_use:
            name: Agent
            input: {description: sub, prompt: SUBTASK, subagent_type: rd, run_in_background: false}
otherwise: {reply: {content: [{text: "done"}]}}
"""


def _sent(api: MockApi) -> list[tuple[str | None, int | None]]:
    return [(r.model, r.max_tokens) for r in api.requests]


def test_anthropic_model_and_the_output_variable_choose_the_model_and_its_max_tokens(tmp_path: Path) -> None:
    with MockApi(ANSWER) as api:
        run = run_cli(
            ["-p", "hi"], api=api, cwd=tmp_path, ANTHROPIC_MODEL="haiku", CLAUDE_CODE_MAX_OUTPUT_TOKENS="1000000"
        )
    assert run.returncode == 0, run.stderr
    assert _sent(api) == [("claude-haiku-4-5-20251001", 64_000)]  # lowered to haiku's cap


def test_the_opus_alias_sends_claude_opus_5_at_its_own_max_tokens(tmp_path: Path) -> None:
    with MockApi(ANSWER) as api:
        run = run_cli(["-p", "hi", "--model", "opus"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert _sent(api) == [("claude-opus-5", 64_000)]


def test_a_fallback_alias_runs_on_its_model_at_that_models_max_tokens(tmp_path: Path) -> None:
    with MockApi(OVERLOADED) as api:
        run = run_cli(["-p", "hi", "--model", "sonnet", "--fallback-model", "haiku"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert _sent(api)[-1] == ("claude-haiku-4-5-20251001", 32_000)
    assert set(_sent(api)[:-1]) == {("claude-sonnet-5", 64_000)}


def test_an_agent_files_opus_runs_on_claude_opus_5_at_its_max_tokens(tmp_path: Path) -> None:
    agents = tmp_path / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "rd.md").write_text("---\nname: rd\ndescription: reads\nmodel: opus\n---\nYou read.\n")
    with MockApi(AGENT) as api:
        run = run_cli(["-p", "hi", "--model", "haiku", "--setting-sources", "project"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert ("claude-opus-5", 64_000) in _sent(api), _sent(api)


def test_the_sdks_set_model_takes_an_alias_and_its_max_tokens(tmp_path: Path) -> None:
    lines = [
        {"type": "control_request", "request_id": "m", "request": {"subtype": "set_model", "model": "haiku"}},
        {"type": "user", "message": {"role": "user", "content": "hi"}},
    ]
    flags = ["--input-format", "stream-json", "--output-format", "stream-json", "--verbose", "--model", "opus"]
    with MockApi(ANSWER) as api:
        run = subprocess.run(
            [sys.executable, "-m", "queryloop", *flags],
            input="".join(json.dumps(line) + "\n" for line in lines),
            capture_output=True,
            text=True,
            timeout=HANG_GUARD_S,
            cwd=tmp_path,
            env=cli_env(api, QUERYLOOP_HOME=str(tmp_path / "home")),
        )
    assert run.returncode == 0, run.stderr
    assert _sent(api) == [("claude-haiku-4-5-20251001", 32_000)]
