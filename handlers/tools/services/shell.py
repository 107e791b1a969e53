"""Reading a Bash command line as the shell would, to decide whether it may run — failing closed.

Owns :func:`analyse` (every command a line runs, normalised; *not understood* when the parser cannot see all of it)
and :func:`bash_command_matches`; which commands are read-only is ``read_only``'s. The rules: docs/security.md.
Decides nothing.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any, Final

import attrs

__all__ = [
    "MAX_LINE",
    "ShellCommand",
    "SimpleCommand",
    "analyse",
    "bash_command_matches",
    "simple_command",
]

#: The longest command line the gate reads (characters): a longer one cannot be checked, and asks. Model
#: commands are far shorter; the parser's time grows with the line (tools/bench_gate.py prints it).
MAX_LINE: Final = 65_536

_NAME: Final = re.compile(r"[A-Za-z0-9_.+-]+")  # a command word that is a plain name, no pattern or expansion
_PARAMETER: Final = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*|[0-9]|[?#@*$!-])$")  # `$x`, `${x}`, `$1`, `$?`
_WRAPPERS: Final = frozenset({"command", "builtin", "exec", "env", "nohup"})
_WRITING_REDIRECTS: Final = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&"})
_READING_REDIRECTS: Final = frozenset({"<", "<>"})
_HARMLESS_TARGETS: Final = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr"})
# Characters that are literal outside quotes; anything else (globs, `~`, braces, `$`, `\`, `!`) is not.
_LITERAL_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:=,+@%^-")
# Text that runs a command if the shell evaluates a word again (array subscripts in `printf -v`,
# `test -v`, `read`, `declare`, arithmetic; `eval`): refused even inside quotes.
_REEVALUATED: Final = ("$(", "`", "${", "$[")


@attrs.frozen(kw_only=True)
class SimpleCommand:
    """One command the line runs: its normalised words, its assignments, and whether it is all literal."""

    words: tuple[str, ...]
    assignments: tuple[str, ...] = ()  # `X=1 cmd`, `env X=1 cmd`: they change what the program does
    literal: bool = True  # every word, redirection target and here-document is text the shell does not expand
    reads: tuple[str, ...] = ()  # files input redirections read (`< file`)
    path: str = ""  # the command word as written when it names a folder (`./cat`, `/usr/bin/cat`), else ""

    @property
    def name(self) -> str:
        return self.words[0]

    @property
    def text(self) -> str:
        """The normalised command as a deny or ask rule's specifier is matched against (``rm -rf x``)."""
        return " ".join(self.words)

    @property
    def full_text(self) -> str:
        """The command with its assignments, as allow rules see it: ``X=1 git diff`` is not ``git diff``."""
        return " ".join((*self.assignments, *self.words))


@attrs.frozen(kw_only=True)
class ShellCommand:
    """What a command line would do, as far as the parser can tell."""

    commands: tuple[SimpleCommand, ...] = ()
    writes: tuple[str, ...] = ()  # files redirections write (not /dev/null), as written
    reads: tuple[str, ...] = ()  # files read by redirections on compound commands (`while …; done < f`)
    assigned: tuple[str, ...] = ()  # variables given a value outside a command's prefix (`x=1;`, `for x in`)
    problem: str | None = None  # why the line is not fully understood (None: it is)

    @property
    def understood(self) -> bool:
        return self.problem is None


class _Unclear(Exception):
    """Shell syntax this module does not fully understand."""


