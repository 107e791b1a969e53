"""Settings: finding, validating and merging Claude Code style settings files.

Sources, precedence and merge as Claude Code 2.1.235 (docs/configuration.md); each problem is one line with file,
line and JSON path.
"""

from __future__ import annotations

import copy
import difflib
import json
import os
import re
import sys
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, cast

import attrs

from queryloop.fsm import SpecError, UnreadableFileError, read_text_file

if TYPE_CHECKING:
    from queryloop.fsm import Source
from queryloop.handlers.hooks import HookConfig, HookConfigError, parse_hook_config
from queryloop.handlers.tools import (
    PERMISSION_MODES,
    PermissionMode,
    PermissionRule,
    PermissionRuleError,
    PermissionRules,
    parse_rule,
)

from .trust import is_trusted, restrict

__all__ = [
    "PermissionSettings",
    "SETTINGS_SCHEMA",
    "SETTING_SOURCES",
    "Settings",
    "SettingsError",
    "git_root",
    "load_settings",
    "merge_settings",
    "settings_files",
]

_RULE_LIST: Final[dict[str, Any]] = {"type": "array", "items": {"type": "string"}}
_PATH_LIST: Final[dict[str, Any]] = {"type": "array", "items": {"type": "string", "minLength": 1}}

SETTING_SOURCES: Final = ("user", "project", "local")
"""The settings files by source, lowest precedence first (``--setting-sources`` picks among them)."""

#: JSON Schema for the settings keys queryloop reads. Unknown keys are allowed at
#: every level: users bring Claude Code settings, which have many more.
SETTINGS_SCHEMA: Final[Mapping[str, Any]] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "permissions": {
            "type": "object",
            "properties": {
                "allow": _RULE_LIST,
                "ask": _RULE_LIST,
                "deny": _RULE_LIST,
                "defaultMode": {"enum": list(PERMISSION_MODES)},
                "additionalDirectories": {"type": "array", "items": {"type": "string"}},
            },
        },
        "hooks": {
            "type": "object",
            "additionalProperties": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["hooks"],
                    "properties": {
                        "matcher": {"type": "string"},
                        "hooks": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "required": ["type"],
                                "properties": {
                                    "type": {"type": "string"},
                                    "command": {"type": "string"},
                                    "timeout": {"type": "number", "exclusiveMinimum": 0},
                                },
                                "if": {"properties": {"type": {"const": "command"}}},
                                "then": {"required": ["command"]},
                            },
                        },
                    },
                },
            },
        },
        "env": {"type": "object", "additionalProperties": {"type": "string"}},
        "model": {"type": "string"},
        "disableAllHooks": {"type": "boolean"},
        "mcpServers": {"type": "object", "additionalProperties": {"type": "object"}},  # checked in full when used
        "enableAllProjectMcpServers": {"type": "boolean"},
        "enabledMcpjsonServers": {"type": "array", "items": {"type": "string"}},
        "disabledMcpjsonServers": {"type": "array", "items": {"type": "string"}},
        # Claude Code's sandbox settings; the keys queryloop acts on are typed, others kept (docs/security.md).
        "sandbox": {
            "type": "object",
            "properties": {
                "enabled": {"type": "boolean"},
                "autoAllowBashIfSandboxed": {"type": "boolean"},
                "allowUnsandboxedCommands": {"type": "boolean"},
                "failIfUnavailable": {"type": "boolean"},
                "excludedCommands": _RULE_LIST,
                "network": {
                    "type": "object",
                    "properties": {"allowedDomains": {"type": "array", "items": {"type": "string", "minLength": 1}}},
                },
                "filesystem": {
                    "type": "object",
                    "properties": {key: _PATH_LIST for key in ("allowWrite", "denyWrite", "denyRead")},
                },
            },
        },
    },
}


