"""The sub-agents a run may start: the built-in types (issue 43, 4), how deep the machine lets runs start them
(issue 42), and what a sub-agent is told of where it runs (issue 43, 10).

The built-in types and their tools were observed on Claude Code 2.1.235 (2026-12-04): its ``init`` line lists
``claude``, ``Explore``, ``general-purpose``, ``Plan`` and ``statusline-setup``; Explore and Plan get every tool
but Agent, Edit, Write and NotebookEdit. queryloop ships them but ``statusline-setup``, with its own words.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from queryloop.fsm import Program, SpecError, parse_machine
from queryloop.handlers.agents.services.definitions import BUILT_IN_AGENTS
from queryloop.machines import MACHINES_DIR
from queryloop.run.agent import query_loop_program
from queryloop.run.config import AgentOptions, AgentSettings, RequestSettings
from queryloop.run.services import offers_agents as _offers_agents
from queryloop.run.subagents import child_system_prompt


def _deeper(program: Program, depth: int) -> Program:
    """``program`` with its ``children: agents`` declaring ``depth`` (the schema allows only 1 in YAML)."""
    spec = program.spec
    children = tuple(attrs.evolve(c, depth=depth) for c in spec.children)
    return Program(attrs.evolve(program.machine, spec=attrs.evolve(spec, children=children)))


def test_the_built_in_agents_are_claude_codes_but_statusline_setup() -> None:
    assert sorted((a.name for a in BUILT_IN_AGENTS), key=str.lower) == ["claude", "Explore", "general-purpose", "Plan"]


def test_explore_and_plan_may_not_write_edit_or_start_agents_and_the_others_may() -> None:
    by_name = {a.name: a for a in BUILT_IN_AGENTS}
    for name in ("Explore", "Plan"):
        assert set(by_name[name].disallowed_tools) == {"Agent", "Edit", "Write", "NotebookEdit"}, name
    for name in ("claude", "general-purpose"):
        assert by_name[name].tools is None and by_name[name].disallowed_tools == (), name


def test_how_deep_a_run_may_start_agents_is_the_machines_children_depth(tmp_path: Path) -> None:
    program = query_loop_program()
    (children,) = program.spec.children
    assert children.depth == 1
    top = AgentOptions(prompt="go", cwd=tmp_path, request=RequestSettings(model="m"))
    agent = AgentSettings(agent_id="a0123456789abcdef", agent_type="general-purpose", spawn_depth=1)
    child = attrs.evolve(top, agents=agent)
    assert _offers_agents(top, program) and not _offers_agents(child, program)
    # a machine declaring depth 2 lets a sub-agent start agents of its own, and its children none
    assert _offers_agents(child, _deeper(program, 2))
    assert not _offers_agents(attrs.evolve(child, agents=attrs.evolve(agent, spawn_depth=2)), _deeper(program, 2))


def test_a_sub_agents_system_prompt_says_where_it_works_and_that_no_agent_message_is_consent(tmp_path: Path) -> None:
    (general,) = [a for a in BUILT_IN_AGENTS if a.name == "general-purpose"]
    prompt = child_system_prompt(general, cwd=tmp_path, model="claude-haiku-4-5")
    assert prompt.startswith(general.prompt)
    assert f"working directory: {tmp_path}" in prompt and "model: claude-haiku-4-5" in prompt
    assert "consent" in prompt


def test_a_children_entry_naming_a_guard_that_is_not_declared_as_pending_is_refused() -> None:
    text = (MACHINES_DIR / "query_loop.yaml").read_text(encoding="utf-8")
    assert text.count("    pending: agents_running\n") == 1
    mutant = text.replace("    pending: agents_running\n", "    pending: agent_running\n")
    with pytest.raises(SpecError) as info:
        parse_machine(mutant, "m.yaml", bind=False)
    assert "children 'agents' `pending` names guard 'agent_running', which is not declared" in str(info.value)
    assert "agents_running" in str(info.value)  # the close match
