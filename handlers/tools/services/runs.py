"""What a Bash command runs in turn, and whether the gate can read all of it.

:func:`inner_commands` finds what ``timeout``, ``bash -c``, ``eval`` or ``find -exec`` run; :func:`unreadable` says
why a line runs code the gate cannot read (docs/security.md).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Final

import attrs

from .shell import ShellCommand, SimpleCommand, analyse, simple_command

__all__ = ["InnerCommands", "inner_commands", "unreadable"]

_DEPTH: Final = 3  # shells in shells: deeper is not read

#: Programs and builtins that run no command from their arguments or input, with the options that would
#: (`-v`: any short-option word holding v; `--name`: that long option or an abbreviation; a bare word: itself).
_ANY: Final[frozenset[str]] = frozenset()
_RUNS_NOTHING: Final[Mapping[str, frozenset[str]]] = {
    **dict.fromkeys(
        """
        cat tac head tail wc ls dir vdir stat du df basename dirname realpath readlink md5sum sha1sum sha224sum
        sha256sum sha384sum sha512sum b2sum cksum sum cmp diff nl cut tr seq grep egrep fgrep id whoami groups
        uname which sleep ps mkdir rmdir touch rm cp mv ln chmod chown chgrp truncate shred mktemp comm join
        paste fold fmt expand unexpand rev od base64 base32 xxd hexdump strings tee date printenv nproc uniq
        tree file jq yes column expr gzip gunzip zcat bzip2 bunzip2 xz unxz
        cd pushd popd dirs echo pwd true false : exit type umask
        """.split(),
        _ANY,
    ),
    "printf": frozenset({"-v"}),  # assigns through a subscript the shell evaluates
    "test": frozenset({"-v", "-R"}),  # evaluate a variable's subscript
    "[": frozenset({"-v", "-R"}),
    "set": frozenset({"-k", "keyword"}),  # `set -k`: `ls LD_PRELOAD=./x.so` gives ls that environment
    "sort": frozenset({"--compress-program"}),
    "split": frozenset({"--filter"}),
    "install": frozenset({"--strip-program"}),
}  # find is read apart (`_find`): its -exec, -execdir, -ok and -okdir

#: Folders a program named by its path may be in and still be the program of that name.
_SYSTEM_DIRS: Final = frozenset({"/bin", "/usr/bin", "/usr/local/bin", "/sbin", "/usr/sbin"})

#: Variables an assignment may set: a lowercase name (bash's and programs' own are uppercase), the locale
#: and these (none makes a program load or run code).
_HARMLESS_NAMES: Final = frozenset(
    {
        "LANG", "LANGUAGE", "TZ", "TERM", "COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "CLICOLOR", "CI",
        "TMPDIR", "POSIXLY_CORRECT", "DEBIAN_FRONTEND", "NODE_ENV", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE",
    }
)  # fmt: skip
_LOWERCASE: Final = re.compile(r"[a-z_][a-z0-9_]*")

#: Programs whose later words are another command they run: every suffix is offered to the deny rules, so
#: `sudo rm x` is denied by `Bash(rm:*)` rather than asked about (it is unreadable all the same).
_RUNNERS: Final = frozenset(
    {
        "timeout", "nice", "ionice", "stdbuf", "setsid", "flock", "xargs", "watch", "time", "chrt", "taskset",
        "sudo", "doas", "unbuffer", "parallel", "strace", "ltrace", "chroot", "unshare", "nsenter", "runuser",
        "su", "script", "find", "env", "command", "builtin", "exec", "nohup", "busybox",
    }
)  # fmt: skip


@attrs.frozen(kw_only=True)
class _Wrapper:
    """A program that runs the command its later words name: its options, and the words before that command."""

    flags: frozenset[str] = frozenset()
    valued: frozenset[str] = frozenset()  # `-s KILL`, `-sKILL`, `--signal=KILL`
    operands: int = 0  # words before the command (timeout's duration)
    numeric: bool = False  # `nice -10 cmd`
    blind: bool = False  # it adds words the gate cannot see (xargs: its input)


def _wrapper(
    flags: str = "", valued: str = "", *, operands: int = 0, numeric: bool = False, blind: bool = False
) -> _Wrapper:
    return _Wrapper(
        flags=frozenset(flags.split()),
        valued=frozenset(valued.split()),
        operands=operands,
        numeric=numeric,
        blind=blind,
    )


_WRAPPERS: Final[Mapping[str, _Wrapper]] = {
    "timeout": _wrapper("--preserve-status --foreground -v --verbose", "-s --signal -k --kill-after", operands=1),
    "nice": _wrapper("", "-n --adjustment", numeric=True),
    "stdbuf": _wrapper("", "-i -o -e --input --output --error"),
    "setsid": _wrapper("-c -f -w --ctty --fork --wait"),
    "xargs": _wrapper(
        "-0 --null -r --no-run-if-empty -t --verbose -x --exit -p --interactive -o --open-tty --replace --eof",
        "-a --arg-file -d --delimiter -E -I -L --max-lines -n --max-args -P --max-procs -s --max-chars "
        "--process-slot-var",
        blind=True,
    ),
}
_SHELLS: Final = frozenset({"bash", "sh", "dash"})  # read with bash's grammar; zsh, ksh, fish are not
_SHELL_LETTERS: Final = frozenset("ceuxvfnC")  # `bash -euxc '…'`; `o` takes a name (`-o pipefail`)
_SHELL_LONG: Final = frozenset({"--norc", "--noprofile", "--posix"})
_FIND_RUNS: Final = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
_OPTIONS_FIRST: Final = frozenset({"printf", "set"})  # builtins whose options end at their first operand


@attrs.frozen(kw_only=True)
class InnerCommands:
    """The commands one command runs in turn, and why it runs code the gate cannot read (None: it does not)."""

    texts: tuple[str, ...] = ()
    unreadable: str | None = None


def unreadable(shell: ShellCommand, *, depth: int = 0) -> str | None:
    """Why ``shell`` runs code the gate cannot read (a Bash deny or ask rule cannot be applied); None if it does not."""
    if not shell.understood:
        return f"it cannot be read ({shell.problem})"
    for name in shell.assigned:
        why = _assignment_problem(name)
        if why is not None:
            return why
    for command in shell.commands:
        why = inner_commands(command, depth=depth).unreadable
        if why is not None:
            return why
    return None


@functools.lru_cache(maxsize=1024)
def inner_commands(command: SimpleCommand, *, depth: int = 0) -> InnerCommands:
    """The other commands ``command`` runs, as texts a deny rule can match, and whether the gate reads them all.

    For deny and ask rules only: an allow rule never reaches in. Kept per command (the
    answer is frozen): the gate's deny matching and its unreadable check each ask.
    """
    texts: list[str] = []
    if command.name in _RUNNERS:
        texts.extend(" ".join(command.words[i:]) for i in range(1, len(command.words)))
    why = _own_problem(command)
    inner = _runs(command)
    if inner is None:
        why = why or _refused_option(command)
    elif depth >= _DEPTH:
        why = why or "it nests commands in commands too deeply to read"
    else:
        why = why or unreadable(inner, depth=depth + 1)
        for nested in inner.commands:
            texts.append(nested.text)
            texts.extend(inner_commands(nested, depth=depth + 1).texts)
    return InnerCommands(texts=tuple(texts), unreadable=why)


def _own_problem(command: SimpleCommand) -> str | None:
    """Why the command itself is not the program its name says, or runs with an environment that can run code."""
    if command.path and (command.path.rsplit("/", 1)[0] not in _SYSTEM_DIRS or ".." in command.path):
        return f"{command.path!r} is a program named by a path outside the system's folders"
    for assignment in command.assignments:
        why = _assignment_problem(assignment.split("=", 1)[0].rstrip("+"))
        if why is not None:
            return why
    return None


def _assignment_problem(name: str) -> str | None:
    if _LOWERCASE.fullmatch(name) or name in _HARMLESS_NAMES or re.fullmatch(r"LC_[A-Z]+", name):
        return None
    return f"it sets {name}, a variable that can make a program run code (only lowercase names and the locale are read)"


def _runs(command: SimpleCommand) -> ShellCommand | None:
    """What a wrapper, shell or ``eval`` runs (a line that may not be understood); None for any other program."""
    if command.name in _WRAPPERS:
        return _wrapped(command, _WRAPPERS[command.name])
    if command.name in _SHELLS:
        return _shell(command)
    if command.name == "eval":
        return analyse(" ".join(command.words[1:])) if command.literal else _not_read("eval runs expanded words")
    if command.name == "find":
        return _find(command)
    if command.name not in _RUNS_NOTHING:
        why = f"{command.name!r} is not one of the programs the gate knows to run no other command"
        return _not_read(why)
    return None


def _not_read(why: str) -> ShellCommand:
    return ShellCommand(problem=why)


def _wrapped(command: SimpleCommand, wrapper: _Wrapper) -> ShellCommand:
    """The command a wrapper runs, after its options (each one known) and operands."""
    words, at = command.words, 1
    while at < len(words) and words[at].startswith("-") and words[at] != "-":
        word = words[at]
        if word == "--":
            at += 1
            break
        step = _option_width(word, wrapper)
        if step == 0:
            return _not_read(f"{command.name}'s option {word!r} is not read, so where its command starts is not known")
        at += step
    at += wrapper.operands
    if wrapper.blind:
        return _blind(command.name, words[at:] or ("echo",), literal=command.literal)
    inner = simple_command(words[at:], literal=command.literal)
    return ShellCommand(commands=(inner,)) if isinstance(inner, SimpleCommand) else _not_read(inner)


def _option_width(word: str, wrapper: _Wrapper) -> int:
    """How many words the option ``word`` takes up (1 or 2); 0 for an option not known."""
    if word in wrapper.flags:
        return 1
    if word in wrapper.valued:
        return 2
    if word.startswith("--") and word.split("=", 1)[0] in wrapper.valued | wrapper.flags:
        return 1
    if not word.startswith("--") and (word[:2] in wrapper.valued or word[:2] in ("-i", "-l", "-e")):
        return 1 if word[:2] in wrapper.valued or wrapper.blind else 0  # `-sKILL`; xargs's `-i{}`, `-l1`, `-eEOF`
    return 1 if wrapper.numeric and word[1:].isdigit() else 0


def _blind(runner: str, words: tuple[str, ...], *, literal: bool) -> ShellCommand:
    """A command given words the gate cannot see (xargs's input, find's file names): only a program running nothing."""
    inner = simple_command(words, literal=literal)
    if isinstance(inner, str):
        return _not_read(inner)
    if _RUNS_NOTHING.get(inner.name) != _ANY:
        return _not_read(f"{runner} gives {inner.name!r} words the gate cannot see, and it may run what they say")
    return ShellCommand(commands=(inner,))


def _find(command: SimpleCommand) -> ShellCommand:
    """The commands ``find`` runs with ``-exec``, ``-execdir``, ``-ok``, ``-okdir`` (each up to ``;`` or ``+``)."""
    words, commands = command.words, list[SimpleCommand]()
    at = 1
    while at < len(words):
        if words[at] not in _FIND_RUNS:
            at += 1
            continue
        end = next((i for i in range(at + 1, len(words)) if words[i] in (";", "+")), None)
        if end is None:
            return _not_read(f"find's {words[at]} has no end (';' or '+')")
        inner = _blind("find", words[at + 1 : end], literal=command.literal)
        if not inner.understood:
            return inner
        commands.extend(inner.commands)
        at = end + 1
    return ShellCommand(commands=tuple(commands))


def _shell(command: SimpleCommand) -> ShellCommand:
    """The line ``bash -c LINE`` runs; a shell reading a file or its input (or started as a login shell) is not read."""
    words, at, given = command.words, 1, False
    while at < len(words) and words[at].startswith(("-", "+")) and words[at] not in ("-", "--", "+"):
        word = words[at]
        if word in _SHELL_LONG:
            at += 1
            continue
        letters = word[1:]
        if word.startswith("--") or not set(letters) <= _SHELL_LETTERS | {"o"}:
            return _not_read(f"{command.name}'s option {word!r} is not read")
        given = given or "c" in letters
        at += 1 + letters.count("o")  # each `o` takes the next word, an option's name
    at += at < len(words) and words[at] == "--"
    if not given or at >= len(words):
        return _not_read(f"{command.name} reads its commands from a file or its input, which the gate cannot read")
    if not command.literal:
        return _not_read(f"{command.name} -c runs a line with expanded words")
    return analyse(words[at])


def _refused_option(command: SimpleCommand) -> str | None:
    """Why a program on the closed set runs code with the options it is given here (None: it does not)."""
    refused = _RUNS_NOTHING[command.name]
    if not refused:
        return None
    words = command.words[1:]
    if command.name in _OPTIONS_FIRST:  # `printf '%s' "$x"`: what follows the first operand is no option
        words = _leading_options(words)
    elif not command.literal:
        words = ("",)  # an expanded word (a glob, `$x`) may be any option
    for word in words:
        if word == "" or _maybe_expanded(word):
            return f"{command.name} is given expanded words, and an option that runs code may be among them"
        if word in refused or _short_refused(word, refused) or _long_refused(word, refused):
            return f"{command.name} {word} can run code or evaluate a subscript"
    return None


def _leading_options(words: tuple[str, ...]) -> tuple[str, ...]:
    """The words before the first operand of a builtin that reads its options first (`--` ends them)."""
    for at, word in enumerate(words):
        if word == "--" or not (word.startswith(("-", "+")) or _maybe_expanded(word)):
            return words[:at]
    return words


def _maybe_expanded(word: str) -> bool:
    """Might the shell expand ``word`` into something else (an option)? ``$``, a backtick, a glob, ``~``, braces."""
    return any(c in word for c in "$`*?[~{")


def _short_refused(word: str, refused: frozenset[str]) -> bool:
    return word.startswith("-") and not word.startswith("--") and any(f"-{c}" in refused for c in word[1:])


def _long_refused(word: str, refused: frozenset[str]) -> bool:
    name = word.split("=", 1)[0]
    return name.startswith("--") and len(name) > 3 and any(r.startswith(name) for r in refused if r.startswith("--"))