#: Every top-level key Claude Code's settings schema has (2.1.332, from its bundled schema): a file
#: written for Claude Code may carry any of them; queryloop keeps those it does not act on in
#: ``Settings.raw`` without a word. A key neither knows is likely a misspelling and is warned about.
CLAUDE_CODE_SETTINGS_KEYS: Final = frozenset(
    """
$schema additionalDirectoryConfigRoots additionalMarketplaces advisorModel agent agentPushNotifEnabled
allowAllClaudeAiMcps allowClaudeInChromeWithManagedMcp allowManagedHooksOnly allowManagedMcpServersOnly
allowManagedPermissionRulesOnly allowNestedModelAccessUnderForceLogin allowedChannelPlugins
allowedHttpHookUrls allowedMarketplaces allowedMcpServers allowedProviders alwaysThinkingEnabled
apiKeyHelper appendPlugins askUserQuestionTimeout attribution attributionProject
attributionProjectPolicy autoCompactEnabled autoCompactOfferAnswer autoCompactRaisedForLoad
autoCompactWindow autoContinueAtUsageLimit autoDreamEnabled autoMemoryDirectory autoMemoryEnabled
autoScrollEnabled autoUpdatesChannel autoUploadSessions availableModels availableModelsMatch
awaySummaryEnabled awsAuthRefresh awsCredentialExport bashEditDiffEnabled bashOutputMaxChars
blockedMarketplaces breakReminder channelsEnabled claudeMd claudeMdExcludes clawdFileProgressEnabled
cleanupPeriodDays companyAnnouncements crossSessionInbound daemonColdStart defaultShell deniedMcpServers
deniedModels desktopMcpServersListScope desktopSessionCleanupPeriodDays dialogExpiry disableAgentView
disableAllHooks disableArtifact disableAutoMode disableBundledSkills disableClaudeAiConnectors
disableCommandPluginSources disableDirectMcpSkills disableRemoteControl disableReplyCheck
disableSideloadFlags disableSkillShellExecution disableWindowsBashCommandSplit disableWorkflows
disabledMcpjsonServers doneMeansMerged downloadsMirrorUrl editorMode effortLevel emojiCompletionEnabled
enableAllProjectMcpServers enableArtifact enableWorkflows enabledMcpjsonServers enabledPlugins
enforceAvailableModels env extraKnownMarketplaces fallbackModel fastMode fastModePerSessionOptIn
feedbackDrafts feedbackSurveyRate fileCheckpointingEnabled fileSuggestion footerLinksRegexes
forceLoginGatewayUrl forceLoginMethod forceLoginOrgUUID forceRemoteSettingsRefresh
gatewayInternalNetworks gcpAuthRefresh hooks httpHookAllowedEnvVars idleCompaction includeCoAuthoredBy
includeGitInstructions inputNeededNotifEnabled isolatePeerMachines keybindingFlavor language
managedMcpServers managedSourcesBehavior maxEffortLevel maxProseWidth minimumVersion model
modelCatalogPublicKey modelCatalogUrl modelOverrides modelPicker modelPricing modelProposedGoals
modelSettings otelHeadersHelper outputStyle parentSettingsBehavior permissions plansDirectory
pluginConfigs pluginSuggestionMarketplaces pluginTrustMessage policyHelper policyHelpers prUrlTemplate
precomputeArmTokens precomputeCompactionEnabled preferredNotifChannel prefersReducedMotion
prependPlugins processWrapper promptCacheTtl promptSuggestionEnabled proxyAuthHelper quietHours remote
remoteControl remoteControlAtStartup remoteMessageReceipts remoteTools requiredMaximumVersion
requiredMinimumVersion respectGitignore respondToBashCommands responseComparisonEnabled sandbox
showClearContextOnPlanAccept showMessageTimestamps showThinkingSummaries showTurnDuration
skillListingBudgetFraction skillListingMaxDescChars skillOverrides skipDangerousModePermissionPrompt
skipWebFetchPreflight skipWorkflowUsageWarning spellcheck spinnerTipsEnabled spinnerTipsOverride
spinnerVerbs sshConfigs sshHostCommands statusLine strictKnownMarketplaces strictPluginOnlyCustomization
subagentPromptCacheTtl subagentStatusLine switchModelsOnFlag syncClaudeAiPlugins syncClaudeAiSkills
syntaxHighlightingDisabled taskOutputMaxChars teammateMode terminalProgressBarEnabled
terminalTitleFromRename theme timeFormat timeZone todoFeatureEnabled totalTokensReminder
totalTokensReminderAfterUserTurn totalTokensReminderBudget tui ultracode verbose viewMode
vimInsertModeRemaps voice wheelScrollAccelerationEnabled workflowKeywordTriggerEnabled
workflowSizeGuideline worktree wslInheritsWindowsSettings xaaIdp
""".split()
)


