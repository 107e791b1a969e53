"""Sub-agent definitions: the built-in ones, ``--agents JSON`` and ``.claude/agents/*.md``.

Owns :class:`AgentDefinition`, the built-in agents and reading custom ones as Claude Code users write them
(docs/agents.md). Every problem is an :class:`AgentDefinitionError` naming the file or flag, the agent and the fix.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

import attrs

from queryloop.fsm import UnreadableFileError, read_text_file

from ...request import AGENT_CALL_MODELS, resolve_model, subagent_model
from ...tools import AGENT_TOOL, CHANGES_CODE

__all__ = [
    "BUILT_IN_AGENTS",
    "MODEL_FAMILIES",
    "AgentDefinition",
    "AgentDefinitionError",
    "agents_from_files",
    "agents_from_json",
    "merge_agents",
]

MODEL_FAMILIES: Final = AGENT_CALL_MODELS
"""The model families an Agent call may ask for (a definition may give any model name, or ``inherit``)."""

_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_-]{0,63}$")


class AgentDefinitionError(ValueError):
    """A custom agent that cannot be used; the message names where it was defined and how to fix it."""


@attrs.frozen(kw_only=True)
class AgentDefinition:
    """One kind of sub-agent the model may start with the Agent tool."""

    name: str
    description: str  # when the model should use it (listed in the Agent tool's description)
    prompt: str  # its system prompt
    tools: tuple[str, ...] | None = None  # the tools it may use (None: the parent's, without Agent)
    disallowed_tools: tuple[str, ...] = ()  # tools it may not use, of those
    max_turns: int | None = None  # its tool turns (None: no limit)
    model: str | None = None  # a model id or alias (opus, sonnet, haiku, fable …); None or "inherit": the parent's
    source: str = "built-in"  # built-in, the --agents flag, or the file it was read from

    def model_for(self, parent: str, asked: str | None = None, env: Mapping[str, str] | None = None) -> str:
        """The model it runs on: ``CLAUDE_CODE_SUBAGENT_MODEL``, else the call's choice, else its own, else the
        parent's; each name resolved as the run's own is (``env``: what aliases and that variable are read from)."""
        env = env or {}
        forced = subagent_model(env)
        chosen = forced or asked or self.model
        if chosen is None or chosen.strip().lower() == "inherit":
            return parent
        return resolve_model(chosen, env)


GENERAL_PURPOSE_PROMPT: Final = (
    "You are a sub-agent: another agent handed you one task and is waiting for your answer. "
    "Work on that task alone with the tools you have, in the same working directory. "
    "When you are done, answer with a concise report of what you found or changed, with the file paths "
    "and facts the other agent needs; it sees your final answer and nothing else of your work."
)

CATCH_ALL_PROMPT: Final = (
    "You are a sub-agent: another agent handed you a task no more specific kind of agent was chosen for, and "
    "it waits for your answer. Do the whole task with the tools you have, in the same working directory, "
    "then answer with what you did and found: the parent sees that answer and nothing else of your work."
)

READ_ONLY_RULES: Final = (
    "You only look: you have no tool that writes files, and you do not change anything through the shell "
    "either (no redirections into files, no moves, deletions, installs or commits). Use the shell only for "
    "commands that read (listing, searching, git log and diff)."
)

EXPLORE_PROMPT: Final = (
    "You are a search sub-agent: another agent wants to know where something is in this code base and what "
    "it looks like, and waits for your answer. Search widely and fast — file names, several spellings of a "
    "name, the places that use it — reading only as much of each file as you need to be sure. "
    + READ_ONLY_RULES
    + " Answer with the locations (absolute paths, with line numbers when they help) and a short account of "
    "what you found; the parent sees that answer and nothing else of your work."
)

PLAN_PROMPT: Final = (
    "You are a planning sub-agent: another agent is about to change this code base and wants a plan first. "
    "Read the code the change touches and what depends on it, then design how to make the change. "
    + READ_ONLY_RULES
    + " Answer with the plan: the steps in order, the files each one changes (absolute paths), what to watch "
    "for, and the choices you made and why; the parent sees that answer and nothing else of your work."
)

_READ_ONLY_TOOLS_OUT: Final = (AGENT_TOOL, *CHANGES_CODE)
"""What the read-only built-in agents (Explore, Plan) may not use, as in Claude Code 2.1.235."""

BUILT_IN_AGENTS: Final = (
    AgentDefinition(
        name="claude",
        description="A catch-all agent for a task no other type here fits; it has your tools.",
        prompt=CATCH_ALL_PROMPT,
    ),
    AgentDefinition(
        name="Explore",
        description=(
            "A read-only search agent: finds where things are across many files and reports the places and "
            "what they hold, not the files themselves. Say how thorough it should be (a quick look, or every "
            "location and naming convention)."
        ),
        prompt=EXPLORE_PROMPT,
        disallowed_tools=_READ_ONLY_TOOLS_OUT,
    ),
    AgentDefinition(
        name="general-purpose",
        description=(
            "A capable agent for multi-step tasks: searching the code, reading and changing files, "
            "running commands. Use it for a self-contained task whose result you need, not its steps."
        ),
        prompt=GENERAL_PURPOSE_PROMPT,
    ),
    AgentDefinition(
        name="Plan",
        description=(
            "A read-only planning agent: reads the code a change touches and returns a plan — the steps, the "
            "files each changes, the risks and trade-offs. Use it before a change that needs a design."
        ),
        prompt=PLAN_PROMPT,
        disallowed_tools=_READ_ONLY_TOOLS_OUT,
    ),
)
"""The agents every run may start, as Claude Code 2.1.235 ships them (but its ``statusline-setup``, which
edits a status line queryloop does not draw): their names, tools and models; their words are ours."""


def _tools(value: object, where: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        names = [t.strip() for t in value.split(",")]
    elif isinstance(value, list) and all(isinstance(t, str) for t in value):
        names = [t.strip() for t in value]
    else:
        raise AgentDefinitionError(f"{where}: `tools` must be a list of tool names or a comma-separated string")
    return tuple(n for n in names if n)


def _definition(name: object, fields: Mapping[str, object], prompt: object, where: str) -> AgentDefinition:
    if not isinstance(name, str) or not _NAME.match(name):
        raise AgentDefinitionError(
            f"{where}: agent name {name!r} must be letters, digits, '-' or '_' (at most 64 characters)"
        )
    source, where = where, f"{where}: agent {name!r}"
    description = fields.get("description")
    if not isinstance(description, str) or not description.strip():
        raise AgentDefinitionError(f"{where} needs a `description`: when the model should use it")
    if not isinstance(prompt, str) or not prompt.strip():
        raise AgentDefinitionError(f"{where} needs a prompt: its system prompt (`prompt`, or a file's body)")
    model = fields.get("model")
    if model is not None and not isinstance(model, str):
        raise AgentDefinitionError(
            f"{where}: `model` must be a model name, an alias (opus, sonnet, haiku, fable) or inherit"
        )
    max_turns = fields.get("maxTurns")
    if max_turns is not None and (not isinstance(max_turns, int) or isinstance(max_turns, bool) or max_turns < 1):
        raise AgentDefinitionError(f"{where}: `maxTurns` must be a whole number of at least 1")
    return AgentDefinition(
        name=name,
        description=description.strip(),
        prompt=prompt.strip(),
        tools=_tools(fields.get("tools"), where),
        disallowed_tools=_tools(fields.get("disallowedTools"), where) or (),
        model=model,
        max_turns=max_turns,
        source=source,
    )


def agents_from_json(text: str | Mapping[str, object], where: str = "--agents") -> tuple[AgentDefinition, ...]:
    """The ``--agents`` flag's agents (or the Agent SDK's ``agents``, already parsed): a JSON object of
    name → {description, prompt, tools?, disallowedTools?, model?, maxTurns?}."""
    if isinstance(text, str):
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            where_in = f"line {exc.lineno} column {exc.colno}"
            raise AgentDefinitionError(f"{where}: not JSON ({exc.msg} at {where_in})") from exc
    else:
        raw = text
    if not isinstance(raw, dict):
        example = '{"NAME": {"description": …, "prompt": …}}'
        raise AgentDefinitionError(f"{where}: expected a JSON object like {example}")
    out = []
    for name, fields in raw.items():
        if not isinstance(fields, dict):
            raise AgentDefinitionError(f"{where}: agent {name!r} must be an object with description and prompt")
        out.append(_definition(name, fields, fields.get("prompt"), where))
    return tuple(out)


_FRONTMATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)(.*)\Z", re.DOTALL)


def agents_from_files(folder: Path) -> tuple[AgentDefinition, ...]:
    """The agents defined by ``folder``'s ``*.md`` files (name order); a missing folder defines none."""
    if not folder.is_dir():
        return ()
    out = []
    for path in sorted(folder.glob("*.md")):
        try:
            text = read_text_file(path)
        except FileNotFoundError:
            continue  # a dangling symlink, or removed since the folder was listed: defines nothing
        except UnreadableFileError as exc:
            raise AgentDefinitionError(f"{exc}; an agent file must be a regular UTF-8 text file") from None
        match = _FRONTMATTER.match(text)
        if match is None:
            raise AgentDefinitionError(
                f"{path}: an agent file starts with YAML frontmatter between '---' lines "
                "(name, description, tools, model), then its system prompt"
            )
        import yaml  # here: a run whose folders define no agent never loads PyYAML

        try:
            fields = yaml.safe_load(match[1]) or {}
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = f":{mark.line + 2}" if mark is not None else ""
            raise AgentDefinitionError(f"{path}{line}: the frontmatter is not valid YAML ({exc})") from exc
        if not isinstance(fields, dict):
            raise AgentDefinitionError(f"{path}: the frontmatter must be a mapping (name: …, description: …)")
        out.append(_definition(fields.get("name", path.stem), fields, match[2], str(path)))
    return tuple(out)


def merge_agents(*sources: Iterable[AgentDefinition]) -> tuple[AgentDefinition, ...]:
    """The agents of ``sources``, a later source's agent replacing an earlier one of the same name."""
    by_name: dict[str, AgentDefinition] = {}
    for source in sources:
        for agent in source:
            by_name.pop(agent.name, None)
            by_name[agent.name] = agent
    return tuple(by_name.values())
