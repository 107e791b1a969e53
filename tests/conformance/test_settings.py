"""Settings keys beside Claude Code 2.1.235: what each key of its settings does in a headless run, in both programs.

Each row gives one settings document in ``--settings`` (no trust needed) and compares what a
script sees: the files made and calls refused, the mode, the request's model and key, what
the model was told, the ``init`` line, a warning naming the key. Most rows carry an allow
rule for ``touch`` beside the key and a ``touch`` call: a made file shows the document was
read (Claude Code drops a whole file whose values do not validate, without a word). Keys
that change nothing a headless run shows are given together, with valid values, in one row.
Every top-level key of Claude Code's schema is given by some row or named in
:data:`NOT_PROBED` with the reason; :func:`test_every_settings_key_has_a_row` keeps it so.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from queryloop.run.settings import CLAUDE_CODE_SETTINGS_KEYS

from .reference import Observed, Probe, Row, held_to_its_row

pytestmark = pytest.mark.slow  # two programs per probe

TOUCH = (("Bash", {"command": "touch made"}),)
ALLOW_TOUCH = {"permissions": {"allow": ["Bash(touch:*)"]}}
MADE = frozenset({"project/made"})
SETTINGS = "configuration.md#settings"


def _settings(
    document: Mapping[str, Any], calls: tuple[tuple[str, Mapping[str, Any]], ...] = TOUCH, **kw: Any
) -> Probe:
    args = (*kw.pop("args", ()), "--settings", json.dumps(document))
    return Probe(calls=calls, args=args, **kw)


def _with_touch(**keys: Any) -> Probe:
    """``keys`` beside an allow rule for ``touch``, and a ``touch`` call."""
    return _settings({**keys, **ALLOW_TOUCH})


def _tool_results(seen: Observed) -> tuple[str, ...]:
    last = seen.requests[-1].messages if seen.requests else ()
    blocks = [b for m in last if isinstance(m.get("content"), list) for b in m["content"]]
    return tuple(str(b.get("content")).strip() for b in blocks if b.get("type") == "tool_result")


def _init(seen: Observed) -> Mapping[str, Any]:
    return next((line for line in seen.lines if line.get("subtype") == "init"), {})


def _told(seen: Observed, text: str) -> bool:
    return any(text in json.dumps([r.system, r.tool_definitions, r.messages]) for r in seen.requests)


READERS: dict[str, Callable[[Observed], object]] = {
    "returncode": lambda seen: seen.returncode,
    "made": lambda seen: seen.made,
    "denied": lambda seen: seen.denied,
    "mode": lambda seen: seen.mode,
    "tool_results": _tool_results,
    "model": lambda seen: seen.requests[0].model if seen.requests else None,
    "api_key": lambda seen: seen.requests[0].headers.get("x-api-key") if seen.requests else None,
    "co_authored_by": lambda seen: _told(seen, "Co-Authored-By"),
    "output_style": lambda seen: _init(seen).get("output_style"),
    "mcp_servers": lambda seen: tuple((s["name"], s["status"]) for s in _init(seen).get("mcp_servers", ())),
    "warned": lambda seen: "settings key" in seen.stderr,
}

READ = {"returncode": 0, "made": MADE}  # the document was read, the run answered
QUIET = {**READ, "warned": False}
SERVER = {".mcp.json": {"mcpServers": {"probe": {"type": "stdio", "command": "false"}}}}

# Keys that change nothing a headless run shows, with a value Claude Code 2.1.235's schema takes.
UNSEEN: dict[str, Any] = {
    **dict.fromkeys(
        """agentPushNotifEnabled allowAllClaudeAiMcps alwaysThinkingEnabled autoCompactEnabled
        autoContinueAtUsageLimit autoDreamEnabled autoMemoryEnabled autoScrollEnabled autoUploadSessions
        awaySummaryEnabled channelsEnabled disableAgentView disableArtifact disableBundledSkills
        disableClaudeAiConnectors disableCommandPluginSources disableRemoteControl disableSideloadFlags
        disableSkillShellExecution disableWorkflows doneMeansMerged emojiCompletionEnabled enableArtifact
        enableWorkflows fastModePerSessionOptIn fileCheckpointingEnabled
        inputNeededNotifEnabled isolatePeerMachines precomputeCompactionEnabled prefersReducedMotion
        promptSuggestionEnabled remoteControlAtStartup respectGitignore respondToBashCommands
        showClearContextOnPlanAccept showMessageTimestamps showThinkingSummaries showTurnDuration
        skipDangerousModePermissionPrompt skipWebFetchPreflight skipWorkflowUsageWarning spinnerTipsEnabled
        switchModelsOnFlag syncClaudeAiSkills syntaxHighlightingDisabled terminalProgressBarEnabled
        terminalTitleFromRename totalTokensReminderAfterUserTurn verbose forceRemoteSettingsRefresh
        wheelScrollAccelerationEnabled workflowKeywordTriggerEnabled wslInheritsWindowsSettings""".split(),
        False,
    ),
    "$schema": "https://json.schemastore.org/claude-code-settings.json",
    "askUserQuestionTimeout": "5m",
    "autoCompactWindow": 200_000,
    "autoUpdatesChannel": "stable",
    "crossSessionInbound": "hold",
    "daemonColdStart": "ask",
    "defaultShell": "bash",
    "dialogExpiry": "5m",
    "feedbackDrafts": "quiet",
    "feedbackSurveyRate": 0,
    "minimumVersion": "1.0.0",
    "parentSettingsBehavior": "merge",
    "plansDirectory": "plans",
    "prUrlTemplate": "https://example.invalid/{number}",
    "requiredMinimumVersion": "1.0.0",
    "skillListingBudgetFraction": 0.5,
    "skillListingMaxDescChars": 100,
    "spellcheck": {"enabled": False},
    "statusLine": {"type": "command", "command": "echo status"},
    "totalTokensReminderBudget": 1000,
    "tui": "default",
    "viewMode": "default",
    "cleanupPeriodDays": 30,
    "forceLoginMethod": "console",
}

#: Keys no row gives, each with why: the shape of their value is not known offline (Claude Code's schema
#: in its program names them without it), or what they do needs more than a headless run shows.
NOT_PROBED: dict[str, str] = {
    **dict.fromkeys(
        """additionalDirectoryConfigRoots allowClaudeInChromeWithManagedMcp allowNestedModelAccessUnderForceLogin
        allowedChannelPlugins allowedHttpHookUrls allowedMarketplaces allowedMcpServers allowedProviders appendPlugins
        attributionProject attributionProjectPolicy autoCompactOfferAnswer autoCompactRaisedForLoad availableModels
        availableModelsMatch bashEditDiffEnabled bashOutputMaxChars blockedMarketplaces claudeMdExcludes
        clawdFileProgressEnabled companyAnnouncements deniedMcpServers deniedModels desktopMcpServersListScope
        desktopSessionCleanupPeriodDays disableDirectMcpSkills disableReplyCheck disableWindowsBashCommandSplit
        downloadsMirrorUrl enabledPlugins fallbackModel fileSuggestion footerLinksRegexes forceLoginOrgUUID
        gatewayInternalNetworks httpHookAllowedEnvVars idleCompaction keybindingFlavor managedMcpServers
        managedSourcesBehavior maxEffortLevel maxProseWidth modelCatalogPublicKey modelCatalogUrl modelOverrides
        modelPicker modelPricing modelSettings pluginConfigs pluginSuggestionMarketplaces policyHelper policyHelpers
        precomputeArmTokens prependPlugins promptCacheTtl remoteControl remoteMessageReceipts remoteTools
        responseComparisonEnabled skillOverrides spinnerTipsOverride spinnerVerbs sshHostCommands
        strictKnownMarketplaces strictPluginOnlyCustomization subagentPromptCacheTtl subagentStatusLine
        syncClaudeAiPlugins taskOutputMaxChars theme timeFormat timeZone totalTokensReminder vimInsertModeRemaps
        voice workflowSizeGuideline worktree additionalMarketplaces extraKnownMarketplaces attribution breakReminder
        quietHours remote xaaIdp sshConfigs editorMode modelProposedGoals preferredNotifChannel teammateMode
        claudeMd language pluginTrustMessage autoMemoryDirectory requiredMaximumVersion advisorModel""".split(),
        "the shape of its value, or its effect, is not pinned offline yet",
    ),
    **dict.fromkeys(
        "awsAuthRefresh awsCredentialExport gcpAuthRefresh otelHeadersHelper processWrapper proxyAuthHelper".split(),
        "a command for a cloud provider's credentials, telemetry headers or a proxy: none is used offline",
    ),
    "agent": "the main thread as a custom agent: refused as a flag too (test_flags.py, --agent)",
    "allowManagedHooksOnly": "only managed settings set it",
    "allowManagedMcpServersOnly": "only managed settings set it",
    "allowManagedPermissionRulesOnly": "only managed settings set it",
    "enforceAvailableModels": "only managed settings set it",
    "effortLevel": "requests carry no effort parameter (test_flags.py, --effort)",
    "fastMode": "queryloop has no fast mode (the init line says so)",
    "includeGitInstructions": "the system prompt's wording is each program's own",
    "disableAutoMode": "there is no auto mode (test_flags.py, --permission-mode auto)",
    "forceLoginGatewayUrl": "no login: the API key is the only credential",
    "todoFeatureEnabled": "there is no TodoWrite tool to switch off",
    "ultracode": "no such mode",
    "hooks": "test_hooks.py and test_hook_events.py give hooks in every row",
}

ROWS: dict[str, Row] = {
    "permissions.allow": Row(probe=_with_touch(), queryloop={**READ, "denied": ()}),
    "permissions.deny": Row(
        probe=_settings({"permissions": {"deny": ["Bash"]}}, args=("--allowedTools", "Bash")),
        queryloop={"denied": (), "made": frozenset()},  # a deny rule's refusal is not listed, in either
    ),
    "permissions.ask": Row(
        probe=_settings({"permissions": {"ask": ["Bash(touch:*)"]}}, args=("--allowedTools", "Bash")),
        queryloop={"denied": ("Bash",), "made": frozenset()},
    ),
    "permissions.defaultMode": Row(
        probe=_settings({"permissions": {"defaultMode": "acceptEdits"}}), queryloop={"mode": "acceptEdits"}
    ),
    "permissions.additionalDirectories": Row(
        probe=_settings(
            {"permissions": {"additionalDirectories": [".."]}},
            (("Read", {"file_path": "../outside.txt"}),),
            files={"../outside.txt": "x"},
        ),
        queryloop={"denied": ()},
    ),
    "permissions.disableBypassPermissionsMode": Row(
        probe=_settings(
            {"permissions": {"disableBypassPermissionsMode": "disable"}},
            args=("--permission-mode", "bypassPermissions"),
            env={"IS_SANDBOX": "1"},
        ),
        queryloop={"mode": "default", "made": frozenset()},
    ),
    "env": Row(
        probe=_settings(
            {"env": {"PROBE_VAR": "from-settings"}, "permissions": {"allow": ["Bash(printenv:*)"]}},
            (("Bash", {"command": "printenv PROBE_VAR"}),),
        ),
        queryloop={"tool_results": ("from-settings",)},
    ),
    "model": Row(probe=_settings({"model": "sonnet"}, model=None), queryloop={"model": "claude-sonnet-5"}),
    "apiKeyHelper beside ANTHROPIC_API_KEY": Row(
        probe=_settings({"apiKeyHelper": "echo key-from-helper"}), queryloop={"api_key": "probe"}
    ),
    "includeCoAuthoredBy false": Row(
        probe=_with_touch(includeCoAuthoredBy=False), queryloop={**READ, "co_authored_by": False}
    ),
    "includeCoAuthoredBy true": Row(
        probe=_with_touch(includeCoAuthoredBy=True),
        queryloop={**READ, "co_authored_by": False},
        reference={**READ, "co_authored_by": True},
        design="the model is not told to sign commits with a Co-Authored-By trailer: the prompts are queryloop's "
        f"own words, and a commit's message is the user's ([settings]({SETTINGS}))",
    ),
    "outputStyle": Row(
        probe=_with_touch(outputStyle="Explanatory"),
        queryloop={**READ, "output_style": "default"},
        reference={**READ, "output_style": "Explanatory"},
        design="there are no output styles yet: the key is kept and the system prompt is the same "
        f"([settings]({SETTINGS}))",
    ),
    "disableAllHooks": Row(
        probe=_with_touch(
            disableAllHooks=True,
            hooks={"UserPromptSubmit": [{"hooks": [{"type": "command", "command": "touch hooked"}]}]},
        ),
        queryloop=READ,
    ),
    "sandbox.enabled": Row(
        probe=_with_touch(sandbox={"enabled": True, "autoAllowBashIfSandboxed": True}),
        queryloop=READ,
        reference={"returncode": 0, "made": frozenset()},
        design="queryloop's sandbox is bubblewrap, which runs here; Claude Code's runtime cannot start on these "
        "machines (it fails writing /proc/self/uid_map), so its sandboxed call fails "
        "([security](security.md#the-sandbox))",
    ),
    "enableAllProjectMcpServers": Row(
        probe=_settings({"enableAllProjectMcpServers": True}, (), files=SERVER),
        queryloop={"mcp_servers": (("probe", "failed"),)},
    ),
    "enabledMcpjsonServers": Row(
        probe=_settings({"enabledMcpjsonServers": ["probe"]}, (), files=SERVER),
        queryloop={"mcp_servers": (("probe", "failed"),)},
    ),
    "disabledMcpjsonServers": Row(
        probe=_settings({"enableAllProjectMcpServers": True, "disabledMcpjsonServers": ["probe"]}, (), files=SERVER),
        queryloop={"mcp_servers": ()},
    ),
    "mcpServers": Row(
        probe=_settings({"mcpServers": {"probe": {"type": "stdio", "command": "false"}}}, ()),
        queryloop={"mcp_servers": (("probe", "failed"),)},
        reference={"mcp_servers": ()},
        design="a settings file's mcpServers are read, as .mcp.json's are (Claude Code 2.1.235 reads them only from "
        "its own ~/.claude.json) ([MCP](mcp.md#mcp-servers))",
    ),
    "the keys a headless run does not show": Row(probe=_with_touch(**UNSEEN), queryloop=QUIET),
    "a key neither program knows": Row(
        probe=_with_touch(probeUnknownKey=1),
        queryloop={**READ, "warned": True},
        reference={**READ, "warned": False},
        design="a top-level key neither program knows is likely a misspelling: it is named in a warning "
        f"(Claude Code ignores it without a word) ([settings]({SETTINGS}))",
    ),
    "a known key with a value of the wrong type": Row(
        probe=_with_touch(cleanupPeriodDays="soon"),
        queryloop=QUIET,
        reference={"returncode": 0, "made": frozenset()},
        design="a wrong value for a key queryloop does not act on is kept as it is; Claude Code drops the "
        f"whole file without a word, its rules and hooks with it ([settings]({SETTINGS}))",
    ),
}


def _read(observed: Observed, key: str) -> object:
    return READERS[key](observed)


@pytest.mark.parametrize("name", list(ROWS))
def test_each_settings_probe_is_the_same_in_both_programs_or_differs_by_design(name: str, tmp_path: Path) -> None:
    held_to_its_row(ROWS[name], _read, tmp_path)


def _documents(probe: Probe) -> Iterator[Mapping[str, Any]]:
    args = list(probe.args)
    for i, arg in enumerate(args[:-1]):
        if arg == "--settings":
            yield json.loads(args[i + 1])


def test_every_settings_key_has_a_row() -> None:
    """Each top-level key of Claude Code's schema is given in some row, or named in NOT_PROBED with why."""
    given = {key for row in ROWS.values() for document in _documents(row.probe) for key in document}
    missing = sorted(CLAUDE_CODE_SETTINGS_KEYS - given - NOT_PROBED.keys())
    assert missing == [], f"settings keys without a row: {missing} (add one to tests/conformance/test_settings.py)"
