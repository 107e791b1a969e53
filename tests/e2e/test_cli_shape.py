"""End-to-end: the command line shaped like Claude Code's — `queryloop [options] [prompt]`, and project instructions.

Each behaviour was first observed on Claude Code 2.1.235 against the embedded server:
the prompt is an argument (after ``--`` when it starts with a dash) or stdin, or both
(joined by a newline); ``-p`` is a flag; ``-v`` prints the version; a first word that
names a command runs it; the tool flags come camelCased and take several words;
``--system-prompt`` replaces the default; ``ANTHROPIC_AUTH_TOKEN`` is sent as a bearer
token; the CLAUDE.md files (user, every directory from the root down, local) reach the
first user message of every request, ahead of the prompt.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from queryloop import __version__
from queryloop.frontends.commands import COMMANDS, command_names

from .harness import HANG_GUARD_S, ROOT, CliRun, MockApi, cli_env
from .test_request_layer import scenario

pytestmark = pytest.mark.slow  # ~105 s in all: tools/test.sh --fast leaves the module out

HELLO = scenario(  # the same answer to every request
    """  mock-primary:
    steps: []
    otherwise: {reply: {content: [{text: "Hello there."}]}}
"""
)


def queryloop(
    args: list[str],
    *,
    api: MockApi | None,
    cwd: Path,
    fmt: str = "json",
    stdin: str | None = "",
    env: dict[str, str] | None = None,
    drop_env: tuple[str, ...] = (),
) -> CliRun:
    """``queryloop --output-format FMT --cwd CWD --model mock-primary ARGS``: no command word, as Claude Code is run."""
    environment = {k: v for k, v in cli_env(api, **(env or {})).items() if k not in drop_env}
    cmd = [sys.executable, "-m", "queryloop", "--output-format", fmt, "--cwd", str(cwd), "--model", "mock-primary"]
    cmd += ["--verbose"] if fmt == "stream-json" and "--verbose" not in args else []  # stream-json needs it
    proc = subprocess.run(
        [*cmd, *args], capture_output=True, text=True, env=environment, input=stdin, timeout=HANG_GUARD_S, cwd=ROOT
    )
    return CliRun(proc, fmt)


def first_message(api: MockApi, index: int = 0) -> Any:
    return api.requests[index].messages[0]["content"]


# ---- the prompt ------------------------------------------------------------------------------


def test_a_positional_prompt_is_the_prompt(tmp_path: Path) -> None:
    with MockApi(HELLO) as api:
        run = queryloop(["say hello"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.result["result"] == "Hello there."
    assert first_message(api) == "say hello"


def test_print_is_a_flag_and_a_prompt_after_a_double_dash_may_start_with_a_dash(tmp_path: Path) -> None:
    with MockApi(HELLO) as api:
        run = queryloop(["-p", "--", "-n is a flag of echo"], api=api, cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        assert first_message(api) == "-n is a flag of echo"
        run = queryloop(["the prompt first", "--print"], api=api, cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        assert first_message(api, 1) == "the prompt first"


def test_the_prompt_can_come_on_stdin_alone(tmp_path: Path) -> None:
    with MockApi(HELLO) as api:
        run = queryloop(["-p"], api=api, cwd=tmp_path, stdin="  piped prompt\n")
    assert run.returncode == 0, run.stderr
    assert first_message(api) == "  piped prompt\n", "stdin is the prompt as it came"


def test_a_prompt_argument_and_stdin_are_joined_by_a_newline(tmp_path: Path) -> None:
    with MockApi(HELLO) as api:
        run = queryloop(["-p", "summarise this:"], api=api, cwd=tmp_path, stdin="line one\nline two\n")
    assert run.returncode == 0, run.stderr
    assert first_message(api) == "summarise this:\nline one\nline two\n"


def test_a_stdin_nobody_writes_to_is_waited_for_three_seconds_then_the_argument_runs_alone(tmp_path: Path) -> None:
    with MockApi(HELLO) as api:
        cmd = [sys.executable, "-m", "queryloop", "--output-format", "json", "--cwd", str(tmp_path), "-p", "hi"]
        started = time.monotonic()
        proc = subprocess.Popen(
            [*cmd, "--model", "mock-primary"],
            stdin=subprocess.PIPE,  # held open, never written
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=cli_env(api),
            cwd=ROOT,
        )
        try:
            assert proc.wait(timeout=HANG_GUARD_S) == 0
            elapsed = time.monotonic() - started
            assert proc.stdout is not None and proc.stderr is not None
            result, stderr = json.loads(proc.stdout.read()), proc.stderr.read()
        finally:
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
            proc.kill()
            proc.wait()
    assert elapsed >= 3.0
    assert "nothing on stdin after 3 s" in stderr
    assert result["result"] == "Hello there." and first_message(api) == "hi"


@pytest.mark.parametrize(("stdin", "says"), [("", "no prompt"), (" \n\t\n", "the prompt is only whitespace")])
def test_no_prompt_or_only_whitespace_is_a_usage_error(tmp_path: Path, stdin: str, says: str) -> None:
    with MockApi(HELLO) as api:
        run = queryloop(["-p"], api=api, cwd=tmp_path, stdin=stdin)
        assert run.returncode == 2 and says in run.stderr
        assert len(run.stderr.strip().splitlines()) == 1 and api.requests == []


# ---- the program's namespace -----------------------------------------------------------------


@pytest.mark.parametrize("flag", ["-v", "--version"])
def test_version_prints_the_version_and_runs_nothing(tmp_path: Path, flag: str) -> None:
    with MockApi(HELLO) as api:
        run = queryloop([flag], api=api, cwd=tmp_path, fmt="text")
        line = f"2.1.235 (queryloop {__version__}; behaves as Claude Code)\n"  # Claude Code's shape: "2.1.235 (...)"
        assert (run.returncode, run.stdout, run.stderr) == (0, line, "")
        assert api.requests == []


def test_run_is_kept_as_an_alias_of_the_bare_program(tmp_path: Path) -> None:
    with MockApi(HELLO) as api:
        for words in (["run", "-p", "old style"], ["run", "old style"]):
            proc = subprocess.run(
                [sys.executable, "-m", "queryloop", *words, "--model", "mock-primary", "--cwd", str(tmp_path)],
                capture_output=True,
                text=True,
                env=cli_env(api),
                input="",
                timeout=HANG_GUARD_S,
                cwd=ROOT,
            )
            assert proc.returncode == 0, proc.stderr
        assert [r.messages[0]["content"] for r in api.requests] == ["old style", "old style"]


@pytest.mark.parametrize("command", ["check", "diagram", "docs", "mock-api", "run"])
def test_a_first_word_that_names_a_command_runs_that_command(command: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "queryloop", command, "--help"],
        capture_output=True,
        text=True,
        env=cli_env(None),
        timeout=HANG_GUARD_S,
        cwd=ROOT,
    )
    assert proc.returncode == 0 and proc.stdout.startswith(f"usage: queryloop {command}"), proc.stdout


def test_a_command_name_anywhere_but_first_is_a_prompt(tmp_path: Path) -> None:
    with MockApi(HELLO) as api:
        run = queryloop(["-p", "check"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert first_message(api) == "check"


def test_the_program_help_shows_the_prompt_and_names_the_commands() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "queryloop", "--help"], capture_output=True, text=True, timeout=HANG_GUARD_S, cwd=ROOT
    )
    assert proc.returncode == 0
    assert proc.stdout.startswith("usage: queryloop [options] [prompt]")
    assert "check, diagram, docs, mock-api" in " ".join(proc.stdout.split())


def test_each_registered_module_adds_the_commands_the_registry_names_for_it_in_order() -> None:
    """The registry names every command without importing its module: each module adds exactly those."""
    added: list[str] = []
    for registration in COMMANDS:
        sub = argparse.ArgumentParser().add_subparsers()
        registration.add_to(sub)
        assert tuple(sub.choices) == registration.names, registration.adds
        added += sub.choices
    assert tuple(added) == command_names() and len(set(added)) == len(added)


# ---- flags Claude Code users and the Agent SDK pass --------------------------------------------

WRITE_THEN_DONE = scenario("""  mock-primary:
    - reply: {content: [{tool_use: {name: Write, input: {file_path: out.txt, content: "written"}}}]}
    - reply: {content: [{text: "done"}]}
