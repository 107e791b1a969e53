"""Reading a Bash command line as the shell would, to decide whether it may run.

Owns :func:`analyse`: the command line parsed by ``bashlex`` into every simple
command it runs — in lists, pipelines, loops, functions, subshells, and inside
command and process substitutions — each with its command word normalised the way
the shell resolves it (``/bin/rm`` → ``rm``, ``\\rm`` → ``rm``, ``command rm`` /
``builtin rm`` / ``exec rm`` / ``env X=1 rm`` → ``rm``, assignments dropped), plus
every file a redirection writes. Anything the parser does not fully understand
(ANSI-C ``$'…'`` quoting, ``[[ ]]``, ``case``, arithmetic, a command word that is
itself an expansion or a pattern) makes the analysis *not understood*: the caller
must ask, never guess. Also owns the conservative read-only classification (a
known read-only program, without a flag that writes or runs something else).

Does not decide permissions (``permissions`` does, with the rules and the mode).
Model-proposed commands are hostile input: this module errs towards "not understood".
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Final

import attrs

__all__ = ["ShellCommand", "SimpleCommand", "analyse", "is_read_only"]

_NAME: Final = re.compile(r"^[A-Za-z0-9_.+-]+$")  # a command word that is a plain name, no pattern or expansion
_WRAPPERS: Final = frozenset({"command", "builtin", "exec", "env", "nohup"})
_WRITING_REDIRECTS: Final = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&"})
_HARMLESS_TARGETS: Final = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr"})


@attrs.frozen(kw_only=True)
class SimpleCommand:
    """One command the line runs: its normalised words and their text for rule matching."""

    words: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.words[0]

    @property
    def text(self) -> str:
        """The normalised command as a rule's specifier is matched against (``rm -rf x``)."""
        return " ".join(self.words)


@attrs.frozen(kw_only=True)
class ShellCommand:
    """What a command line would do, as far as the parser can tell."""

    commands: tuple[SimpleCommand, ...] = ()
    writes: tuple[str, ...] = ()  # files redirections write (not /dev/null), as written
    problem: str | None = None  # why the line is not fully understood (None: it is)

    @property
    def understood(self) -> bool:
        return self.problem is None


class _Unclear(Exception):
    """Shell syntax this module does not fully understand."""


def analyse(line: str) -> ShellCommand:
    """Every simple command and written file of ``line``; ``problem`` says what could not be read."""
    import bashlex  # here: a run without a Bash call, and `queryloop check`, do not pay for its parser tables
    import bashlex.errors

    if "$'" in line:
        return ShellCommand(problem="ANSI-C quoting ($'…') is not checked")
    try:
        trees = bashlex.parse(line)
    except (bashlex.errors.ParsingError, NotImplementedError, IndexError, AttributeError, TypeError, ValueError) as exc:
        return ShellCommand(problem=f"shell syntax that is not checked ({type(exc).__name__}: {exc})")
    commands: list[SimpleCommand] = []
    writes: list[str] = []
    try:
        for tree in trees:
            for node in _walk(tree):
                if node.kind == "command":
                    command, written = _simple(node)
                    if command is not None:
                        commands.append(command)
                    writes.extend(written)
    except _Unclear as exc:
        return ShellCommand(problem=str(exc))
    return ShellCommand(commands=tuple(commands), writes=tuple(writes))


def _children(node: Any) -> Iterator[Any]:
    for key in ("parts", "list", "command", "output", "heredoc"):
        value = getattr(node, key, None)
        if isinstance(value, list):
            yield from (v for v in value if hasattr(v, "kind"))
        elif hasattr(value, "kind"):
            yield value


def _walk(node: Any) -> Iterator[Any]:
    yield node
    for child in _children(node):
        yield from _walk(child)


_EXPANSIONS: Final = frozenset({"parameter", "commandsubstitution", "processsubstitution", "tilde"})


def _has_expansion(word: Any) -> bool:
    return any(getattr(p, "kind", "") in _EXPANSIONS for p in _walk(word) if p is not word)


def _simple(node: Any) -> tuple[SimpleCommand | None, list[str]]:
    words: list[str] = []
    writes: list[str] = []
    for part in node.parts:
        if part.kind == "word":
            if not words and _has_expansion(part):
                raise _Unclear(f"the command word {part.word!r} is an expansion")
            words.append(part.word)
        elif part.kind == "redirect":
            writes.extend(_written(part))
        elif part.kind != "assignment":
            raise _Unclear(f"shell construct {part.kind!r} is not checked")
    words = _normalise(words)
    return (SimpleCommand(words=tuple(words)) if words else None), writes


def _written(redirect: Any) -> list[str]:
    if redirect.type not in _WRITING_REDIRECTS:
        return []
    target = redirect.output
    if isinstance(target, int):  # 2>&1: a descriptor, not a file
        return []
    if _has_expansion(target):
        raise _Unclear(f"a redirection writes to {target.word!r}, an expansion")
    return [] if target.word in _HARMLESS_TARGETS else [target.word]


def _normalise(words: list[str]) -> list[str]:
    """The command word as the shell resolves it, wrappers and assignments removed."""
    while words:
        name = words[0].rsplit("/", 1)[-1] if "/" in words[0] else words[0]
        if not _NAME.match(name):
            raise _Unclear(f"the command word {words[0]!r} is not a plain name")
        words = [name, *words[1:]]
        if name not in _WRAPPERS:
            return words
        rest = words[1:]
        if name == "env":
            while rest and "=" in rest[0] and not rest[0].startswith("-"):
                rest = rest[1:]
        if rest and rest[0].startswith("-"):
            raise _Unclear(f"{name} with options is not checked")
        words = rest
    return words


# ---- read-only classification ------------------------------------------------------------------

_READ_ONLY: Final = frozenset(
    {
        "basename", "cat", "cmp", "cut", "date", "df", "diff", "dirname", "du", "echo", "egrep", "false",
        "fgrep", "file", "grep", "head", "id", "ls", "md5sum", "nl", "printf", "pwd", "readlink", "realpath",
        "seq", "sha1sum", "sha256sum", "stat", "tail", "test", "tr", "true", "type", "uname", "uniq", "wc",
        "which", "whoami", "[",
    }
)  # fmt: skip
_GIT_READ_ONLY: Final = frozenset({"status", "log", "diff", "show", "rev-parse", "ls-files", "blame", "describe"})
_FIND_ACTIONS: Final = frozenset(
    {"-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls"}
)


def is_read_only(command: SimpleCommand) -> bool:
    """True when ``command`` only reads: a known read-only program without a flag that writes or runs something."""
    name, args = command.name, command.words[1:]
    if name in _READ_ONLY:
        return not (name == "tail" and any(a in ("-f", "-F", "--follow") or a.startswith("--follow") for a in args))
    if name == "find":
        return not any(a in _FIND_ACTIONS for a in args)
    if name == "sort":
        return not any(a == "-o" or a.startswith(("-o", "--output")) for a in args)
    if name == "git":
        return bool(args) and args[0] in _GIT_READ_ONLY and not any(a.startswith("--output") for a in args)
    return False
