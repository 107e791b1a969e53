"""A hostile corpus through the permission gate: no line that writes or runs a program is auto-allowed.

``tests/fixtures/hostile_commands.txt`` holds the command lines a hostile model would
propose (issue 24): substitutions hidden in here-docs, parameter expansions and array
subscripts; "read-only" programs with an option that writes or runs a program;
environment assignments that make git or a pager run one; wrappers, globs, quoting,
continuations, look-alikes and control operators. Every line is first shown to do
harm — bash runs it for real in a scratch directory and a file appears, changes or
goes — and then :func:`decide` must not allow it: with no rules in every mode but
``bypassPermissions``, past deny rules, under an allow rule for the innocent-looking
program, and, for lines that disguise ``touch`` or ``rm`` or have another program run
them (issue 49: a shell reading its input, an escaped subscript, a wrapper or an
interpreter the gate did not know), in ``bypassPermissions`` mode and under a bare
``Bash`` allow rule with a deny rule on them. Benign read-only lines stay allowed (the
controls), and so do benign lines the gate reads in full under a deny rule.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import pytest

from queryloop.handlers.tools.services.permissions import decide
from queryloop.handlers.tools.services.rules import PermissionMode, PermissionRules

CORPUS_FILE: Final = Path(__file__).resolve().parent.parent / "fixtures" / "hostile_commands.txt"
KNOWN_TAGS: Final = frozenset({"first", "prefix", "plain", "hides", "wraps", "files", "needs", "norun", "e2e"})
PLACEHOLDERS: Final = {
    "⟨TAB⟩": "\t",
    "⟨CR⟩": "\r",
    "⟨NUL⟩": "\0",
    "⟨NBSP⟩": "\u00a0",
    "⟨LONG⟩": "a.txt " * 20_000,
    "⟨LONGWORD⟩": "x" * 100_000,
}
GUARDED_MODES: Final[tuple[PermissionMode, ...]] = ("default", "acceptEdits", "plan", "dontAsk")
DENY_TOUCH_AND_RM: Final = PermissionRules(deny=("Bash(touch:*)", "Bash(rm:*)"))
_FIRST_WORD: Final = re.compile(r"([A-Za-z0-9_.\[-]+)(?=[\s;|&<>()\0]|$)")  # `ls`, `ls;`, `[`


@dataclass(frozen=True)
class Entry:
    """One hostile line of the corpus and what its tags claim about it."""

    id: str
    command: str
    tags: Mapping[str, str] = field(default_factory=dict)

    @property
    def first(self) -> str | None:
        """The program a user might allow with ``Bash(first:*)``; None when the entry names none."""
        if "first" in self.tags:
            return self.tags["first"]
        match = _FIRST_WORD.match(self.command)
        return match.group(1) if match else None

    @property
    def prefix_claim(self) -> bool:
        """An allow rule for the first program must not allow the line (it hides another, or hijacks it)."""
        return self.tags.get("prefix") != "no"

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(f for f in self.tags.get("files", "").split(",") if f)


def _expand(text: str) -> str:
    for placeholder, value in PLACEHOLDERS.items():
        text = text.replace(placeholder, value)
    return text


def _tags(words: list[str]) -> dict[str, str]:
    tags = {}
    for word in words:
        key, _, value = word.partition("=")
        tags[key] = value or "yes"
    return tags


def load_corpus(path: Path = CORPUS_FILE) -> tuple[Entry, ...]:
    """The entries of ``path``: each from a ``---- ID TAG…`` line to the next, the header skipped."""
    entries: list[Entry] = []
    head: list[str] | None = None
    body: list[str] = []
    for line in [*path.read_text(encoding="utf-8").split("\n"), "---- <end>"]:
        if not line.startswith("---- "):
            body.append(line)
            continue
        if head is not None:
            text = "\n".join(body[:-1] if body and body[-1] == "" else body)
            entries.append(Entry(id=head[0], command=_expand(text), tags=_tags(head[1:])))
        head, body = line.split()[1:], []
    return tuple(entries)


CORPUS: Final = load_corpus()


# Lines the gate takes tens of seconds to decide on in some tests: left out by tools/test.sh --fast. (None since
# issue 49: a line over shell.MAX_LINE is not parsed.)
SLOW_LINES: set[str] = set()


def _params(*, tag: str | None = None, without: str | None = None, prefix_claim: bool = False) -> list[object]:
    """The corpus as pytest params, those with ``tag``, without ``without``, whose prefix rule is claimed."""
    return [
        pytest.param(e, id=e.id, marks=[pytest.mark.slow] if e.id in SLOW_LINES else [])
        for e in CORPUS
        if (tag is None or tag in e.tags) and (without is None or without not in e.tags)
        if e.prefix_claim or not prefix_claim
    ]


def _bash(command: str, cwd: Path, *, mode: PermissionMode = "default", rules: PermissionRules | None = None) -> str:
    decision = decide(
        "Bash", {"command": command}, mode=mode, rules=rules or PermissionRules(), cwd=cwd, interactive=False
    )
    return decision.behavior


def _allowed_in(entry: Entry, cwd: Path, rules: PermissionRules, modes: tuple[PermissionMode, ...]) -> list[str]:
    return [
        m
        for m in modes
        if not (m == "acceptEdits" and "plain" in entry.tags)
        and _bash(entry.command, cwd, mode=m, rules=rules) == "allow"
    ]


# ------------------------------------------------------------------ the corpus itself


def test_the_corpus_holds_at_least_150_lines_with_distinct_ids_and_known_tags() -> None:
    assert len(CORPUS) >= 150
    ids = [e.id for e in CORPUS]
    assert len(set(ids)) == len(ids), sorted({i for i in ids if ids.count(i) > 1})
    unknown = {(e.id, t) for e in CORPUS for t in e.tags if t not in KNOWN_TAGS}
    assert not unknown, f"unknown tags: {sorted(unknown)}"
    assert all(e.command.strip() for e in CORPUS), "an entry is empty"


def test_every_line_whose_prefix_rule_is_claimed_names_its_innocent_program() -> None:
    nameless = [e.id for e in CORPUS if e.prefix_claim and e.first is None]
    assert not nameless, f"give these a first=PROGRAM tag or prefix=no: {nameless}"


def test_at_least_25_families_are_marked_for_the_end_to_end_run() -> None:
    assert sum("e2e" in e.tags for e in CORPUS) >= 25


# ---------------------------------------------------------- every line really does harm


def _make_workdir(root: Path) -> None:
    """The directory each line runs in: a git repository with a change, the model's repo, a tar."""
    root.mkdir()
    (root / "a.txt").write_text("alpha\nbeta\n")
    (root / "in.txt").write_text("b\na\n")
    (root / "victim.txt").write_text("precious\n")
    (root / "README.md").write_text("# readme\nfoo\n")
    (root / "cmds.txt").write_text("touch pwned\n" * 300)  # what sort --compress-program=sh feeds to sh
    (root / "0.magic").write_text("0\tstring\tx\tX\n")  # a magic file for file -C; sorts first in a glob
    (root / "sub").mkdir()
    (root / "sub" / "b.txt").write_text("b\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q"], cwd=root, check=True, env=_scratch_env(root))
    subprocess.run([*git, "add", "a.txt", "README.md"], cwd=root, check=True, env=_scratch_env(root))
    subprocess.run([*git, "commit", "-qm", "one"], cwd=root, check=True, env=_scratch_env(root))
    (root / "a.txt").write_text("alpha\nbeta\ngamma\n")  # a change for git diff and difftool to show
    subprocess.run(["tar", "-cf", "a.tar", "in.txt"], cwd=root, check=True)
    evil = root / "evil-repo"
    subprocess.run([*git, "init", "-q", str(evil)], cwd=root, check=True, env=_scratch_env(root))
    subprocess.run(["git", "config", "core.fsmonitor", "touch pwned; true"], cwd=evil, check=True)
    (evil / "x.txt").write_text("x\n")


