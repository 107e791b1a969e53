"""Permission rules as written: their records, their syntax, and the paths and tools they name.

Owns :class:`PermissionRule`, :class:`PermissionRules`, the ``--allowed-tools`` syntax, the modes, which tools a
rule covers, path patterns, what ``Read`` deny rules hide and :func:`hidden_tools`. Matching one call is
``permissions``'.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal, get_args

import attrs

from .names import BASH_TOOLS, EDIT_TOOLS, READ_TOOLS

if TYPE_CHECKING:
    import pathspec

__all__ = [
    "PERMISSION_MODES",
    "PathPattern",
    "PermissionBehavior",
    "PermissionMode",
    "PermissionRule",
    "PermissionRuleError",
    "PermissionRules",
    "hidden_tools",
    "is_inside",
    "parse_rule",
    "parse_rule_list",
    "path_matches",
    "path_pattern",
    "read_denied",
    "read_denied_paths",
    "tool_name_matches",
]

PermissionMode = Literal["default", "acceptEdits", "plan", "bypassPermissions", "dontAsk"]
PermissionBehavior = Literal["allow", "ask", "deny"]

PERMISSION_MODES: Final[tuple[PermissionMode, ...]] = get_args(PermissionMode)

_TOOL_NAME_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*\*?")


class PermissionRuleError(ValueError):
    """A permission rule string (from settings or a CLI flag) is not well formed."""


# --------------------------------------------------------------------------- rules


@attrs.frozen(kw_only=True)
class PermissionRule:
    """One parsed rule: ``tool`` alone matches every use; with ``specifier`` only some."""

    text: str
    tool: str
    specifier: str | None = None

    def __str__(self) -> str:
        return self.text


def parse_rule(text: str) -> PermissionRule:
    """Parse ``Tool`` or ``Tool(specifier)``; raise :class:`PermissionRuleError` if malformed."""

    def bad(problem: str) -> PermissionRuleError:
        return PermissionRuleError(f"invalid permission rule {text!r}: {problem}")

    rule = text.strip()
    if not rule:
        raise bad("the rule is empty; write a tool name such as 'Bash' or 'Read(./src/**)'")
    open_at = rule.find("(")
    if open_at == -1:
        if ")" in rule:
            raise bad("')' without a matching '('")
        tool, specifier = rule, None
    else:
        if not rule.endswith(")"):
            raise bad("missing closing ')'; write it as 'Tool(specifier)'")
        tool, specifier = rule[:open_at].strip(), rule[open_at + 1 : -1]
        if not specifier.strip():
            raise bad(f"the specifier in '()' is empty; write {tool!r} to match every use of the tool")
    if not _TOOL_NAME_RE.fullmatch(tool):
        raise bad(f"{tool!r} is not a tool name (expected letters, digits, '_' or '-', e.g. 'Bash' or 'mcp__github')")
    if tool.endswith("*") and not tool.startswith("mcp__"):
        raise bad("a '*' in the tool name is only allowed for MCP servers ('mcp__server__*')")
    if specifier is not None and tool in BASH_TOOLS:
        core = specifier[:-2] if specifier.endswith(":*") else specifier
        if ":*" in core:
            raise bad("':*' is only allowed at the end of a Bash pattern (prefix match); use '*' elsewhere")
    return PermissionRule(text=rule, tool=tool, specifier=specifier)


def _split_rule_list(value: str) -> list[str]:
    # Commas and whitespace separate rules, except inside parentheses:
    # "Bash(npm run test:*) Read" is two rules, not four.
    items: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in value:
        if ch == "(":
            depth += 1
        elif ch == ")" and depth:
            depth -= 1
        if depth == 0 and (ch == "," or ch.isspace()):
            if current:
                items.append("".join(current))
                current = []
            continue
        current.append(ch)
    if depth:
        raise PermissionRuleError(f"invalid tool list {value!r}: unbalanced '(' in a rule")
    if current:
        items.append("".join(current))
    return items


def parse_rule_list(value: str | Iterable[str] | None) -> tuple[PermissionRule, ...]:
    """Parse an ``--allowed-tools``/``--disallowed-tools`` value (comma/space separated rules).

    A sequence (the flag given several times) is parsed item by item and concatenated.
    """
    if value is None:
        return ()
    values = [value] if isinstance(value, str) else list(value)
    rules: list[PermissionRule] = []
    for item in values:
        rules.extend(parse_rule(part) for part in _split_rule_list(item))
    return _dedupe(rules)


def _dedupe(rules: Iterable[PermissionRule]) -> tuple[PermissionRule, ...]:
    seen: set[str] = set()
    out: list[PermissionRule] = []
    for rule in rules:
        if rule.text not in seen:
            seen.add(rule.text)
            out.append(rule)
    return tuple(out)


def _rule_tuple(value: Iterable[PermissionRule | str]) -> tuple[PermissionRule, ...]:
    return _dedupe(parse_rule(r) if isinstance(r, str) else r for r in value)


def _path_tuple(value: Iterable[Path | str]) -> tuple[Path, ...]:
    return tuple(Path(p) for p in value)


@attrs.frozen(kw_only=True)
class PermissionRules:
    """Every rule in force for a run, plus the extra working directories.

    ``additional_directories`` must be absolute (settings resolve them against cwd).
    """

    allow: tuple[PermissionRule, ...] = attrs.field(default=(), converter=_rule_tuple)
    ask: tuple[PermissionRule, ...] = attrs.field(default=(), converter=_rule_tuple)
    deny: tuple[PermissionRule, ...] = attrs.field(default=(), converter=_rule_tuple)
    additional_directories: tuple[Path, ...] = attrs.field(default=(), converter=_path_tuple)

    @additional_directories.validator
    def _check_absolute(self, attribute: attrs.Attribute[tuple[Path, ...]], value: tuple[Path, ...]) -> None:
        for directory in value:
            if not directory.is_absolute():
                raise ValueError(f"additional directory {str(directory)!r} must be an absolute path")

    def with_cli_flags(
        self,
        *,
        allowed_tools: str | Iterable[str] | None = None,
        disallowed_tools: str | Iterable[str] | None = None,
    ) -> PermissionRules:
        """Return these rules plus the ``--allowed-tools`` / ``--disallowed-tools`` values."""
        return attrs.evolve(
            self,
            allow=self.allow + parse_rule_list(allowed_tools),
            deny=self.deny + parse_rule_list(disallowed_tools),
        )

    def hides(self, tool_name: str) -> bool:
        """True if a bare deny rule removes ``tool_name`` from the tools offered to the model."""
        return any(rule.specifier is None and tool_name_matches(rule.tool, tool_name) for rule in self.deny)


def read_denied(
    rules: PermissionRules, *, cwd: Path, home: Path | None = None, lexical: bool = False
) -> Callable[[Path], bool]:
    """A test telling whether a file is covered by a ``Read(...)`` deny rule — for what Grep opens and Glob lists.

    ``lexical``: the paths asked about are already resolved (a walk of the resolved working
    directory that follows no symlink, as the sandbox's is), so they are matched as written,
    without resolving each one again.
    """
    base, home_dir = Path(os.path.abspath(cwd)), home if home is not None else Path.home()
    patterns = [
        path_pattern(r.specifier, cwd=base, home=home_dir)
        for r in rules.deny
        if r.specifier is not None and tool_name_matches(r.tool, "Read")
    ]
    if lexical:
        specs = [(os.path.normpath(p.root), _compiled_path_spec(p.pattern)) for p in patterns]

        def written(path: Path) -> bool:
            text = os.path.normpath(path)
            for root, spec in specs:
                relative = _relative_to(text, root)
                if relative is not None and spec.match_file(relative):
                    return True
            return False

        return written

    def denied(path: Path) -> bool:
        return any(path_matches(p, path, require_all=False) for p in patterns)

    return denied


def read_denied_paths(rules: PermissionRules, *, cwd: Path, home: Path | None = None) -> tuple[Path, ...]:
    """The literal paths (no pattern characters) ``Read`` deny rules name: what a sandbox can hide by path."""
    base, home_dir = Path(os.path.abspath(cwd)), home if home is not None else Path.home()
    paths: list[Path] = []
    for rule in rules.deny:
        if rule.specifier is None or not tool_name_matches(rule.tool, "Read"):
            continue
        pattern = path_pattern(rule.specifier, cwd=base, home=home_dir)
        text = pattern.pattern.removesuffix("/**")
        if text.startswith("/") and not any(c in text for c in "*?[]!\\"):
            paths.append(Path(os.path.normpath(str(pattern.root) + text)))
    return tuple(dict.fromkeys(paths))


def hidden_tools(rules: PermissionRules) -> frozenset[str]:
    """Tool names denied by a bare rule (no specifier): never offered to the model.

    MCP server rules (``mcp__server``) are returned as written; use
    :meth:`PermissionRules.hides` to test a concrete tool name.
    """
    return frozenset(rule.tool for rule in rules.deny if rule.specifier is None)


# ------------------------------------------------------------------------- paths


@attrs.frozen(kw_only=True)
class PathPattern:
    root: Path
    pattern: str


def path_pattern(specifier: str, *, cwd: Path, home: Path) -> PathPattern:
    # Claude Code path rule prefixes: `//x` absolute, `~/x` home, `/x` relative to
    # the settings root (we use cwd), `./x` and `x` relative to cwd. A pattern
    # without a prefix keeps gitignore semantics (`*.env` matches at any depth).
    spec = specifier.strip()
    if spec.startswith("//"):
        return PathPattern(root=Path("/"), pattern="/" + spec[2:])
    if spec == "~":
        return PathPattern(root=home, pattern="**")
    if spec.startswith("~/"):
        return PathPattern(root=home, pattern="/" + spec[2:])
    if spec.startswith("/"):
        return PathPattern(root=cwd, pattern=spec)
    root = cwd
    anchored = False
    while spec.startswith(("./", "../")) or spec in {".", ".."}:
        anchored = True
        if spec.startswith("../") or spec == "..":
            root = root.parent
        spec = spec.split("/", 1)[1] if "/" in spec else ""
    if not spec:
        return PathPattern(root=root, pattern="**")
    if spec.startswith("!"):
        spec = "\\" + spec
    return PathPattern(root=root, pattern="/" + spec if anchored else spec)


@functools.lru_cache(maxsize=1024)
def _compiled_path_spec(pattern: str) -> pathspec.GitIgnoreSpec:
    import pathspec  # here: only a path rule needs it

    return pathspec.GitIgnoreSpec.from_lines([pattern])


def _variants(path: Path) -> tuple[str, str]:
    """The lexical and symlink-resolved forms of an absolute path."""
    lexical = os.path.normpath(path)
    return lexical, os.path.realpath(lexical)


def _relative_to(path: str, root: str) -> str | None:
    if root == os.sep:
        return path.lstrip(os.sep) or None
    if path.startswith(root + os.sep):
        return path[len(root) + 1 :]
    return None


def path_matches(pattern: PathPattern, target: Path, *, require_all: bool) -> bool:
    # The target is checked both as written and with symlinks resolved, and so is
    # the root. Deny/ask rules apply if either form matches (a symlink cannot
    # dodge them); allow rules only if both do (a symlink cannot smuggle a path in).
    spec = _compiled_path_spec(pattern.pattern)
    results = []
    for target_form, root_form in zip(_variants(target), _variants(pattern.root), strict=True):
        relative = _relative_to(target_form, root_form)
        results.append(relative is not None and spec.match_file(relative))
    return all(results) if require_all else any(results)


def is_inside(target: Path, directory: Path) -> bool:
    return all(
        t == d or t.startswith(d.rstrip(os.sep) + os.sep)
        for t, d in zip(_variants(target), _variants(directory), strict=True)
    )


# ---------------------------------------------------------------------- tool names


def tool_name_matches(rule_tool: str, tool_name: str) -> bool:
    if rule_tool == tool_name:
        return True
    if rule_tool.startswith("mcp__"):
        # `mcp__server` and `mcp__server__*` cover every tool of that server.
        server = rule_tool[:-3] if rule_tool.endswith("__*") else rule_tool
        return server.count("__") == 1 and tool_name.startswith(server + "__")
    if rule_tool in EDIT_TOOLS:
        return tool_name in EDIT_TOOLS
    if rule_tool == "Read":
        return tool_name in READ_TOOLS
    return False