""")


DEFAULT_MODE = ("--permission-mode", "default")


def test_camel_case_tool_flags_take_several_words_until_a_double_dash(tmp_path: Path) -> None:
    with MockApi(WRITE_THEN_DONE) as api:
        run = queryloop(
            [*DEFAULT_MODE, "--allowedTools", "Write", "--disallowedTools", "Bash", "Grep,Glob", "--", "write it"],
            api=api,
            cwd=tmp_path,
        )
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "out.txt").read_text() == "written", "allowed without asking"
    assert run.result["permission_denials"] == []
    offered = ("Read", "Write", "Edit", "WebFetch", "WebSearch", "Agent")
    assert api.requests[0].tools == offered, "a bare deny rule hides the tool"
    assert first_message(api) == "write it"


def test_the_command_line_the_claude_agent_sdk_builds_runs(tmp_path: Path) -> None:
    """``cli -v`` first, then its flags in its order, ``--print -- PROMPT`` last (claude-agent-sdk, string prompts)."""
    with MockApi(HELLO) as api:
        assert queryloop(["-v"], api=api, cwd=tmp_path, fmt="text").stdout.split()[0] == "2.1.235"
        sdk_flags = ["--verbose", "--system-prompt", "", "--allowedTools", "Read,Glob", "--max-turns", "3"]
        sdk_flags += ["--disallowedTools", "Bash", "--permission-mode", "default", "--setting-sources=user,project"]
        run = queryloop([*sdk_flags, "--print", "--", "what is here?"], api=api, cwd=tmp_path, fmt="stream-json")
    assert run.returncode == 0, run.stderr
    assert run.lines[0]["subtype"] == "init" and run.result["result"] == "Hello there."
    assert first_message(api) == "what is here?" and api.requests[0].system is None
    assert "Bash" not in api.requests[0].tools


def test_system_prompt_replaces_the_default_and_append_still_appends(tmp_path: Path) -> None:
    with MockApi(HELLO) as api:
        queryloop(["--system-prompt", "You are a test.", "hi"], api=api, cwd=tmp_path)
        queryloop(
            ["--system-prompt", "You are a test.", "--append-system-prompt", "Be brief.", "hi"], api=api, cwd=tmp_path
        )
        queryloop(["--system-prompt", "", "hi"], api=api, cwd=tmp_path)
        queryloop(["hi"], api=api, cwd=tmp_path)
    systems = [r.system for r in api.requests]
    assert systems[:3] == ["You are a test.", "You are a test.\n\nBe brief.", None]
    assert isinstance(systems[3], str) and "You are a test." not in systems[3]


def test_an_auth_token_alone_is_sent_as_a_bearer_token(tmp_path: Path) -> None:
    with MockApi(HELLO) as api:
        run = queryloop(
            ["hi"], api=api, cwd=tmp_path, env={"ANTHROPIC_AUTH_TOKEN": "tok-123"}, drop_env=("ANTHROPIC_API_KEY",)
        )
    assert run.returncode == 0, run.stderr
    headers = api.requests[0].headers
    assert headers["authorization"] == "Bearer tok-123" and "x-api-key" not in headers


def test_max_thinking_tokens_is_accepted_with_a_warning(tmp_path: Path) -> None:
    with MockApi(HELLO) as api:
        run = queryloop(["--max-thinking-tokens", "5000", "hi"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "warning: --max-thinking-tokens is ignored" in run.stderr
    assert run.result["result"] == "Hello there."


def test_claude_codes_dangerously_skip_permissions_is_the_bypass_mode_and_forward_subagent_text_is_taken(
    tmp_path: Path,
) -> None:
    flags = ["--dangerously-skip-permissions", "--forward-subagent-text", "--verbose", "hi"]
    with MockApi(HELLO) as api:
        run = queryloop(flags, api=api, cwd=tmp_path, fmt="stream-json")
    assert run.returncode == 0, run.stderr
    assert next(line for line in run.lines if line.get("subtype") == "init")["permissionMode"] == "bypassPermissions"


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--bogus-flag", "hi"], "unrecognized arguments: --bogus-flag"),
        (["one", "two"], "unrecognized arguments: two"),
        (["--output-format", "xml", "hi"], "argument --output-format: invalid choice: 'xml'"),
        (["--input-format", "stream-json"], "--input-format stream-json requires --output-format stream-json"),
        (["--setting-sources", "user,team", "hi"], "--setting-sources: expected some of user, project, local"),
        (["--allowedTools", "Bash(ls", "--", "hi"], "unbalanced '(' in a rule"),
        (["--max-thinking-tokens", "-1", "hi"], "--max-thinking-tokens: expected a number >= 0"),
        # no abbreviations, as in Claude Code: --agent is its own flag, not a prefix of --agents
        (["--agent", "reviewer", "hi"], "unrecognized arguments: --agent "),
        (["--verb", "hi"], "unrecognized arguments: --verb"),
    ],
)
def test_a_bad_flag_is_one_line_on_stderr_and_exit_2_before_anything_runs(
    tmp_path: Path, flags: list[str], says: str
) -> None:
    with MockApi(HELLO) as api:
        run = queryloop(flags, api=api, cwd=tmp_path, fmt="text")
        assert run.returncode == 2 and says in run.stderr, run.stderr
        assert len(run.stderr.strip().splitlines()) == 1, run.stderr
        assert run.stdout == "" and api.requests == []


# ---- project instructions (CLAUDE.md) --------------------------------------------------------

ONE_TOOL_TURN = scenario("""  mock-primary:
    - reply: {content: [{tool_use: {name: Glob, input: {pattern: "*.md"}}}]}
    - reply: {content: [{text: "done"}]}