@functools.lru_cache(maxsize=256)
def analyse(line: str) -> ShellCommand:
    """Every simple command and written file of ``line``; ``problem`` says what could not be read.

    Kept per line (the answer is frozen): one Bash call is read by the gate's decision,
    its checkpoint, the sandbox policy and the tool, and each asks here.
    """
    import bashlex  # here: a run without a Bash call, and `queryloop check`, do not pay for its parser tables

    if "$'" in line or '$"' in line:
        return ShellCommand(problem="ANSI-C or locale quoting ($'…', $\"…\") is not checked")
    if "\x00" in line:
        return ShellCommand(problem="the command contains a NUL byte")
    if len(line) > MAX_LINE:
        return ShellCommand(problem=f"the command is {len(line)} characters long, over the {MAX_LINE} the gate reads")
    if (len(line) - len(line.rstrip("\\"))) % 2:
        return ShellCommand(problem="the command ends in a backslash, which bash reads as a word the parser drops")
    try:
        trees = bashlex.parse(line)
    except RecursionError:
        return ShellCommand(problem="the command is nested too deeply to check")
    except Exception as exc:  # the parser's own errors and its bugs (a NameError in its quote removal): unclear
        return ShellCommand(problem=f"shell syntax that is not checked ({type(exc).__name__}: {exc})")
    reader = _Reader(line)
    try:
        for tree in trees:
            reader.visit(tree)
    except _Unclear as exc:
        return ShellCommand(problem=str(exc))
    except RecursionError:
        return ShellCommand(problem="the command is nested too deeply to check")
    except Exception as exc:  # a tree shape this reader did not expect: unclear, never a crash of the run
        return ShellCommand(problem=f"shell syntax that is not checked ({type(exc).__name__}: {exc})")
    return ShellCommand(
        commands=tuple(reader.commands),
        writes=tuple(reader.writes),
        reads=tuple(reader.reads),
        assigned=tuple(reader.assigned),
    )


# Nodes that only hold others (a `word` under one — a loop's list, a function's name — is checked as any word).
_CONTAINERS: Final = frozenset(
    {"list", "pipeline", "compound", "if", "for", "while", "until", "function", "operator", "pipe", "reservedword"}
)
_SUBSTITUTIONS: Final = frozenset({"commandsubstitution", "processsubstitution"})


