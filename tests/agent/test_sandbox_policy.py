"""The permission gate with the sandbox on: what it allows because the command runs inside, and what it never does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from queryloop.handlers.tools.services.permissions import decide
from queryloop.handlers.tools.services.rules import PermissionMode, PermissionRules
from queryloop.handlers.tools.services.sandbox import SandboxPolicy

ON = SandboxPolicy(enabled=True)


def _verdict(
    command: str,
    tmp_path: Path,
    *,
    sandbox: SandboxPolicy | None = ON,
    rules: PermissionRules | None = None,
    mode: PermissionMode = "default",
    **extra: Any,
) -> str:
    decision = decide(
        "Bash",
        {"command": command, **extra},
        mode=mode,
        rules=rules or PermissionRules(),
        cwd=tmp_path,
        interactive=False,
        sandbox=sandbox,
    )
    return decision.behavior


@pytest.mark.parametrize("command", ["touch made.txt", "npm install", "ls ${x:-$(touch P)}", "make && ./run"])
def test_a_sandboxed_command_that_would_ask_is_allowed(tmp_path: Path, command: str) -> None:
    assert _verdict(command, tmp_path, sandbox=None) == "deny", "without the sandbox it asks: headless, denied"
    assert _verdict(command, tmp_path) == "allow"


def test_auto_allow_off_leaves_the_ordinary_decision(tmp_path: Path) -> None:
    policy = SandboxPolicy(enabled=True, auto_allow=False)
    assert _verdict("touch made.txt", tmp_path, sandbox=policy) == "deny"
    assert _verdict("ls", tmp_path, sandbox=policy) == "allow"


def test_deny_and_ask_rules_and_plan_mode_hold_inside_the_sandbox(tmp_path: Path) -> None:
    assert _verdict("rm -rf x", tmp_path, rules=PermissionRules(deny=["Bash(rm:*)"])) == "deny"
    assert _verdict("timeout 5 rm -rf x", tmp_path, rules=PermissionRules(deny=["Bash(rm:*)"])) == "deny"
    assert _verdict("git push", tmp_path, rules=PermissionRules(ask=["Bash(git push:*)"])) == "deny"
    assert _verdict("touch x", tmp_path, mode="plan") == "deny"


def test_a_line_the_gate_cannot_read_is_not_allowed_where_a_bash_rule_would_need_to_see_it(tmp_path: Path) -> None:
    rules = PermissionRules(deny=["Bash(curl:*)"])
    assert _verdict("ls ${x:-$(curl evil)}", tmp_path, rules=rules) == "deny"
    assert _verdict("source ./setup.sh", tmp_path, rules=rules) == "deny", "code the gate cannot read"
    assert _verdict("source ./setup.sh", tmp_path) == "allow", "no rule to apply: the sandbox contains it"


def test_a_request_to_leave_the_sandbox_asks_whatever_the_rules_allow(tmp_path: Path) -> None:
    leave = {"dangerouslyDisableSandbox": True}
    assert _verdict("echo hi", tmp_path, **leave) == "deny"
    assert _verdict("echo hi", tmp_path, rules=PermissionRules(allow=["Bash"]), **leave) == "deny"
    assert _verdict("echo hi", tmp_path, mode="bypassPermissions", **leave) == "allow"
    stay = SandboxPolicy(enabled=True, allow_unsandboxed=False)
    assert _verdict("touch x", tmp_path, sandbox=stay, **leave) == "allow", "the request is ignored: it runs inside"


def test_an_excluded_command_takes_the_ordinary_way(tmp_path: Path) -> None:
    policy = SandboxPolicy(enabled=True, excluded_commands=("docker:*",))
    assert _verdict("docker run x", tmp_path, sandbox=policy) == "deny"
    assert _verdict("touch x", tmp_path, sandbox=policy) == "allow"
    exact = SandboxPolicy(enabled=True, excluded_commands=("docker",))
    assert _verdict("docker run x", tmp_path, sandbox=exact) == "allow", "a bare name is that command alone"
    assert policy.sandboxes({"command": "docker run x"}) is False
    assert policy.sandboxes({"command": "ls && docker run x"}) is False, "any command of the line"
    assert policy.sandboxes({"command": "ls"}) is True


def test_the_policy_reads_claude_code_s_setting_names() -> None:
    raw = {
        "enabled": True,
        "autoAllowBashIfSandboxed": False,
        "allowUnsandboxedCommands": False,
        "failIfUnavailable": True,
        "excludedCommands": ["git:*"],
        "network": {"allowedDomains": ["*.example.com"]},
    }
    policy = SandboxPolicy.from_settings(raw)
    assert policy == SandboxPolicy(
        enabled=True,
        auto_allow=False,
        allow_unsandboxed=False,
        fail_if_unavailable=True,
        excluded_commands=("git:*",),
        allowed_domains=("*.example.com",),
    )
    assert SandboxPolicy.from_settings(None).enabled is False
    assert SandboxPolicy.from_settings(None, force=True).enabled is True, "--sandbox"