""")


def instruction_tree(tmp_path: Path) -> tuple[Path, Path, dict[str, Path]]:
    """A home, a repository with a parent and a subdirectory to work in, an instruction file in each place."""
    home, repo = tmp_path / "home", tmp_path / "outer" / "repo"
    work = repo / "pkg"
    files = {
        "USER-CLAUDE": home / ".claude" / "CLAUDE.md",
        "USER-RULE": home / ".claude" / "rules" / "style.md",
        "PARENT": tmp_path / "outer" / "CLAUDE.md",
        "REPO": repo / "CLAUDE.md",
        "DOT-CLAUDE": repo / ".claude" / "CLAUDE.md",
        "REPO-RULE": repo / ".claude" / "rules" / "testing.md",
        "OURS": repo / "QUERYLOOP.md",
        "LOCAL": repo / "CLAUDE.local.md",
        "WORKDIR": work / "CLAUDE.md",
        "IMPORTED": work / "docs" / "conventions.md",
        "OUTSIDE": repo / "docs" / "release.md",
    }
    for marker, path in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{marker} instructions\n")
    # imported: only files inside the working directory (Claude Code asks before others; headless cannot)
    files["REPO"].write_text("REPO instructions; see @pkg/docs/conventions.md and @docs/release.md\n")
    (work / "sub").mkdir()
    (work / "sub" / "CLAUDE.md").write_text("BELOW instructions: read only when files there are\n")
    return home, work, files


PRECEDENCE = (  # as Claude Code orders them: user, then each directory from the root down; ours after Claude's
    "USER-CLAUDE",
    "USER-RULE",
    "PARENT",
    "REPO",
    "IMPORTED",  # right after the file that imports it
    "DOT-CLAUDE",
    "REPO-RULE",
    "OURS",
    "LOCAL",
    "WORKDIR",
)


def test_claude_md_files_reach_every_request_ahead_of_the_prompt_and_are_listed_in_init(tmp_path: Path) -> None:
    home, work, files = instruction_tree(tmp_path)
    with MockApi(ONE_TOOL_TURN) as api:
        run = queryloop(["list the docs"], api=api, cwd=work, fmt="stream-json", env={"HOME": str(home)})
        assert run.returncode == 0, run.stderr
        assert len(api.requests) == 2
        for request in api.requests:
            context, prompt = request.messages[0]["content"]
            assert prompt == {"type": "text", "text": "list the docs"}
            where = [context["text"].find(f"\n{marker} instructions") for marker in PRECEDENCE]
            assert -1 not in where and where == sorted(where), dict(zip(PRECEDENCE, where, strict=True))
            assert "BELOW" not in context["text"], "a subdirectory's file is not read up front"
            assert "OUTSIDE" not in context["text"], "an import outside the working directory is not read"
            assert str(files["REPO"]) in context["text"], "each file is named"
    init = run.lines[0]
    assert init["subtype"] == "init"
    by_kind = {"user": PRECEDENCE[:2], "project": (*PRECEDENCE[2:8], "WORKDIR"), "local": ("LOCAL",)}
    assert init["memory_paths"] == {kind: [str(files[m]) for m in markers] for kind, markers in by_kind.items()}


def test_setting_sources_choose_which_instruction_files_are_read(tmp_path: Path) -> None:
    home, work, files = instruction_tree(tmp_path)
    with MockApi(HELLO) as api:
        run = queryloop(
            ["--setting-sources", "local", "hi"], api=api, cwd=work, fmt="stream-json", env={"HOME": str(home)}
        )
        assert run.returncode == 0, run.stderr
        assert run.lines[0]["memory_paths"] == {"user": [], "project": [], "local": [str(files["LOCAL"])]}
        context, _ = first_message(api)
        assert "LOCAL instructions" in context["text"] and "REPO" not in context["text"]
        run = queryloop(["--setting-sources", "", "hi"], api=api, cwd=work, env={"HOME": str(home)})
        assert run.returncode == 0, run.stderr
        assert first_message(api, 1) == "hi", "no instruction files: the prompt alone"


def test_without_instruction_files_the_first_message_is_the_prompt_alone(tmp_path: Path) -> None:
    with MockApi(HELLO) as api:
        run = queryloop(["hi"], api=api, cwd=tmp_path, fmt="stream-json", env={"HOME": str(tmp_path / "home")})
    assert run.lines[0]["memory_paths"] == {"user": [], "project": [], "local": []}
    assert first_message(api) == "hi"


# ---- a newcomer's slips (issue 27) ------------------------------------------------------------


@pytest.mark.parametrize(("word", "command"), [("chek", "check"), ("Check", "check"), ("diagam", "diagram")])
def test_a_word_close_to_a_command_name_is_a_usage_error_naming_the_command(
    tmp_path: Path, word: str, command: str
) -> None:
    # Claude Code 2.1.235: `claude doctr` -> unknown command "doctr", did you mean claude doctor?
    with MockApi(HELLO) as api:
        run = queryloop([word], api=api, cwd=tmp_path)
    assert run.returncode == 2 and api.requests == [] and run.stdout == ""
    (line,) = run.stderr.splitlines()
    assert f"unknown command {word!r} (did you mean {command!r}?)" in line
    assert f"queryloop -p {word}" in line


def test_a_one_word_prompt_far_from_every_command_still_runs_and_print_sends_a_near_miss(tmp_path: Path) -> None:
    with MockApi(HELLO) as api:
        hello = queryloop(["hello"], api=api, cwd=tmp_path)
        chek = queryloop(["-p", "chek"], api=api, cwd=tmp_path)  # as `claude -p doctr`: a prompt
    assert hello.returncode == 0 and chek.returncode == 0, hello.stderr + chek.stderr
    assert [r.messages[0]["content"] for r in api.requests] == ["hello", "chek"]


def test_the_help_names_the_interactive_session_print_leaves() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "queryloop", "--help"], capture_output=True, text=True, timeout=HANG_GUARD_S, cwd=ROOT
    )
    text = " ".join(proc.stdout.split())
    assert "no other mode" not in text
    assert "an interactive session opens" in text and "open the interactive session" in text


@pytest.mark.parametrize("printing", [False, True])
def test_a_malformed_resume_id_names_print_only_when_it_was_given(tmp_path: Path, printing: bool) -> None:
    with MockApi(HELLO) as api:
        run = queryloop([*(["-p"] if printing else []), "--resume", "foo", "hi"], api=api, cwd=tmp_path)
    assert run.returncode == 1 and api.requests == []
    with_print = " when used with --print." if printing else "."
    assert run.stderr.splitlines()[0] == (
        f'Error: --resume requires a valid session ID{with_print} Provided value "foo" is not a UUID.'
    )
