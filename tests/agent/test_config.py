"""One configuration pipeline: each default written once, and every front-end resolving alike.

The defaults scan reads every module of ``queryloop/`` and ``handlers/`` with ``ast``:
a literal default for a setting of a run — a parameter's, a class field's or a flag's —
outside ``queryloop/run/defaults.py`` (and, for the machine's caps, anywhere: the YAML's
params own them) is a second copy that can drift.
"""

from __future__ import annotations

import ast
import json
from operator import attrgetter
from pathlib import Path

import pytest

from queryloop.fleet.session import SessionSpec, session_options
from queryloop.frontends.options import QueryOptions, agent_options
from queryloop.machines import MACHINES_DIR
from queryloop.run import defaults
from queryloop.run.agent import query_loop_program
from queryloop.run.config import (
    AgentOptions,
    AskedLimits,
    AskedRequest,
    AskedTools,
    ConfigError,
    ConfigSources,
    RequestSettings,
    resolve_config,
    run_params,
)

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [p for d in ("queryloop", "handlers") for p in sorted((ROOT / d).rglob("*.py")) if p.name != "testing.py"]
DEFAULTS_MODULE = ROOT / "queryloop" / "run" / "defaults.py"

CAPS = set(query_loop_program(str(MACHINES_DIR / "query_loop.yaml")).spec.param_map)
# the run's settings whose defaults live in queryloop.run.defaults (the names they go by in the code)
SETTINGS = {
    "model",
    "system_prompt",
    "max_tokens",
    "max_output_tokens",
    "retry_base_delay_s",
    "retry_max_delay_s",
    "idle_timeout_s",
    "request_timeout_s",
    "auto_compact_threshold",
}
FLAGS = {"--max-retries", "--max-retry-after", "--max-output-tokens", "--auto-compact-threshold", "--max-turns"}
FLAGS |= {"--model", "--request-timeout", "--max-budget-usd"}
ENV = ("QUERYLOOP_STREAM_IDLE_TIMEOUT_S", "QUERYLOOP_RETRY_BASE_DELAY_MS", "QUERYLOOP_REQUEST_TIMEOUT_S")
ENV += ("QUERYLOOP_AGENT_TIMEOUT_S",)


def _literal(node: ast.expr | None) -> bool:
    """A written value (a number or a non-empty string): not None, a flag, an empty value or a name."""
    if isinstance(node, ast.UnaryOp):
        node = node.operand
    if not isinstance(node, ast.Constant) or isinstance(node.value, bool) or node.value is None:
        return False
    return node.value != "" and node.value != ()


