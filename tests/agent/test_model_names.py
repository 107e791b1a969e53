"""Model names and max_tokens resolved as Claude Code 2.1.235 resolves them (tests/conformance/test_models.py
runs both programs side by side)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from queryloop.handlers.agents.services.definitions import BUILT_IN_AGENTS, agents_from_json
from queryloop.handlers.request.services.model_names import max_output_tokens, resolve_model
from queryloop.handlers.request.services.pricing import LONG_CONTEXT_BETA, model_info, wire_model
from queryloop.run.config import AskedRequest, ConfigSources, resolve_config


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("opus", "claude-opus-5"),
        ("sonnet", "claude-sonnet-5"),
        ("haiku", "claude-haiku-4-5-20251001"),
        ("fable", "claude-fable-5"),
        ("OPUS", "claude-opus-5"),
        ("opus[1m]", "claude-opus-5"),
        ("best", "claude-opus-5"),
        ("default", "claude-opus-5"),
        ("opusplan", "claude-sonnet-5"),
        ("claude-opus-4-1", "claude-opus-5"),
        ("claude-opus-4-20250514", "claude-opus-5"),
        ("claude-opus-4-5", "claude-opus-4-5"),
        ("claude-sonnet-4-5[1m]", "claude-sonnet-4-5"),
        ("sonnet[2m]", "sonnet"),
        ("my-model", "my-model"),
    ],
)
def test_each_alias_and_id_resolves_to_the_model_claude_code_sends(name: str, model: str) -> None:
    assert wire_model(resolve_model(name, {}))[0] == model


@pytest.mark.parametrize("name", ["opus[1m]", "SONNET[1M]", "claude-sonnet-4-5[1m]"])
def test_a_1m_model_keeps_its_suffix_and_is_sent_with_the_long_context_beta(name: str) -> None:
    model = resolve_model(name, {})
    assert model.endswith("[1m]")
    assert wire_model(model)[1] == (LONG_CONTEXT_BETA,)
    info = model_info(model)
    assert info is not None and info.context_window == 1_000_000


def test_opusplan_is_opus_in_plan_mode() -> None:
    assert resolve_model("opusplan", {}, plan=True) == "claude-opus-5"


def test_a_family_variable_names_its_aliases_model_verbatim() -> None:
    env = {"ANTHROPIC_DEFAULT_OPUS_MODEL": "haiku", "ANTHROPIC_DEFAULT_FABLE_MODEL": "my-fable"}
    assert resolve_model("opus", env) == "haiku"
    assert resolve_model("fable", env) == "my-fable"
    assert resolve_model("claude-opus-4-1", env) == "haiku"  # a retired id runs on the opus alias's model


@pytest.mark.parametrize(("value", "remapped"), [("1", False), ("true", False), ("0", True), ("", True)])
def test_the_legacy_remap_is_off_only_when_its_variable_is_true(value: str, remapped: bool) -> None:
    model = resolve_model("claude-opus-4-1", {"CLAUDE_CODE_DISABLE_LEGACY_MODEL_REMAP": value})
    assert model == ("claude-opus-5" if remapped else "claude-opus-4-1")


@pytest.mark.parametrize(
    ("model", "default", "cap"),
    [
        ("claude-opus-5", 64_000, 128_000),
        ("claude-opus-5-1", 64_000, 128_000),
        ("claude-sonnet-4-6", 32_000, 128_000),
        ("claude-haiku-4-5-20251001", 32_000, 64_000),
        ("claude-opus-4-5", 32_000, 64_000),
        ("claude-opus-4-1", 32_000, 32_000),
        ("claude-3-5-haiku-latest", 8_192, 8_192),
        ("claude-3-haiku-20240307", 4_096, 4_096),
        ("mock-primary", 32_000, 128_000),
    ],
)
def test_each_model_sends_its_default_max_tokens_and_caps_the_variable(model: str, default: int, cap: int) -> None:
    assert max_output_tokens(model, {}) == default
    assert max_output_tokens(model, {"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "1000000"}) == cap


@pytest.mark.parametrize(
    ("value", "sent"),
    [
        ("1000", 1000),
        (" 2000 ", 2000),
        ("2000.9", 2000),
        ("1e4", 10_000),
        ("12abc", 12),
        ("abc", 64_000),
        ("0", 64_000),
        ("-5", 64_000),
        ("0x10", 64_000),
        ("", 64_000),
    ],
)
def test_the_output_variable_is_read_as_claude_code_reads_it(value: str, sent: int) -> None:
    assert max_output_tokens("claude-opus-5", {"CLAUDE_CODE_MAX_OUTPUT_TOKENS": value}) == sent


def test_the_max_output_tokens_flag_is_sent_as_it_is() -> None:
    assert max_output_tokens("claude-3-haiku-20240307", {"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "50"}, 9_000) == 9_000


def test_anthropic_model_is_below_the_flag_and_above_the_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.json").write_text(json.dumps({"model": "haiku"}))

    def model(asked: str | None) -> tuple[str, int]:
        sources = ConfigSources(setting_sources=("user",))
        request = resolve_config(cwd=tmp_path, sources=sources, request=AskedRequest(model=asked)).options.request
        return request.model, request.max_tokens

    assert model(None) == ("claude-haiku-4-5-20251001", 32_000)
    monkeypatch.setenv("ANTHROPIC_MODEL", "fable")
    assert model(None) == ("claude-fable-5", 64_000)
    assert model("sonnet") == ("claude-sonnet-5", 64_000)


def test_the_output_variable_and_fallback_aliases_are_resolved_in_the_configuration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLAUDE_CODE_MAX_OUTPUT_TOKENS", "1234")
    request = resolve_config(
        cwd=tmp_path, request=AskedRequest(model="opus", fallback_models=["haiku"])
    ).options.request
    assert (request.model, request.max_tokens, request.fallback_models) == (
        "claude-opus-5",
        1234,
        ("claude-haiku-4-5-20251001",),
    )


def test_an_agents_alias_resolves_and_the_subagent_variable_overrides_every_choice() -> None:
    (reader,) = agents_from_json({"reader": {"description": "reads", "prompt": "You read.", "model": "Fable"}})
    assert reader.model_for("claude-haiku-4-5", None, {}) == "claude-fable-5"
    assert reader.model_for("claude-haiku-4-5", "opus", {}) == "claude-opus-5"
    forced = {"CLAUDE_CODE_SUBAGENT_MODEL": "sonnet"}
    assert reader.model_for("claude-haiku-4-5", "opus", forced) == "claude-sonnet-5"
    general = next(a for a in BUILT_IN_AGENTS if a.name == "general-purpose")
    assert general.model_for("mock-primary", None, {}) == "mock-primary"
    (inherits,) = agents_from_json({"i": {"description": "d", "prompt": "p", "model": "inherit"}})
    assert inherits.model_for("mock-primary", None, {}) == "mock-primary"


def test_a_huge_hostile_model_name_resolves_at_once_to_itself() -> None:
    name = "[" * 200_000 + "x"
    assert resolve_model(name, {}) == name
    assert resolve_model(name + "]", {}) == "[" * 199_999