class SettingsError(ValueError):
    """A settings source cannot be used: unreadable, not JSON, or a value of the wrong shape."""


@attrs.frozen(kw_only=True)
class PermissionSettings:
    """The ``permissions`` block after merging; rules already parsed."""

    allow: tuple[PermissionRule, ...] = ()
    ask: tuple[PermissionRule, ...] = ()
    deny: tuple[PermissionRule, ...] = ()
    default_mode: PermissionMode | None = None
    additional_directories: tuple[str, ...] = ()

    def to_rules(
        self,
        *,
        cwd: Path,
        home: Path | None = None,
        allowed_tools: str | Sequence[str] | None = None,
        disallowed_tools: str | Sequence[str] | None = None,
    ) -> PermissionRules:
        """Rules for :func:`queryloop.handlers.tools.services.permissions.decide`, plus the CLI flag values.

        Additional directories are resolved: ``~/x`` against ``home``, relative ones
        against ``cwd``.
        """
        home_dir = home if home is not None else Path.home()
        directories = []
        for raw in self.additional_directories:
            if raw == "~" or raw.startswith("~/"):
                directories.append(home_dir / raw[2:])
            else:
                directories.append(Path(cwd, raw))
        rules = PermissionRules(allow=self.allow, ask=self.ask, deny=self.deny, additional_directories=directories)
        return rules.with_cli_flags(allowed_tools=allowed_tools, disallowed_tools=disallowed_tools)


@attrs.frozen(kw_only=True)
class Settings:
    """Merged settings of every source that exists, lowest precedence first in ``sources``."""

    permissions: PermissionSettings = PermissionSettings()
    hooks: HookConfig = attrs.field(factory=HookConfig)
    env: Mapping[str, str] = attrs.field(factory=lambda: MappingProxyType({}))
    model: str | None = None
    sources: tuple[Path | str, ...] = ()
    raw: Mapping[str, Any] = attrs.field(factory=lambda: MappingProxyType({}))
    ignored: tuple[str, ...] = ()  # what an untrusted folder's files would have widened, one line each


# ----------------------------------------------------------------------- loading


def _label(path: Path, *, cwd: Path, home: Path) -> str:
    """How a file is named in messages: relative to cwd, else ``~/...``, else absolute."""
    for base, prefix in ((cwd, ""), (home, "~/")):
        try:
            return prefix + str(path.relative_to(base))
        except ValueError:
            continue
    return str(path)


def _where(path: str) -> list[str | int]:
    """``$.hooks.Stop[0].matcher`` as the parts a :class:`Source` keys its lines by."""
    return [int(i) if i else name for name, i in re.findall(r"\.([^.\[]+)|\[(\d+)\]", path)]


def _fail(source: Source, where: list[str | int], message: str) -> SettingsError:
    from queryloop.fsm import json_path

    return SettingsError(str(source.problem(where, f"{json_path(where)}: {message}")))


def _validate(source: Source) -> dict[str, object]:
    from queryloop.fsm import schema_problems

    document = source.data
    problems = schema_problems(SETTINGS_SCHEMA, source)
    if problems:
        raise SettingsError(str(problems[0]))  # one line: the first problem in the file
    permissions = document.get("permissions", {})
    for key in ("allow", "ask", "deny"):
        for i, text in enumerate(permissions.get(key, ())):
            try:
                parse_rule(text)
            except PermissionRuleError as exc:
                raise _fail(source, ["permissions", key, i], str(exc)) from None
    if "hooks" in document:
        try:
            parse_hook_config(document["hooks"])
        except HookConfigError as exc:
            raise _fail(source, _where(exc.path), exc.problem) from None
    return cast(dict[str, Any], document)


def _parse_json(text: str, label: str) -> dict[str, object]:
    # Here, not at the top: the JSON reader's module brings PyYAML and jsonschema, which a run without a
    # settings file never needs.
    from queryloop.fsm import read_json

    try:
        source = read_json(text, label)
    except SpecError as exc:
        raise SettingsError(str(exc.first)) from None
    return _validate(source)