class _Reader:
    """Walks bashlex trees, collecting simple commands; raises :class:`_Unclear` at anything it cannot vouch for."""

    def __init__(self, line: str) -> None:
        self.line = line
        self.commands: list[SimpleCommand] = []
        self.writes: list[str] = []
        self.reads: list[str] = []  # files redirections on compound commands read
        self.assigned: list[str] = []  # `x=1` with no command, a for loop's variable

    def visit(self, node: Any) -> None:
        kind = getattr(node, "kind", None)
        if kind == "command":
            self._command(node)
        elif kind in _SUBSTITUTIONS:
            self.visit(node.command)
        elif kind in ("word", "assignment"):
            self._word(node)
        elif kind == "redirect":  # on a compound command: `{ ls; } > f`, `( … ) > f`, `for …; done > f`
            self._redirect(node, writes=self.writes, reads=self.reads)
        elif kind in _CONTAINERS:
            if kind == "for":  # `for PATH in …`: the loop assigns its variable
                self.assigned.extend(p.word for p in node.parts[1:2] if getattr(p, "kind", "") == "word")
            for child in _children(node):
                self.visit(child)
        else:
            raise _Unclear(f"shell construct {kind!r} is not checked")

    def _children_of_word(self, word: Any) -> None:
        """Check a word's expansions: plain parameters pass, substitutions are read, anything else is unclear."""
        for part in getattr(word, "parts", None) or ():
            kind = getattr(part, "kind", "")
            if kind == "parameter":
                if not _PARAMETER.match(part.value):
                    raise _Unclear(f"the parameter expansion ${{{part.value}}} is not checked")
            elif kind in _SUBSTITUTIONS:
                self.visit(part.command)
            elif kind != "tilde":
                raise _Unclear(f"the expansion {kind!r} in {word.word!r} is not checked")
        # backslashes ("a[\$(…)]", a\[\$\(…\)\]) hide such text from the line, not from a later evaluation
        bare = self._raw_outside_parts(word).replace("\\\n", "").replace("\\", "")
        if any(marker in bare for marker in _REEVALUATED):
            raise _Unclear(f"the word {word.word!r} holds text that runs a command if evaluated again")

    def _raw(self, node: Any) -> str:
        start, end = node.pos
        return str(self.line[start:end])

    def _raw_outside_parts(self, word: Any) -> str:
        """The word as written, with the expansions bashlex found cut out (what is left is quoted or plain text)."""
        start, end = word.pos
        pieces, at = [], start
        for part in sorted(getattr(word, "parts", None) or (), key=lambda p: p.pos[0]):
            pieces.append(self.line[at : part.pos[0]])
            at = max(at, part.pos[1])
        pieces.append(self.line[at:end])
        return "".join(pieces)

    def _word(self, word: Any) -> bool:
        """Check one word; True when it is a literal (nothing in it is expanded).

        A literal word must read as bash reads it: bashlex removes quotes inside other quotes
        (``a"'b'"`` is ``ab`` to it, ``a'b'`` to bash), so a rule would be matched against a
        word bash never runs.
        """
        self._children_of_word(word)
        raw = self._raw(word)
        if getattr(word, "parts", None) or not _is_literal(raw):
            return False
        if word.kind == "word" and word.word != _unquoted(raw):
            raise _Unclear(f"the word {raw!r} is read as {word.word!r} by the parser and {_unquoted(raw)!r} by bash")
        return True

    def _command(self, node: Any) -> None:
        words: list[str] = []
        assignments: list[str] = []
        writes: list[str] = []
        reads: list[str] = []
        literal = True
        for part in node.parts:
            if part.kind == "word":
                if not words and getattr(part, "parts", None):
                    raise _Unclear(f"the command word {part.word!r} is an expansion")
                literal = self._word(part) and literal
                words.append(part.word)
            elif part.kind == "assignment":
                self._word(part)
                assignments.append(part.word)
            elif part.kind == "redirect":
                literal = self._redirect(part, writes=writes, reads=reads) and literal
            else:
                raise _Unclear(f"shell construct {part.kind!r} is not checked")
        self.writes.extend(writes)
        words, wrapped, path = _normalise(words)
        assignments.extend(wrapped)
        if words:
            self.commands.append(
                SimpleCommand(
                    words=tuple(words), assignments=tuple(assignments), literal=literal, reads=tuple(reads), path=path
                )
            )
        else:
            self.assigned.extend(a.split("=", 1)[0].rstrip("+") for a in assignments)

    def _redirect(self, redirect: Any, *, writes: list[str], reads: list[str]) -> bool:
        """Record what a redirection writes or reads; True when it is literal."""
        target = redirect.output
        heredoc = getattr(redirect, "heredoc", None)
        if heredoc is not None:
            return self._heredoc(redirect, heredoc)
        if isinstance(target, int) or target == "-":  # 2>&1 names a descriptor, 2>&- closes one: no file
            return True
        if not hasattr(target, "pos"):
            raise _Unclear(f"a redirection to {target!r} is not checked")
        if redirect.type == "<<<":  # a here-string: its word is expanded like any other
            return self._word(target)
        if getattr(target, "parts", None):
            self._children_of_word(target)
            raise _Unclear(f"a redirection names {target.word!r}, an expansion")
        if not _is_literal(self._raw(target)):
            raise _Unclear(f"a redirection names {target.word!r}, which the shell expands")
        if redirect.type in _WRITING_REDIRECTS and target.word not in _HARMLESS_TARGETS:
            writes.append(target.word)
        if redirect.type in _READING_REDIRECTS:
            reads.append(target.word)
        return True

    def _heredoc(self, redirect: Any, heredoc: Any) -> bool:
        """A here-document whose delimiter is plain text and whose body expands nothing; anything else is unclear.

        bashlex ends a here-document at a line equal to its delimiter *as written*
        (``'EOF'``), bash at a line equal to it after quote removal (``EOF``): with a
        quoted or escaped delimiter the two disagree on where the document ends, and
        what bash then runs as commands the parser read as text. So only a delimiter
        the two read alike passes, and its body must hold nothing the shell expands
        (``$``, a backtick, a backslash, which also joins lines).
        """
        delimiter = self._raw(redirect.output)
        if not delimiter or any(ch not in _LITERAL_CHARS for ch in delimiter):
            raise _Unclear(
                f"a here-document delimited by {delimiter!r} is not checked (only a plain delimiter such as EOF is: "
                "bash and the parser disagree on where a quoted one ends)"
            )
        body = str(getattr(heredoc, "value", ""))
        if any(c in body for c in "$`\\"):
            raise _Unclear("a here-document body that the shell expands is not checked")
        return True


def _children(node: object) -> Iterator[Any]:
    """Every node under ``node``, whatever attribute holds it (``parts``, ``list``, ``redirects``, ``body``, …).

    Generic on purpose: a construct whose children this module did not know of is
    still walked, and an unknown kind among them is unclear — never skipped.
    """
    seen: set[int] = set()
    for value in vars(node).values():
        for child in value if isinstance(value, list) else [value]:
            if hasattr(child, "kind") and id(child) not in seen:
                seen.add(id(child))
                yield child


