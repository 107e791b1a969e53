"""Which commands are provably read-only, and the files they read — failing closed.

Owns :func:`read_only_operands`: a program on the allow-list, every option spelled in full, every word literal.
The rules: docs/security.md. Reads a command as ``shell`` normalised it; decides nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

import attrs

from .shell import SimpleCommand

__all__ = ["ReadOnlyReading", "read_only_operands"]


@attrs.frozen(kw_only=True)
class _Program:
    """What a read-only program accepts: its flags, its options taking a value, and what its operands are."""

    flags: frozenset[str] = frozenset()
    valued: frozenset[str] = frozenset()  # `-n 5`, `--lines 5`, `--lines=5`
    operands: str = "paths"  # "paths" (files it reads), "text" (not files), "pattern" (grep: a pattern, then paths)
    numeric: bool = False  # `head -5`: a count written as an option
    lists_dirs: frozenset[str] = frozenset()  # options that make it read a directory tree (`-r`)
    default_cwd: bool = False  # with no operand it reads the working directory
    refused_letters: str = ""  # letters an operand may not hold (ps's BSD option `e` lists environments)


def _program(
    flags: str = "",
    valued: str = "",
    *,
    operands: str = "paths",
    numeric: bool = False,
    lists_dirs: str = "",
    default_cwd: bool = False,
    refused_letters: str = "",
) -> _Program:
    return _Program(
        flags=frozenset(flags.split()),
        valued=frozenset(valued.split()),
        operands=operands,
        numeric=numeric,
        lists_dirs=frozenset(lists_dirs.split()),
        default_cwd=default_cwd,
        refused_letters=refused_letters,
    )


_HEAD_TAIL: Final = _program(
    "-q -v -z --quiet --silent --verbose --zero-terminated", "-n -c --lines --bytes", numeric=True
)
_SUMS: Final = _program("-b -t -z --binary --text --tag --zero")
_GREP: Final = _program(
    "-i -v -n -c -l -L -r -R -w -x -o -q -s -h -H -E -F -G -z -a -I -rn -ri -rl -rin -rni -in -il -ni -iv -Hn "
    "--ignore-case --invert-match --line-number --count --files-with-matches --files-without-match --recursive "
    "--dereference-recursive --word-regexp --line-regexp --only-matching --quiet --silent --no-messages "
    "--no-filename --with-filename --extended-regexp --fixed-strings --basic-regexp --null-data --text --null "
    "--color --colour",
    "-e -m -A -B -C --regexp --max-count --after-context --before-context --context --include --exclude "
    "--exclude-dir --color --colour",
    operands="pattern",
    lists_dirs="-r -R -rn -ri -rl -rin -rni --recursive --dereference-recursive",
)

_TEST: Final = _program(
    "-a -b -c -d -e -f -g -h -k -L -N -O -G -p -r -s -S -t -u -w -x -z -n -o -nt -ot -ef = == != < > "
    "-eq -ne -lt -le -gt -ge ! ( ) ]",
    operands="text",
)

#: The programs that cannot write a file or run another program with any option they accept here.
#: Dropped on purpose: sort (-o, --compress-program), uniq (an output operand), date (-s), file (-C),
#: find (-exec, -delete, -fprint), git (--output, -c, repository config that runs programs), printf (-v
#: assigns through an array subscript the shell evaluates), tee, xargs, cd (later commands then read
#: elsewhere than the paths checked here); test and [ only without -v.
_READ_ONLY: Final[Mapping[str, _Program]] = {
    "cat": _program(
        "-A -b -e -E -n -s -t -T -u -v --show-all --number-nonblank --show-ends --number --squeeze-blank "
        "--show-tabs --show-nonprinting"
    ),
    "head": _HEAD_TAIL,
    "tail": _HEAD_TAIL,
    "wc": _program("-c -m -l -L -w --bytes --chars --lines --max-line-length --words"),
    "ls": _program(
        "-a -A -l -h -1 -R -r -t -S -d -F -i -s -la -al -lh -lah -alh -ltr -lt -lS -1a "
        "--all --almost-all --human-readable --recursive --reverse --directory --classify --inode --size",
        lists_dirs="-a -A -l -h -1 -R -r -t -S -F -i -s -la -al -lh -lah -alh -ltr -lt -lS -1a --all "
        "--almost-all --human-readable --recursive --reverse --classify --inode --size",
        default_cwd=True,
    ),
    "stat": _program("-L -t --dereference --terse", "-c --format"),
    "du": _program(
        "-s -h -a -c -k -m -b -sh --summarize --human-readable --all --total",
        "-d --max-depth",
        lists_dirs="-s -h -a -c -k -m -b -sh --summarize --human-readable --all --total",
        default_cwd=True,
    ),
    "df": _program("-h -k -T -i --human-readable --inodes --print-type"),
    "echo": _program("-n -e -E", operands="text"),
    "pwd": _program("-L -P", operands="none"),
    "true": _program(operands="text"),
    "false": _program(operands="text"),
    "basename": _program("-a -z --multiple --zero", "-s --suffix", operands="text"),
    "dirname": _program("-z --zero", operands="text"),
    "realpath": _program("-e -m -s -q -z --canonicalize-existing --canonicalize-missing --no-symlinks --quiet"),
    "readlink": _program("-e -f -m -n -q -s -v -z --canonicalize --canonicalize-existing --no-newline --quiet"),
    "md5sum": _SUMS,
    "sha1sum": _SUMS,
    "sha256sum": _SUMS,
    "sha512sum": _SUMS,
    "cksum": _program(),
    "cmp": _program("-b -l -s --print-bytes --verbose --quiet --silent", "-n --bytes"),
    "diff": _program(
        "-u -q -N -a -b -w -B -i -y -c -r --brief --unified --new-file --text --ignore-space-change "
        "--ignore-all-space --ignore-blank-lines --ignore-case --side-by-side --normal --context --recursive",
        "-U",
        lists_dirs="-r --recursive",
    ),
    "nl": _program("", "-b -n -w -s --body-numbering --number-format --number-width --number-separator"),
    "cut": _program(
        "-s -z --complement --only-delimited --zero-terminated",
        "-b -c -d -f --bytes --characters --delimiter --fields",
    ),
    "tr": _program("-c -d -s -C --complement --delete --squeeze-repeats", operands="text"),
    "seq": _program("-w --equal-width", "-s -f --separator --format", operands="text"),
    "grep": _GREP,
    "egrep": _GREP,
    "fgrep": _GREP,
    "id": _program("-u -g -G -n -r", operands="text"),
    "whoami": _program(operands="none"),
    "uname": _program("-a -s -n -r -v -m -o --all", operands="none"),
    "which": _program("-a", operands="text"),
    # `test` and `[` without -v (it evaluates an array subscript: `test -v 'a[$(…)]'`); every other operator
    # only looks at a file or compares words.
    "test": _TEST,
    "[": _TEST,
    "sleep": _program(operands="text"),
    # `ps` without BSD's `e` (`ps eww`): it prints every process's environment, the run's API key among them
    "ps": _program(
        "-A -a -d -e -f -F -l -H -j -x -w -ww -ef -eF -ely -aux --forest --no-headers --headers",
        "-p -o -u -U -g -G -C -t -q --pid --ppid --format --user --sort --cols --columns --lines --rows",
        operands="text",
        refused_letters="e",
    ),
}


@attrs.frozen(kw_only=True)
class ReadOnlyReading:
    """The files a read-only command reads, and whether it reads directory trees (for the Read deny rules)."""

    paths: tuple[str, ...]
    reads_dirs: bool


@attrs.define
class _Words:
    """What a read-only program's words say: its operands, and what its options ask for."""

    operands: list[str] = attrs.Factory(list)
    reads_dirs: bool = False  # an option makes it read directory trees (`ls -R`)
    pattern_given: bool = False  # grep's pattern came as an option (`-e PAT`), so every operand is a path


