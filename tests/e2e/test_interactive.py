"""The interactive session, driven as a user drives it: the real program in a pseudo-terminal.

Each test starts ``queryloop --scenario FILE`` with no prompt on a pseudo-terminal
(pexpect; ``PROMPT_TOOLKIT_NO_CPR=1`` so prompt_toolkit does not wait for a cursor
report), the embedded server playing the scenario in-process, and types prompts, slash
commands, answers and Ctrl-C. The session is ready for input when prompt_toolkit turns
bracketed paste on (``ESC [?2004h``). Sessions are kept under a temporary
``QUERYLOOP_HOME``, so the transcripts are read back as ``--resume`` would read them.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest

from .harness import HANG_GUARD_S

pytestmark = pytest.mark.slow  # ~40 s in all: tools/test.sh --fast leaves the module out

READY = "\x1b[?2004h"  # prompt_toolkit is reading a line
MARK = "\x00READY\x00"  # READY as it is kept in the output read so far
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][0-9A-Za-z]|[\x08\r]")

ANSWERS = """\
schema_version: 1
scenario: interactive
model: mock-primary
cli: {{allowed_tools: ["Bash(sleep:*)"]}}
files: {{notes.txt: "v1\\n"}}
rules:
  - when: {{last_user_contains: "[queryloop context summary]"}}
    reply: {{content: [{{text: "Summary: two prompts were answered."}}]}}
{rules}
models:
  mock-primary: [{steps}]