def _read_file(path: Path, label: str) -> dict[str, object]:
    try:
        text = read_text_file(path)
    except UnreadableFileError as exc:
        raise SettingsError(f"{label}: {exc.reason}") from None
    except OSError as exc:
        raise SettingsError(f"{label}: cannot read the settings file: {exc.strerror or exc}") from None
    document = _parse_json(text, label)
    _warn_unknown_keys(document, label, str(path.resolve()))
    return document


_warned: set[tuple[str, tuple[str, ...]]] = set()  # (file, its unknown keys) already warned about in this process


def _warn_unknown_keys(document: Mapping[str, object], label: str, where: str) -> None:
    """One line on stderr per file (once per process) naming its top-level keys that neither
    queryloop nor Claude Code knows, each with the nearest known key; the run goes on."""
    known = CLAUDE_CODE_SETTINGS_KEYS | SETTINGS_SCHEMA["properties"].keys()
    unknown = tuple(key for key in document if key not in known)
    if not unknown or (where, unknown) in _warned:
        return
    _warned.add((where, unknown))
    named = []
    for key in unknown:
        near = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.75)
        named.append(f"{key!r} (did you mean {near[0]!r}?)" if near else repr(key))
    plural = "s" if len(unknown) > 1 else ""
    print(f"queryloop: {label}: unknown settings key{plural} {', '.join(named)}; ignored", file=sys.stderr)


def _freeze_key(value: object) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def merge_settings(lower: Mapping[str, object], higher: Mapping[str, object]) -> dict[str, object]:
    """Merge two settings documents: objects recursively, lists concatenated without
    duplicates (lower first), any other value from ``higher``."""
    merged = copy.deepcopy(dict(lower))
    for key, value in higher.items():
        current = merged.get(key)
        if isinstance(current, dict) and isinstance(value, dict):
            merged[key] = merge_settings(current, value)
        elif isinstance(current, list) and isinstance(value, list):
            seen = {_freeze_key(item) for item in current}
            combined = list(current)
            for item in value:
                fingerprint = _freeze_key(item)
                if fingerprint not in seen:
                    seen.add(fingerprint)
                    combined.append(copy.deepcopy(item))
            merged[key] = combined
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def git_root(cwd: Path) -> Path | None:
    """The git work tree holding ``cwd``: its nearest ancestor (or itself) with a ``.git``; None outside one."""
    for folder in (cwd, *cwd.parents):
        if (folder / ".git").exists():
            return folder
    return None


def _claude_dir(home: Path | None, claude_dir: Path | None) -> Path:
    if claude_dir is not None:
        return claude_dir
    if home is None and (configured := os.environ.get("CLAUDE_CONFIG_DIR")):
        return Path(configured).expanduser()
    return (home if home is not None else Path.home()) / ".claude"


def settings_files(*, cwd: Path, home: Path, claude_dir: Path) -> dict[str, tuple[Path, ...]]:
    """The settings files of each source, lowest precedence first (Claude Code's, then queryloop's own).

    Claude Code 2.1.235 reads a project's ``.claude/settings.json`` in ``cwd`` only, and its
    ``settings.local.json`` in ``cwd`` and then, above it, at the root of the git work tree
    ``cwd`` is in (observed with both files and either one alone).
    """
    root = git_root(cwd)
    local = [cwd / ".claude" / "settings.local.json"]
    if root is not None and root != cwd:
        local.append(root / ".claude" / "settings.local.json")
    return {
        "user": (claude_dir / "settings.json", home / ".queryloop" / "settings.json"),
        "project": (cwd / ".claude" / "settings.json", cwd / ".queryloop" / "settings.json"),
        "local": (*local, cwd / ".queryloop" / "settings.local.json"),
    }