def read_only_operands(command: SimpleCommand) -> ReadOnlyReading | None:
    """The files ``command`` reads when it is provably read-only; None when it is not (or cannot be shown to be)."""
    program = _READ_ONLY.get(command.name)
    if program is None or command.assignments or not command.literal:
        return None
    words = _read_words(program, command.words[1:])
    if words is None:
        return None
    return _reading(program, words, command.reads)


def _read_words(program: _Program, args: Sequence[str]) -> _Words | None:
    """Sort ``args`` into operands and allowed options; None at the first word that is not read-only."""
    words = _Words()
    rest = iter(args)
    ended = False  # after `--` every word is an operand
    for arg in rest:
        if ended or _is_operand(program, arg):
            if any(letter in arg for letter in program.refused_letters):
                return None
            words.operands.append(arg)
        elif arg == "--":
            ended = True
        elif arg in program.valued and arg not in program.flags:  # its value is the next word
            if next(rest, None) is None:
                return None
            words.pattern_given = words.pattern_given or arg in ("-e", "--regexp")
        elif not _allowed_option(program, arg, words):
            return None
    return words


def _is_operand(program: _Program, arg: str) -> bool:
    """Whether ``arg`` is an operand: `-` (stdin), a word not starting with `-`, or a negative number as text."""
    return arg == "-" or not arg.startswith("-") or (program.operands == "text" and arg[1:].isdigit())


def _allowed_option(program: _Program, arg: str, words: _Words) -> bool:
    """Whether ``arg`` is an option ``program`` allows as it is spelled (a flag, or one with its value attached)."""
    if arg in program.flags:
        words.reads_dirs = words.reads_dirs or arg in program.lists_dirs
        return True
    if arg.startswith("--") and "=" in arg and arg.split("=", 1)[0] in program.valued:
        words.pattern_given = words.pattern_given or arg.startswith("--regexp=")
        return True
    if not arg.startswith("--") and len(arg) > 2 and arg[:2] in program.valued:  # `-d,`, `-f1`, `-n5`
        words.pattern_given = words.pattern_given or arg[:2] == "-e"
        return True
    return program.numeric and arg[1:].isdigit()


def _reading(program: _Program, words: _Words, reads: tuple[str, ...]) -> ReadOnlyReading | None:
    """The files a read-only command reads: its redirections' and its file operands (None: operands it refuses)."""
    operands = words.operands
    if program.operands == "none" and operands:
        return None
    if program.operands == "pattern" and not words.pattern_given:
        if not operands:
            return None
        operands = operands[1:]  # the first is grep's pattern
    paths: list[str] = list(reads)
    reads_dirs = words.reads_dirs
    if program.operands in ("paths", "pattern"):
        paths.extend(o for o in operands if o != "-")
        if not operands and program.default_cwd:
            paths.append(".")
            reads_dirs = True
        if not operands and program.operands == "pattern" and reads_dirs:
            paths.append(".")
    return ReadOnlyReading(paths=tuple(paths), reads_dirs=reads_dirs or program.default_cwd)