otherwise: {{reply: {{content: [{{text: "ANSWER-DEFAULT"}}]}}}}
"""


def _rule(word: str, reply: str) -> str:
    return f'  - when: {{last_user_contains: "{word}"}}\n    times: 1\n    reply: {{content: [{reply}]}}\n'


def _tool(name: str, tool_input: dict[str, str]) -> str:
    return "{tool_use: " + json.dumps({"name": name, "input": tool_input}) + "}"


class Session:
    """One interactive session in a pseudo-terminal; everything it printed, escapes stripped, in ``seen``."""

    def __init__(
        self, scenario: Path, cwd: Path, home: Path, *args: str, env: dict[str, str] | None = None, wait: bool = True
    ) -> None:
        environment = {**os.environ, "PROMPT_TOOLKIT_NO_CPR": "1", "QUERYLOOP_HOME": str(home), "TERM": "xterm"}
        self.child = pexpect.spawn(
            sys.executable,
            ["-m", "queryloop", "--scenario", str(scenario), "--cwd", str(cwd), *args],
            env={**environment, **(env or {})},
            encoding="utf-8",
            timeout=HANG_GUARD_S,
            dimensions=(50, 160),
        )
        self.seen = ""
        self.banner = self.ready() if wait else ""

    def expect(self, pattern: str) -> str:
        """Wait for ``pattern`` (a regex on the output without escapes); the output up to it, consumed."""
        while True:
            match = re.search(pattern, self.seen)
            if match is not None:
                before, self.seen = self.seen[: match.end()], self.seen[match.end() :]
                return before
            try:
                self.child.expect(r"[\s\S]+")
            except pexpect.TIMEOUT:
                said = self.seen[-3000:]
                raise AssertionError(f"no {pattern!r} in the session's output; it printed:\n{said}") from None
            self.seen += ANSI.sub("", str(self.child.after).replace(READY, MARK))

    def ready(self) -> str:
        """Wait until the session reads a line; what it printed before."""
        return self.expect(re.escape(MARK))

    def send(self, line: str) -> None:
        self.child.sendline(line)

    def close(self) -> int:
        self.child.sendeof()
        self.child.expect(pexpect.EOF)
        self.child.close()
        return int(self.child.exitstatus or 0)


@pytest.fixture
def place(tmp_path: Path) -> Iterator[tuple[Path, Path, Path]]:
    (tmp_path / "cwd").mkdir()
    (tmp_path / "home").mkdir()
    yield tmp_path / "scenario.yaml", tmp_path / "cwd", tmp_path / "home"


def _write(scenario: Path, *rules: str, steps: tuple[str, ...] = ()) -> Path:
    """The scenario: ``rules`` answer by the last prompt's words, then ``steps`` (replies' content) in order."""
    replies = ", ".join(f"{{reply: {{content: [{step}]}}}}" for step in steps)
    scenario.write_text(ANSWERS.format(rules="".join(rules), steps=replies))
    return scenario


def _transcript(home: Path) -> list[dict[str, object]]:
    (path,) = home.glob("projects/*/*.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_two_prompts_then_compact_and_graph_continue_one_session_that_resume_opens(place) -> None:  # type: ignore[no-untyped-def]
    scenario, cwd, home = place
    _write(scenario, _rule("first", '{text: "ANSWER-ONE"}'), _rule("second", '{text: "ANSWER-TWO"}'))
    session = Session(scenario, cwd, home)
    session.send("first prompt")
    session.expect("ANSWER-ONE")
    session.ready()
    session.send("second prompt")
    session.expect("ANSWER-TWO")
    session.ready()
    session.send("/compact keep the answers")
    session.expect(r"compacted \(manual\)")
    session.expect(r"Compacted the conversation: \d+ → \d+ tokens")
    session.ready()
    session.send("/graph")
    path = session.expect("manual_compact_succeeded--> completed")
    assert "submitting_prompt --manual_compact_start--> manual_compacting" in path
    assert "▶ completed" in path
    session.ready()
    session.send("third after the compaction")
    session.expect("ANSWER-DEFAULT")
    session.ready()
    assert session.close() == 0
    entries = _transcript(home)
    prompts = [e["message"]["content"] for e in entries if e.get("reason") in ("session_started", "session_resumed")]  # type: ignore[index]
    assert prompts == ["first prompt", "second prompt", "third after the compaction"]
    boundary = [e for e in entries if e.get("subtype") == "compact_boundary"]
    assert len(boundary) == 1 and boundary[0]["compactMetadata"]["trigger"] == "manual"  # type: ignore[index]
    session_id = str(entries[0]["sessionId"])
    again = Session(scenario, cwd, home, "--resume", session_id)
    assert session_id in again.banner
    again.send("fourth")
    again.expect("ANSWER-DEFAULT")
    again.ready()
    again.close()
    assert [e["sessionId"] for e in _transcript(home)] == [session_id] * len(_transcript(home))


def test_a_permission_answered_always_is_not_asked_again_in_the_session(place) -> None:  # type: ignore[no-untyped-def]
    scenario, cwd, home = place
    first = _tool("Bash", {"command": "mkdir -p one"})
    again = _tool("Bash", {"command": "mkdir -p two"})
    third = _tool("Bash", {"command": "mkdir -p three"})
    _write(scenario, steps=(first, again, '{text: "MADE"}', third, '{text: "MADE-MORE"}'))
    session = Session(scenario, cwd, home)
    session.send("make directories")
    session.expect(r"allow\? \[y\]es once · \[a\]lways \(Bash\(mkdir:\*\)\) · \[n\]o")
    session.send("a")
    shown = session.expect("MADE")
    assert "needs permission" not in shown  # the second mkdir of the same prompt is not asked
    session.ready()
    session.send("more please")
    shown = session.expect("MADE-MORE")
    assert "needs permission" not in shown  # nor one in the next prompt
    session.ready()
    session.send("/permissions")
    session.expect(r"answered 'always' this session: Bash\(mkdir:\*\)")
    session.ready()
    session.close()
    assert all((cwd / name).is_dir() for name in ("one", "two", "three"))


def test_an_untrusted_folder_whose_settings_would_widen_what_runs_is_asked_about_first(place) -> None:  # type: ignore[no-untyped-def]
    scenario, cwd, home = place
    user = home / "user"
    (cwd / ".claude").mkdir()
    (cwd / ".claude" / "settings.json").write_text(json.dumps({"permissions": {"allow": ["Bash(touch:*)"]}}))
    _write(scenario, steps=(_tool("Bash", {"command": "touch made"}), '{text: "TOUCHED"}'))
    session = Session(scenario, cwd, home, env={"HOME": str(user)}, wait=False)
    shown = session.expect(r"Trust this folder and use them .*\? \[y/N\] ")
    assert "ignoring 1 permissions.allow entry from .claude/settings.json" in shown
    session.send("y")
    session.ready()
    session.send("touch it")
    shown = session.expect("TOUCHED")
    assert "needs permission" not in shown, "the trusted folder's allow rule holds"
    session.ready()
    session.close()
    assert (cwd / "made").exists()
    record = json.loads((user / ".claude.json").read_text())
    assert record["projects"][str(cwd.resolve())] == {"hasTrustDialogAccepted": True}


def test_ctrl_c_during_a_long_bash_call_ends_the_prompt_and_the_session_goes_on(place) -> None:  # type: ignore[no-untyped-def]
    scenario, cwd, home = place
    _write(scenario, steps=(_tool("Bash", {"command": "sleep 30"}), '{text: "ANSWER-NEXT"}'))
    session = Session(scenario, cwd, home)
    session.send("sleep for a while")
    session.expect(r"● Bash\(sleep 30\)")
    session.child.sendintr()
    session.expect("interrupted: the machine takes its abort edge")
    session.expect(r"Error \(aborted_tools\)")
    session.ready()
    session.send("next prompt")
    session.expect("ANSWER-NEXT")
    session.ready()
    session.send("/graph")
    session.expect("session_resumed--> submitting_prompt")
    session.ready()
    session.close()
    results = [e for e in _transcript(home) if e.get("type") == "user" and isinstance(e["message"]["content"], list)]  # type: ignore[index]
    assert "interrupted" in json.dumps(results).lower()  # the dangling tool_use got its result


def test_rewind_puts_back_a_file_a_prompt_edited(place) -> None:  # type: ignore[no-untyped-def]
    scenario, cwd, home = place
    edit = _tool("Edit", {"file_path": "notes.txt", "old_string": "v1", "new_string": "v2"})
    _write(scenario, steps=(edit, '{text: "EDITED"}'))
    session = Session(scenario, cwd, home, "--permission-mode", "acceptEdits")
    session.send("edit the notes")
    session.expect("EDITED")
    session.ready()
    assert (cwd / "notes.txt").read_text() == "v2\n"
    session.send("/rewind")
    session.expect(r"1\. edit the notes")
    session.ready()
    session.send("1")
    session.expect(r"-v2")
    session.ready()
    session.send("y")
    session.expect("restored")
    session.ready()
    session.close()
    assert (cwd / "notes.txt").read_text() == "v1\n"


def test_the_status_line_shows_the_retry_in_progress_during_a_529(place) -> None:  # type: ignore[no-untyped-def]
    scenario, cwd, home = place
    scenario.write_text(
        "schema_version: 1\nscenario: overloaded\nmodel: mock-primary\nmodels:\n"
        "  mock-primary:\n    - error: {status: 529}\n      repeat: 2\n"
        "    - reply: {content: [{text: ANSWER-AT-LAST}]}\n"
    )
    session = Session(scenario, cwd, home, env={"QUERYLOOP_RETRY_BASE_DELAY_MS": "1500"})
    session.send("hello")
    session.expect(r"retrying in \d+ ms \(attempt 2/10, status 529\)")  # the wait starts: the status line stays
    session.expect(r"backing_off · api_retries 1/10 · overload_streak 2/2")
    session.expect("ANSWER-AT-LAST")
    session.ready()
    session.close()


def test_the_first_screen_says_whether_the_sandbox_is_on(place) -> None:  # type: ignore[no-untyped-def]
    scenario, cwd, home = place
    _write(scenario, _rule("hello", '{text: "HI"}'))
    off = Session(scenario, cwd, home)
    assert "sandbox: off (bubblewrap works here: --sandbox or sandbox.enabled turns it on)" in off.banner
    off.close()
    on = Session(scenario, cwd, home, "--sandbox")
    assert "sandbox: on · Bash writes only here and in its own /tmp · network: none" in on.banner
    on.close()


def test_model_takes_an_alias_and_names_the_model_it_resolves_to(place) -> None:  # type: ignore[no-untyped-def]
    scenario, cwd, home = place
    session = Session(_write(scenario), cwd, home)
    session.send("/model haiku")
    assert "model: claude-haiku-4-5-20251001 (from the next prompt)" in session.ready()
    assert session.close() == 0


def test_help_lists_exit_and_exit_ends_the_session(place) -> None:  # type: ignore[no-untyped-def]
    scenario, cwd, home = place
    session = Session(_write(scenario), cwd, home)
    session.send("/help")
    listed = session.ready()
    assert "/exit" in listed and "/help" in listed
    session.send("/exit")
    session.child.expect(pexpect.EOF)
    session.child.close()
    assert session.child.exitstatus == 0


def test_the_status_line_shows_the_agents_running_while_the_session_waits_for_them(place) -> None:  # type: ignore[no-untyped-def]
    scenario, cwd, home = place
    call = {"description": "look around", "prompt": "CHILD-TASK look around"}
    scenario.write_text(
        "schema_version: 1\nscenario: agents\nmodel: mock-primary\nrules:\n"
        "  - when: {first_user_contains: CHILD-TASK}\n    delay_ms: 3000\n"
        "    reply: {content: [{text: CHILD-SAYS-HI}]}\n"
        "models:\n  mock-primary:\n"
        f"    - reply: {{content: [{_tool('Agent', call)}]}}\n"
        "    - reply: {content: [{text: WAITING-FOR-IT}]}\n"
        "    - reply: {content: [{text: ANSWER-AFTER-REPORT}]}\n"
    )
    session = Session(scenario, cwd, home)
    session.send("hello")
    session.expect(r"started in the background: look around")
    # the report turn is counted apart from the tool turns (agent_report_turns, not turns); an 80-column terminal
    # cuts the line after "running" (the agent's type follows)
    session.expect(r"awaiting_agents · turns 1/∞ · agent_report_turns 1/∞ · 1 agent running")
    session.expect(r"agent a[0-9a-f]{16} completed")
    session.expect("ANSWER-AFTER-REPORT")
    session.ready()
    session.close()


def test_a_file_that_runs_later_is_asked_each_time_with_no_always_and_a_yes_writes_it(place) -> None:  # type: ignore[no-untyped-def]
    """Issue 49: in acceptEdits a Write of ``.bashrc`` asks; "yes" writes it this once, and no "always" is
    offered (no rule could allow it), so the next write of it asks again."""
    scenario, cwd, home = place
    first = _tool("Write", {"file_path": ".bashrc", "content": "alias ll='ls -l'\n"})
    again = _tool("Write", {"file_path": ".bashrc", "content": "touch pwned\n"})
    _write(scenario, steps=(first, '{text: "WROTE"}', again, '{text: "WROTE-AGAIN"}'))
    session = Session(scenario, cwd, home, "--permission-mode", "acceptEdits")
    session.send("set up my shell")
    asked = session.expect(r"allow\? \[y\]es once · \[n\]o")
    assert "runs later" in asked
    session.send("y")
    session.expect("WROTE")
    session.ready()
    session.send("once more")
    session.expect(r"allow\? \[y\]es once · \[n\]o")
    session.send("n")
    session.expect("WROTE-AGAIN")
    session.ready()
    session.close()
    assert (cwd / ".bashrc").read_text() == "alias ll='ls -l'\n"