def _scratch_env(root: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(root),
        "LC_ALL": "C",
        "TERM": "dumb",
        "GIT_CONFIG_NOSYSTEM": "1",
    }


def _snapshot(root: Path) -> dict[str, tuple[int, bytes]]:
    """Every file and folder under ``root`` (git's own folders left out) with its mode and content."""
    seen: dict[str, tuple[int, bytes]] = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if ".git" in relative.parts:
            continue
        info = path.lstat()
        content = path.read_bytes() if stat.S_ISREG(info.st_mode) else b""
        seen[str(relative)] = (stat.S_IMODE(info.st_mode), content)
    return seen


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hostile") / "template"
    _make_workdir(root)
    return root


def _ran_for_real(entry: Entry, template: Path, where: Path) -> Iterator[str]:
    work = where / "work"
    shutil.copytree(template, work, symlinks=True)
    for name in entry.files:
        (work / name).touch()
    before = _snapshot(work)
    try:
        subprocess.run(
            ["bash", "-c", entry.command],
            cwd=work,
            env=_scratch_env(work),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=20,
        )
    except subprocess.TimeoutExpired:
        pass
    after = _snapshot(work)
    yield from sorted({*before, *after} - {k for k in before if before[k] == after.get(k)})


def _runnable() -> list[object]:
    """The entries this machine can run: not tagged ``norun``, and their program (``needs=``) installed.

    The others are still put through the gate below; only this proof that they do harm
    needs the program, and a line it cannot run is left out here rather than skipped.
    """
    return [
        pytest.param(e, id=e.id) for e in CORPUS if "norun" not in e.tags and shutil.which(e.tags.get("needs", "bash"))
    ]