def _copies(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[str] = []
    here = str(path.relative_to(ROOT))

    def note(line: int, name: str) -> None:
        found.append(f"{here}:{line}: a default for {name}")

    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and _literal(node.value):
            if node.target.id in SETTINGS | CAPS:
                note(node.lineno, node.target.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            positional = [*args.posonlyargs, *args.args]
            pairs = list(zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True))
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
            for arg, default in pairs:
                if arg.arg in SETTINGS | CAPS and _literal(default):
                    note(default.lineno, arg.arg)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            names = {a.value for a in node.args if isinstance(a, ast.Constant)}
            for keyword in node.keywords:
                if keyword.arg == "default" and names & FLAGS and _literal(keyword.value):
                    note(keyword.value.lineno, "/".join(sorted(names)))
        elif isinstance(node, ast.Constant) and node.value in ENV and path != DEFAULTS_MODULE:
            found.append(f"{here}:{node.lineno}: reads {node.value} (queryloop.run.defaults does)")
    return found


def test_each_default_is_written_once() -> None:
    copies = [c for path in SOURCES if path != DEFAULTS_MODULE for c in _copies(path)]
    assert not copies, "\n".join(copies)


def test_the_scan_finds_a_second_copy(tmp_path: Path) -> None:
    """The scan can fail: each kind of copy it looks for is found in a module written for it."""
    planted = ROOT / "queryloop" / "run" / "_planted_copy.py"
    planted.write_text(
        "import argparse, os\n"
        "class C:\n    max_retries: int = 10\n"
        "def f(idle_timeout_s: float = 90.0) -> None: ...\n"
        "argparse.ArgumentParser().add_argument('--max-output-tokens', default=32000)\n"
        "os.environ.get('QUERYLOOP_STREAM_IDLE_TIMEOUT_S', '90')\n",
        encoding="utf-8",
    )
    try:
        assert len(_copies(planted)) == 4, _copies(planted)
    finally:
        planted.unlink()


def test_an_unset_cap_is_not_passed_so_the_yaml_default_applies(tmp_path: Path) -> None:
    options = resolve_config(cwd=tmp_path).options
    assert options.limits.max_retries is None and "max_retries" not in run_params(options)
    assert run_params(resolve_config(cwd=tmp_path, limits=AskedLimits(max_retries=2)).options)["max_retries"] == 2
    assert "max_retry_after_s" not in run_params(options)


def test_what_is_unsaid_comes_from_a_scenario_then_the_settings_then_the_defaults(tmp_path: Path) -> None:
    (tmp_path / ".queryloop").mkdir()
    (tmp_path / ".queryloop" / "settings.json").write_text(json.dumps({"model": "from-settings"}), encoding="utf-8")
    project = ConfigSources(setting_sources=("project",))
    assert defaults.DEFAULT_MODEL == "opus"
    assert resolve_config(cwd=tmp_path).options.request.model == "claude-opus-5"  # the alias, resolved
    assert resolve_config(cwd=tmp_path, sources=project).options.request.model == "from-settings"
    hinted = resolve_config(cwd=tmp_path, sources=project, scenario={"model": "scripted", "max_turns": 2})
    assert (hinted.options.request.model, hinted.options.limits.max_turns) == ("scripted", 2)
    flag = AskedRequest(model="flag")
    said = resolve_config(cwd=tmp_path, sources=project, scenario={"model": "scripted"}, request=flag)
    assert said.options.request.model == "flag"


def test_the_api_and_the_fleet_resolve_as_the_program_does(tmp_path: Path) -> None:
    """The same ask gives the same configuration, whichever front-end it came through."""
    program = resolve_config(cwd=tmp_path).options
    api = agent_options(QueryOptions(cwd=tmp_path), can_use_tool=None)
    fleet = session_options(SessionSpec(prompt="", model=defaults.DEFAULT_MODEL, cwd=str(tmp_path)))
    fields = ("request.model", "limits.max_turns", "limits.max_retries", "request.max_tokens")
    fields += ("request.retry_base_delay_s", "request.idle_timeout_s", "request.request_timeout_s")
    fields += ("context.auto_compact_threshold", "permissions.mode", "request.system_prompt", "limits.params")
    for other in (api, fleet):
        assert {f: attrgetter(f)(other) for f in fields} == {f: attrgetter(f)(program) for f in fields}
    # a fleet offers no Agent tool yet
    assert program.agents.definitions == api.agents.definitions != () and fleet.agents.definitions == ()


def test_a_bad_configuration_is_one_error_naming_its_part(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as bad_rule:
        resolve_config(cwd=tmp_path, tools=AskedTools(allowed_tools=["Bash("]))
    assert bad_rule.value.kind == "settings"
    with pytest.raises(ConfigError) as bad_mcp:
        resolve_config(cwd=tmp_path, sources=ConfigSources(mcp_config=["{not json"]))
    assert bad_mcp.value.kind == "mcp"


def test_direct_options_take_the_same_defaults(tmp_path: Path) -> None:
    """An ``AgentOptions`` made by hand (tests, benchmarks) has the pipeline's defaults."""
    resolved = resolve_config(cwd=tmp_path).options
    # the model's own max_tokens (and the alias resolved) come from resolve_config; the rest are field defaults
    request = RequestSettings(model=resolved.request.model, max_tokens=resolved.request.max_tokens)
    direct = AgentOptions(prompt="", cwd=tmp_path, request=request)
    assert direct.request == resolved.request
    assert direct.context.auto_compact_threshold == resolved.context.auto_compact_threshold
    assert direct.session.max_checkpoints == resolved.session.max_checkpoints


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("QUERYLOOP_AGENT_TIMEOUT_S", "abc"),
        ("QUERYLOOP_AGENT_TIMEOUT_S", "0"),
        ("QUERYLOOP_STREAM_IDLE_TIMEOUT_S", "-1"),
        ("QUERYLOOP_REQUEST_TIMEOUT_S", "inf"),
        ("QUERYLOOP_RETRY_BASE_DELAY_MS", "nan"),
    ],
)
def test_a_knob_in_the_environment_that_is_no_usable_number_is_an_error_naming_it(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=f"^{name}='{value}': expected a number"):
        AgentOptions(prompt="x", request=RequestSettings(model="m"))


def test_a_zero_retry_delay_in_the_environment_is_no_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUERYLOOP_RETRY_BASE_DELAY_MS", "0")
    assert AgentOptions(prompt="x", request=RequestSettings(model="m")).request.retry_base_delay_s == 0