def load_settings(
    *,
    cwd: Path,
    home: Path | None = None,
    settings_arg: str | None = None,
    sources: Collection[str] = SETTING_SOURCES,
    claude_dir: Path | None = None,
    trusted: bool | None = None,
) -> Settings:
    """Load, validate and merge every settings source that exists.

    ``settings_arg`` is the ``--settings`` value: inline JSON if it starts with
    ``{``, otherwise a file path (relative to ``cwd``) that must exist. Missing user,
    project and local files are skipped; ``sources`` (``--setting-sources``) names the
    ones read at all, ``--settings`` always is. ``claude_dir`` is Claude Code's user
    directory (default: ``home/.claude`` when ``home`` is given, else
    ``$CLAUDE_CONFIG_DIR``, else ``~/.claude``). ``trusted``: whether ``cwd``'s own files
    (project and local) may widen what runs (None: as the trust record says,
    ``queryloop.run.trust``); an untrusted folder's files lose what would, each key named
    in ``Settings.ignored``. Raises :class:`SettingsError`.
    """
    home_dir = home if home is not None else Path.home()
    files = settings_files(cwd=cwd, home=home_dir, claude_dir=_claude_dir(home, claude_dir))
    read: list[tuple[Path | str, dict[str, object], bool]] = []  # (where, document, the user's own)
    for source, paths in files.items():
        for path in paths if source in sources else ():
            if path.is_file():
                own = source == "user" or path in files["user"]  # cwd == home: a user file, not the folder's
                read.append((path, _read_file(path, _label(path, cwd=cwd, home=home_dir)), own))
    if settings_arg is not None:
        read.append(_settings_arg(settings_arg, cwd=cwd, home=home_dir))
    ignored: list[str] = []
    folders = any(not own for _, _, own in read)  # the trust record (large, for Claude Code's users) only if it counts
    if folders and not (trusted if trusted is not None else is_trusted(cwd, home=home)):
        read, ignored = _restricted(read, cwd=cwd, home=home_dir)
    merged: dict[str, object] = {}
    for _, document, _ in read:
        merged = merge_settings(merged, document)
    return _build(merged, sources=tuple(where for where, _, _ in read), ignored=tuple(ignored))


def _settings_arg(value: str, *, cwd: Path, home: Path) -> tuple[Path | str, dict[str, object], bool]:
    """``--settings``: inline JSON, or a file that must exist; the user's own either way."""
    if value.lstrip().startswith("{"):
        inline = _parse_json(value, "--settings")
        _warn_unknown_keys(inline, "--settings", value)
        return value, inline, True
    path = home / value[2:] if value == "~" or value.startswith("~/") else Path(cwd, value)
    if not (path.exists() or path.is_symlink()):  # a FIFO or a loop is read, and the reader says what it is
        raise SettingsError(
            f"--settings: {value}: no such settings file (pass a path to a JSON file or an inline JSON object)"
        )
    return path, _read_file(path, _label(path, cwd=cwd, home=home)), True


def _restricted(
    read: list[tuple[Path | str, dict[str, Any], bool]], *, cwd: Path, home: Path
) -> tuple[list[tuple[Path | str, dict[str, object], bool]], list[str]]:
    """An untrusted folder's files without what would widen what runs, and a line for each key left out."""
    users: dict[str, Any] = {}
    for _, document, own in read:
        users = merge_settings(users, document) if own else users
    kept: list[tuple[Path | str, dict[str, Any], bool]] = []
    ignored: list[str] = []
    for where, document, own in read:
        if not own:
            document, widenings = restrict(document, trusted=users)
            label = _label(Path(where), cwd=cwd, home=home)
            ignored.extend(w.text(label) for w in widenings)
        kept.append((where, document, own))
    return kept, ignored


def _build(document: Mapping[str, Any], *, sources: tuple[Path | str, ...], ignored: tuple[str, ...]) -> Settings:
    permissions = document.get("permissions", {})
    default_mode = permissions.get("defaultMode")
    return Settings(
        permissions=PermissionSettings(
            allow=tuple(parse_rule(r) for r in permissions.get("allow", ())),
            ask=tuple(parse_rule(r) for r in permissions.get("ask", ())),
            deny=tuple(parse_rule(r) for r in permissions.get("deny", ())),
            default_mode=cast(PermissionMode, default_mode) if default_mode is not None else None,
            additional_directories=tuple(permissions.get("additionalDirectories", ())),
        ),
        # disableAllHooks: none of the settings' hooks run, as in Claude Code 2.1.235 (an untrusted folder's is dropped)
        hooks=parse_hook_config(document["hooks"])
        if "hooks" in document and document.get("disableAllHooks") is not True
        else HookConfig(),
        env=MappingProxyType(dict(document.get("env", {}))),
        model=document.get("model"),
        sources=sources,
        raw=MappingProxyType(copy.deepcopy(dict(document))),
        ignored=ignored,
    )