@pytest.mark.parametrize("entry", _runnable())
def test_the_line_really_creates_or_destroys_a_file_when_bash_runs_it(
    entry: Entry, template: Path, tmp_path: Path
) -> None:
    changed = list(_ran_for_real(entry, template, tmp_path))
    assert changed, f"{entry.command!r} changed nothing: the corpus line is not hostile"


# ----------------------------------------------------------------------- the gate


@pytest.mark.parametrize("entry", _params())
def test_no_mode_but_bypass_allows_the_line_without_rules(entry: Entry, tmp_path: Path) -> None:
    allowed = _allowed_in(entry, tmp_path, PermissionRules(), GUARDED_MODES)
    assert not allowed, f"{entry.command!r} is allowed in {allowed}"


@pytest.mark.parametrize("entry", _params())
def test_deny_rules_on_touch_and_rm_do_not_open_the_line(entry: Entry, tmp_path: Path) -> None:
    allowed = _allowed_in(entry, tmp_path, DENY_TOUCH_AND_RM, GUARDED_MODES)
    assert not allowed, f"{entry.command!r} is allowed in {allowed} under deny rules"


def _bypass_allows(entry: Entry, cwd: Path) -> list[str]:
    """How ``bypassPermissions`` mode with deny rules on touch and rm answers the line, where it allows."""
    reasons = []
    for interactive in (False, True):
        decision = decide(
            "Bash",
            {"command": entry.command},
            mode="bypassPermissions",
            rules=DENY_TOUCH_AND_RM,
            cwd=cwd,
            interactive=interactive,
        )
        if decision.behavior == "allow":
            reasons.append(f"{'interactive' if interactive else 'headless'}: {decision.reason}")
    return reasons


@pytest.mark.parametrize("entry", _params(tag="hides"))
def test_a_deny_rule_holds_in_bypass_mode_however_the_shell_is_made_to_run_touch_or_rm(
    entry: Entry, tmp_path: Path
) -> None:
    allowed = _bypass_allows(entry, tmp_path)
    assert not allowed, f"{entry.command!r} runs touch or rm past the deny rule: {allowed}"


@pytest.mark.parametrize("entry", _params(tag="wraps"))
def test_a_deny_rule_holds_in_bypass_mode_when_another_program_runs_touch_or_rm(entry: Entry, tmp_path: Path) -> None:
    allowed = _bypass_allows(entry, tmp_path)
    assert not allowed, f"{entry.command!r} has another program run touch or rm past the deny rule: {allowed}"


def _bare_allow_allows(entry: Entry, cwd: Path) -> list[str]:
    """How a bare ``Bash`` allow rule with deny rules on touch and rm answers the line, where it allows."""
    rules = PermissionRules(allow=("Bash",), deny=DENY_TOUCH_AND_RM.deny)
    reasons = []
    for mode in ("default", "acceptEdits", "dontAsk"):
        decision = decide("Bash", {"command": entry.command}, mode=mode, rules=rules, cwd=cwd, interactive=True)
        if decision.behavior == "allow":
            reasons.append(f"{mode}: {decision.reason}")
    return reasons


@pytest.mark.parametrize("entry", [*_params(tag="hides"), *_params(tag="wraps", without="hides")])
def test_a_deny_rule_holds_under_a_bare_bash_allow_rule_however_touch_or_rm_is_run(
    entry: Entry, tmp_path: Path
) -> None:
    allowed = _bare_allow_allows(entry, tmp_path)
    assert not allowed, f"{entry.command!r} runs touch or rm past the deny rule under a bare Bash rule: {allowed}"