def _is_literal(raw: str) -> bool:
    """True when the shell would take ``raw`` as written: plain characters, '…', or "…" without $ ` \\ !."""
    if raw in ("[", "]"):  # test's brackets: a lone bracket is no pattern
        return True
    quote: str | None = None
    for ch in raw:
        if quote == "'":
            quote = None if ch == "'" else quote
        elif quote == '"':
            if ch == '"':
                quote = None
            elif ch in "$`\\!":
                return False
        elif ch in "'\"":
            quote = ch
        elif ch not in _LITERAL_CHARS:
            return False
    return quote is None and not raw.startswith("=")


def _unquoted(raw: str) -> str:
    """A literal word (:func:`_is_literal`) after bash's quote removal: '…' and "…" lose their quotes only."""
    out: list[str] = []
    quote: str | None = None
    for ch in raw:
        if quote is None and ch in "'\"":
            quote = ch
        elif ch == quote:
            quote = None
        else:
            out.append(ch)
    return "".join(out)


def simple_command(words: tuple[str, ...], *, literal: bool) -> SimpleCommand | str:
    """``words`` run as a command (what a wrapper runs), read as :func:`analyse` reads one; or why it cannot be."""
    try:
        normal, assignments, path = _normalise(list(words))
    except _Unclear as exc:
        return str(exc)
    if not normal:
        return "it names no command"
    return SimpleCommand(words=tuple(normal), assignments=tuple(assignments), literal=literal, path=path)


def _normalise(words: list[str]) -> tuple[list[str], list[str], str]:
    """The command word as the shell resolves it, wrappers removed; the assignments ``env`` makes; its path."""
    assignments: list[str] = []
    path = ""
    while words:
        name = words[0].rsplit("/", 1)[-1] if "/" in words[0] else words[0]
        if not _NAME.fullmatch(name) and name != "[":
            raise _Unclear(f"the command word {words[0]!r} is not a plain name")
        path = words[0] if "/" in words[0] else ""
        words = [name, *words[1:]]
        if name not in _WRAPPERS:
            return words, assignments, path
        rest = words[1:]
        if name == "env":
            while rest and "=" in rest[0] and not rest[0].startswith("-"):
                assignments.append(rest[0])
                rest = rest[1:]
        if rest and rest[0].startswith("-"):
            raise _Unclear(f"{name} with options is not checked")
        words = rest
    return words, assignments, path


# ---- rule patterns -----------------------------------------------------------------------------
# A Bash permission rule's specifier (and an excludedCommands entry) is matched against one normalised command.


@functools.lru_cache(maxsize=1024)
def _bash_pattern(specifier: str) -> tuple[tuple[str, ...], bool]:
    """A specifier's literal pieces between its ``*`` wildcards, and whether further words may follow.

    `prefix:*` (legacy) and a trailing ` *` both mean "this command, with or without
    further arguments": `npm run test:*` matches `npm run test` and `npm run test foo`
    but not `npm run testing`. Only `*` is a wildcard: `?` and `[` are ordinary.
    """
    if specifier.endswith((":*", " *")):
        return tuple(specifier[:-2].rstrip().split("*")), True
    return tuple(specifier.strip().split("*")), False


def bash_command_matches(specifier: str, command: str) -> bool:
    """Does a Bash rule's specifier (``git push:*``, ``npm run *``, ``ls``) match this one command?

    In time linear in the command, whatever the rule (a regular expression with two
    wildcards backtracks quadratically on a long hostile line): the pieces between
    wildcards are found leftmost, which leaves the most room for what follows.
    """
    pieces, more = _bash_pattern(specifier)
    text = command.strip()
    first, last = pieces[0], pieces[-1]
    if not text.startswith(first):
        return False
    if len(pieces) == 1:
        return len(text) == len(first) or (more and text[len(first)].isspace())
    at = len(first)
    for piece in pieces[1:-1]:
        found = text.find(piece, at)
        if found < 0:
            return False
        at = found + len(piece)
    if not more:
        return len(text) - len(last) >= at and text.endswith(last)
    return _ends_a_word(text, last, at)


def _ends_a_word(text: str, piece: str, at: int) -> bool:
    """Does ``piece`` occur in ``text`` from ``at`` on, ending at the end or before whitespace?"""
    found = text.find(piece, at)
    while found >= 0:
        end = found + len(piece)
        if end == len(text) or text[end].isspace():
            return True
        found = text.find(piece, found + 1)
    return False
