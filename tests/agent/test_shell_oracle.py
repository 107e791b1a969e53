"""The gate's reading of a command line against what bash really runs (issue 41, item 1).

The oracle is bash itself: it runs the line with an empty PATH and a
``command_not_found_handle`` that logs each command it was asked to run, in a
scratch directory and a session of its own (killed whole afterwards). The claim:
every command bash runs is one ``analyse`` names, or ``analyse`` says it did not
understand the line (and the gate asks). A here-document whose delimiter is quoted
is where bashlex and bash disagreed: bashlex ended it at the line ``'EOF'``, bash at
``EOF``, and ran what followed. Issue 49: builtins that evaluate an array subscript
ran a command hidden behind backslashes; and a line the gate reads in full under a
deny rule (``runs.unreadable``) runs nothing the gate did not name.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queryloop.handlers.tools.services.runs import unreadable
from queryloop.handlers.tools.services.shell import analyse

# Built-ins that would otherwise run without a trace are disabled, so bash looks them up (and logs them).
_HANDLER: Final = (
    "enable -n echo test [ kill true false pwd\n"
    'command_not_found_handle() { printf "%s\\n" "$1" >> "$QL_LOG"; return 0; }\n'
)


def ran_by_bash(line: str, scratch: Path) -> list[str]:
    """The command names bash runs for ``line`` (built-ins like ``cd`` and ``printf`` aside)."""
    env_file, log = scratch / "env.sh", scratch / "ran.log"
    env_file.write_text(_HANDLER, encoding="utf-8")
    log.write_text("", encoding="utf-8")
    work = scratch / "work"
    work.mkdir(exist_ok=True)
    process = subprocess.Popen(
        ["/bin/bash", "-c", line],
        env={"PATH": "/nonexistent", "BASH_ENV": str(env_file), "QL_LOG": str(log)},
        cwd=work,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()
    return log.read_text(encoding="utf-8").splitlines()


def unseen(line: str, scratch: Path) -> list[str]:
    """What bash ran that the gate's reading does not name ([] when the reading is not understood: it asks)."""
    reading = analyse(line)
    if not reading.understood:
        return []
    names = {command.name for command in reading.commands}
    return [name for name in ran_by_bash(line, scratch) if name not in names]


HIDING: Final = [
    "cat <<'EOF'\nEOF\nrm -rf x\n'EOF'\n",
    'cat <<"EOF"\nEOF\nrm -rf x\n"EOF"\n',
    "cat <<\\EOF\nEOF\nrm -rf x\n\\EOF\n",
    "cat <<E'O'F\nEOF\nrm -rf x\nE'O'F\n",
    "cat <<-'EOF'\n\tEOF\nrm -rf x\n'EOF'\n",
    "cat <<'EOF'\n'EOF'\necho '\nEOF\nrm -rf x\n'\n",
    "echo \"$(cat <<'EOF'\nEOF\nrm x\n'EOF'\n)\"\n",
    "ls; \\",
    "EOF\"'EOF'\"",  # bashlex's quote removal: EOFEOF; bash runs EOF'EOF'
    "EOF'\n'",  # a command word ending in a newline passed a `$`-anchored name check
    # issue 49: a subscript the builtin evaluates, its `$(` hidden from the line by backslashes
    "let a[\\$\\(rm\\ x\\)]=1",
    'let "a[\\$(rm x)]=1"',
    "declare -i x=a\\[\\$\\(rm\\ x\\)\\]",
    'printf -v "a[\\$(rm x)]" x',
    'read "a[\\$(rm x)]" <<< 1',
]
AGREED: Final = [
    "cat <<EOF\nplain text\nEOF\n",
    "cat <<-EOF\n\tindented\n\tEOF\n",
    "wc -l <<A <<B\none\nA\ntwo\nB\n",
    "cat <<EOF; ls\nbody\nEOF\n",
]


def test_bash_really_runs_what_the_hiding_lines_hide(tmp_path: Path) -> None:
    """The oracle's own check: each hiding line makes bash run rm (or a stray word), so the next test can fail."""
    for number, line in enumerate(HIDING):
        scratch = tmp_path / str(number)
        scratch.mkdir()
        ran = ran_by_bash(line, scratch)
        assert set(ran) - {"cat", "echo", "ls", "EOF"}, (line, ran)


@pytest.mark.parametrize("line", HIDING)
def test_the_gate_names_every_command_bash_runs_or_asks(line: str, tmp_path: Path) -> None:
    assert not analyse(line).understood, line
    assert unseen(line, tmp_path) == []


@pytest.mark.parametrize("line", AGREED)
def test_a_plain_here_document_is_still_read_and_agrees_with_bash(line: str, tmp_path: Path) -> None:
    reading = analyse(line)
    assert reading.understood, reading.problem
    assert set(ran_by_bash(line, tmp_path)) == {c.name for c in reading.commands}


_PIECES: Final = [
    "cat <<EOF", "cat <<'EOF'", 'cat <<"EOF"', "cat <<-EOF", "cat <<\\EOF", "cat <<EOF <<X", "EOF", "'EOF'",
    "\tEOF", " EOF", "X", "rm a", "ls", "echo '", "'", '"', "$(", ")", "\\", "\n", "\n", "\n", "; ", " & ", " | ",
    "# ", " ", "{ ", " }", "\\\n", "$(cat <<EOF", "$(cat <<'EOF'", "text",
]  # fmt: skip


@settings(max_examples=250, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), min_size=2, max_size=12))
def test_no_line_of_here_document_pieces_runs_a_command_the_gate_did_not_see(
    tmp_path_factory: pytest.TempPathFactory, pieces: list[str]
) -> None:
    line = "".join(pieces)
    assert unseen(line, tmp_path_factory.mktemp("oracle")) == [], line


_BUILTIN_PIECES: Final = [
    "let ", "declare -i x=", "declare ", "printf -v ", "printf %d ", "read ", "export ", "unset ", "cd ", "set -- ",
    "umask ", "type ", ": ", "pushd ", "a[", "]", "\\$\\(", "\\)", "rm\\ x", "rm x", "\\", "'", '"', "=1", "; ",
    " ", "y", "$y", "y=", "<<< ", "\n", "$(", ")",
]  # fmt: skip


@settings(max_examples=250, deadline=None)
@given(st.lists(st.sampled_from(_BUILTIN_PIECES), min_size=2, max_size=10))
def test_a_line_the_gate_reads_in_full_runs_no_command_it_did_not_name(
    tmp_path_factory: pytest.TempPathFactory, pieces: list[str]
) -> None:
    line = "".join(pieces)
    reading = analyse(line)
    if unreadable(reading) is not None:
        return  # under a deny rule it asks: nothing to hold against bash
    names = {command.name for command in reading.commands}
    ran = ran_by_bash(line, tmp_path_factory.mktemp("oracle"))
    assert [name for name in ran if name not in names] == [], line