@pytest.mark.parametrize("entry", _params(prefix_claim=True))
def test_an_allow_rule_for_the_innocent_program_does_not_allow_what_the_line_hides(
    entry: Entry, tmp_path: Path
) -> None:
    rules = PermissionRules(allow=(f"Bash({entry.first}:*)",))
    allowed = _allowed_in(entry, tmp_path, rules, GUARDED_MODES)
    assert not allowed, f"{entry.command!r} is allowed in {allowed} by Bash({entry.first}:*)"


# ---------------------------------------------------------------------- controls

# Lines a user expects to run without a prompt. Left out on purpose: git, sort, uniq, file,
# date, find, test / [ and cd, which the fail-closed gate asks for (each can write or run a
# program with some option, evaluate a subscript, or change what later commands read).
CONTROLS: Final = (
    "ls",
    "ls -la",
    "ls -l sub",
    "cat README.md",
    "cat a.txt b.txt",
    "head -n 5 a.txt",
    "tail -n 3 a.txt",
    "wc -l a.txt",
    "grep -rn foo .",
    'grep "a b" a.txt',
    "grep -c alpha a.txt",
    "pwd",
    "echo hello",
    "echo 'hello world'",
    "cat a.txt | wc -l",
    "ls | head -n 3",
    "grep alpha a.txt | wc -l",
    "nl a.txt",
    "md5sum a.txt",
    "sha256sum a.txt",
    "stat a.txt",
    "diff a.txt b.txt",
    "cmp a.txt b.txt",
    "basename sub/a.txt",
    "dirname sub/a.txt",
    "realpath a.txt",
    "uname -a",
    "id",
    "true",
    "seq 1 5",
    "ls && pwd",
    "echo a; echo b",
    # issue 43: programs Claude Code reads as read-only that were asked about; issue 41: closed descriptors
    "test -f a.txt",
    "[ -d sub ] && ls sub",
    "sleep 1",
    "ps aux",
    "ps -ef",
    "cut -d, -f1 a.txt",
    "cut -d , -f 2 a.txt",
    "ls 2>&-",
    "ls >&- 2>&1",
    "cat a.txt <&-",
)


def test_at_least_30_benign_lines_are_held_as_controls() -> None:
    assert len(set(CONTROLS)) == len(CONTROLS) >= 30


@pytest.mark.parametrize("command", CONTROLS)
def test_a_benign_read_only_line_is_still_allowed_without_rules(command: str, tmp_path: Path) -> None:
    decision = decide(
        "Bash", {"command": command}, mode="default", rules=PermissionRules(), cwd=tmp_path, interactive=False
    )
    assert decision.behavior == "allow", decision.reason


@pytest.mark.parametrize("command", CONTROLS)
def test_a_benign_read_only_line_is_still_allowed_under_deny_rules(command: str, tmp_path: Path) -> None:
    decision = decide(
        "Bash", {"command": command}, mode="default", rules=DENY_TOUCH_AND_RM, cwd=tmp_path, interactive=False
    )
    assert decision.behavior == "allow", decision.reason


# Lines that write or run programs but run nothing the gate cannot read: a deny rule on touch and rm lets
# them through in bypass mode (issue 49 makes what cannot be read ask, not what can).
READ_IN_FULL: Final = (
    "mkdir -p build && cp a.txt build/",
    "timeout 5 grep -rn foo .",
    "nice -n 5 sort a.txt",
    "bash -c 'ls && cat a.txt'",
    "bash -euo pipefail -c 'wc -l a.txt'",
    "set -euo pipefail; ls",
    "find . -name '*.txt' -exec grep -l alpha {} +",
    "ls | xargs -I{} echo {}",
    "LC_ALL=C sort a.txt",
    "x=1; echo $x",
    "/usr/bin/cat a.txt",
    "eval 'ls -la'",
)


@pytest.mark.parametrize("command", READ_IN_FULL)
def test_a_line_the_gate_reads_in_full_runs_in_bypass_mode_under_deny_rules(command: str, tmp_path: Path) -> None:
    decision = decide(
        "Bash", {"command": command}, mode="bypassPermissions", rules=DENY_TOUCH_AND_RM, cwd=tmp_path, interactive=False
    )
    assert decision.behavior == "allow", decision.reason
