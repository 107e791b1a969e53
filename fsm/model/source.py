"""Reading declaration files with line numbers: YAML (machines, scenarios) and JSON (settings, MCP servers).

A key given twice, a YAML alias or a YAML 1.1 boolean as a name is refused; schema errors become ``path:line``
problems.
"""

from __future__ import annotations

import json
import json.decoder
import json.scanner
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, cast

import attrs
import jsonschema
import yaml

from ..errors import SpecError, SpecProblem
from .jsontext import JsonLimitError, long_number_error, nesting_problem

_HAS_LIBYAML: bool = yaml.__with_libyaml__  # else PyYAML was built without libyaml: the pure-Python parser alone

__all__ = ["Source", "json_path", "read_json", "read_yaml", "schema_problems"]

Where = tuple[Any, ...]
_YAML11_BOOLS = {"y", "yes", "n", "no", "on", "off"}
# The pure-Python scanner calls the decoder's own parse_object/parse_array (the C one does
# not), and the string scanner: neither is in the type stubs.
_py_make_scanner = cast(
    Callable[[json.JSONDecoder], Callable[[str, int], tuple[Any, int]]], vars(json.scanner)["py_make_scanner"]
)
_scanstring = cast(Callable[[str, int, bool], tuple[str, int]], vars(json.decoder)["scanstring"])


@attrs.frozen(kw_only=True)
class Source:
    """A parsed file: its data and the line of every node, keyed by the path to it."""

    path: str
    data: Any
    lines: Mapping[Where, int]
    kind: Literal["yaml", "json"] = "yaml"  # names its containers: mapping/list, or object/array

    def line_of(self, where: Iterable[object]) -> int | None:
        """The line of the node at ``where``, else of its nearest enclosing node."""
        p = tuple(where)
        while p not in self.lines and p:
            p = p[:-1]
        return self.lines.get(p)

    def problem(self, where: Iterable[object], message: str, fix: str | None = None) -> SpecProblem:
        return SpecProblem(self.path, self.line_of(where), message, fix)


# ---- YAML ------------------------------------------------------------------------------------


class _Refused(yaml.MarkedYAMLError):
    pass


class _RefusingAliases(yaml.composer.Composer):
    """PyYAML's composer, refusing aliases (a file must say each thing where it means it)."""

    check_event: Callable[..., bool]  # the parser's, either one
    peek_event: Callable[[], Any]

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise _Refused(problem=f"alias *{event.anchor} is not allowed", problem_mark=event.start_mark)
        return super().compose_node(parent, index)


class _Loader(_RefusingAliases, yaml.SafeLoader):
    """PyYAML's safe loader, all in Python: the reader of a file libyaml's parser refused, for PyYAML's message."""


_LIBYAML_LOADER = yaml.CSafeLoader if _HAS_LIBYAML else yaml.SafeLoader


class _FastLoader(_RefusingAliases, _LIBYAML_LOADER):  # type: ignore[misc,valid-type]
    """The same loader over libyaml's parser (about five times faster on the query loop; every run reads it)."""

    def __init__(self, text: str) -> None:
        _LIBYAML_LOADER.__init__(self, text)  # its parser, constructor and resolver
        _RefusingAliases.__init__(self)  # the composer's own state


def _node(text: str) -> tuple[yaml.Node | None, yaml.constructor.SafeConstructor]:
    """The document's node tree and the loader to build its data with.

    libyaml's parser when PyYAML has it; a file it refuses is parsed again in Python, whose
    messages say more (``expected ',' or ']', but got ':'`` where libyaml says ``did not find
    expected ',' or ']'``), so the error is the same with or without libyaml.
    """
    if _HAS_LIBYAML:
        fast = _FastLoader(text)
        try:
            return fast.get_single_node(), fast
        except _Refused:
            raise
        except yaml.MarkedYAMLError:
            pass
        finally:
            fast.dispose()
    loader = _Loader(text)
    try:
        return loader.get_single_node(), loader
    finally:
        loader.dispose()


def _walk(node: yaml.Node, where: Where, source: str, lines: dict[Where, int], problems: list[SpecProblem]) -> None:
    """Record the line of every node (a mapping entry: its key's line) and flag what the rules refuse."""
    lines.setdefault(where, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        first: dict[object, int] = {}
        for key, value in node.value:
            line = key.start_mark.line + 1
            if key.tag == "tag:yaml.org,2002:bool":
                problems.append(
                    SpecProblem(
                        source,
                        line,
                        f"key {key.value!r} is read as a YAML 1.1 boolean, not a name",
                        "write `event:` instead of `on:`, and quote yes/no/on/off when you mean the word",
                    )
                )
            name = key.value if isinstance(key, yaml.ScalarNode) else str(key.start_mark)
            if name in first:
                problems.append(
                    SpecProblem(
                        source,
                        line,
                        f"key {name!r} is given twice (lines {first[name]} and {line})",
                        "keep one of them: the second would silently replace the first",
                    )
                )
            first.setdefault(name, line)
            lines.setdefault((*where, name), line)
            _walk(value, (*where, name), source, lines, problems)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, (*where, i), source, lines, problems)
    elif (
        isinstance(node, yaml.ScalarNode)
        and node.tag == "tag:yaml.org,2002:bool"
        and node.value.lower() in _YAML11_BOOLS
    ):
        problems.append(
            SpecProblem(
                source,
                node.start_mark.line + 1,
                f"value {node.value!r} is read as a YAML 1.1 boolean",
                "write true/false for booleans, or quote the word if you mean a name",
            )
        )


def read_yaml(text: str, path: str, *, empty_fix: str = "the file must hold a mapping") -> Source:
    """Parse YAML ``text`` (read from ``path``); every problem found is raised together."""
    try:
        node, loader = _node(text)
        if node is None:
            raise SpecError([SpecProblem(path, 1, "the file is empty", empty_fix)])
        lines: dict[Where, int] = {}
        problems: list[SpecProblem] = []
        _walk(node, (), path, lines, problems)
        if problems:
            raise SpecError(problems)
        data = loader.construct_document(node)
    except _Refused as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark is not None else None
        raise SpecError(
            [SpecProblem(path, line, str(exc.problem), "write the value out in full where it is used")]
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (None, None)
        raise SpecError(
            [SpecProblem(path, line, f"invalid YAML: {exc.problem}", "fix the syntax there", column=column)]
        ) from None
    return Source(path=path, data=data, lines=lines)


# ---- JSON ------------------------------------------------------------------------------------


class _DuplicateKey(ValueError):
    def __init__(self, key: str, first: int, second: int) -> None:
        super().__init__(key)
        self.key, self.first, self.second = key, first, second


def _line_at(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


class _Decoder(json.JSONDecoder):
    """The standard decoder, with objects parsed here so every key's position is known.

    Lines of nodes are recorded by path while decoding; a key given twice in one object
    stops the decoding with both lines.
    """

    def __init__(self, text: str, lines: dict[Where, int]) -> None:
        super().__init__()
        self._text = text
        self._lines = lines
        self._path: list[Any] = []
        self._strict = True
        self.parse_object = self._parse_object
        self.parse_array = self._parse_array
        self.scan_once = _py_make_scanner(self)

    def _skip(self, s: str, end: int) -> int:
        while end < len(s) and s[end] in " \t\n\r":
            end += 1
        return end

    def _expect(self, s: str, end: int, char: str, what: str) -> int:
        if end >= len(s) or s[end] != char:
            raise json.JSONDecodeError(f"Expecting {what}", s, end)
        return end + 1

    def _value(self, s: str, end: int, key: object) -> tuple[object, int]:
        self._path.append(key)
        self._lines[tuple(self._path)] = _line_at(s, end)
        try:
            return self.scan_once(s, end)
        except StopIteration as exc:
            raise json.JSONDecodeError("Expecting value", s, exc.value) from None
        finally:
            self._path.pop()

    def _parse_object(self, s_and_end: tuple[str, int], *_: object) -> tuple[dict[str, object], int]:
        s, end = s_and_end
        out: dict[str, object] = {}
        seen: dict[str, int] = {}
        end = self._skip(s, end)
        if end < len(s) and s[end] == "}":
            return out, end + 1
        while True:
            if end >= len(s) or s[end] != '"':
                raise json.JSONDecodeError("Expecting property name enclosed in double quotes", s, end)
            at = end
            key, end = _scanstring(s, end + 1, self._strict)
            if key in seen:
                raise _DuplicateKey(key, seen[key], _line_at(s, at))
            seen[key] = _line_at(s, at)
            end = self._expect(s, self._skip(s, end), ":", "':' delimiter")
            out[key], end = self._value(s, self._skip(s, end), key)
            end = self._skip(s, end)
            if end < len(s) and s[end] == "}":
                return out, end + 1
            end = self._skip(s, self._expect(s, end, ",", "',' delimiter"))

    def _parse_array(self, s_and_end: tuple[str, int], _scan: Callable[..., Any]) -> tuple[list[object], int]:
        s, end = s_and_end
        out: list[object] = []
        end = self._skip(s, end)
        if end < len(s) and s[end] == "]":
            return out, end + 1
        while True:
            value, end = self._value(s, end, len(out))
            out.append(value)
            end = self._skip(s, end)
            if end < len(s) and s[end] == "]":
                return out, end + 1
            end = self._skip(s, self._expect(s, end, ",", "',' delimiter"))


def read_json(text: str, path: str) -> Source:
    """Parse JSON ``text`` (read from ``path``) keeping every node's line; duplicate keys are errors.

    Nesting deeper than :data:`~queryloop.fsm.model.jsontext.MAX_JSON_DEPTH` and integers too
    long for ``int()`` are problems at their line, like a syntax error (never a
    ``RecursionError`` or a bare ``ValueError``).
    """
    lines: dict[Where, int] = {(): 1}
    try:
        refused = nesting_problem(text)
        if refused is not None:
            raise refused
        try:
            data = _Decoder(text, lines).decode(text)
        except (_DuplicateKey, json.JSONDecodeError):
            raise
        except ValueError:  # int() past its digit limit
            raise long_number_error(text) from None
    except JsonLimitError as exc:
        raise SpecError([SpecProblem(path, exc.lineno, exc.msg, exc.fix, column=exc.colno)]) from None
    except _DuplicateKey as exc:
        message = f"key {exc.key!r} is given twice (lines {exc.first} and {exc.second})"
        raise SpecError(
            [SpecProblem(path, exc.second, message, "keep one of them: JSON readers disagree on which one wins")]
        ) from None
    except json.JSONDecodeError as exc:
        raise SpecError(
            [SpecProblem(path, exc.lineno, f"invalid JSON: {exc.msg}", "fix the syntax there", column=exc.colno)]
        ) from None
    return Source(path=path, data=data, lines=lines, kind="json")


# ---- JSON Schema -------------------------------------------------------------------------------


_TYPE_NAMES = {
    "string": "a string",
    "number": "a number",
    "integer": "an integer",
    "boolean": "a boolean",
    "null": "null",
}
_CONTAINERS = {"yaml": ("a mapping", "a list"), "json": ("an object", "an array")}


def json_path(where: Iterable[object]) -> str:
    """``where`` as a JSON path: ``$.states.calling.emits[0]``."""
    out = "$"
    for part in where:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and part.isidentifier():
            out += f".{part}"
        else:
            out += f"[{json.dumps(part)}]"
    return out


def _message(err: jsonschema.ValidationError, kind: Literal["yaml", "json"]) -> tuple[str, str | None]:
    """What is wrong and how to fix it, for one schema error."""
    mapping, sequence = _CONTAINERS[kind]
    names = {**_TYPE_NAMES, "object": mapping, "array": sequence}

    def _found(value: object) -> str:
        if isinstance(value, dict):
            return mapping
        if isinstance(value, list):
            return sequence
        return json.dumps(value, default=str)

    value: Any = err.validator_value
    schema: Any = err.schema
    if err.validator == "additionalProperties":
        allowed = sorted((schema.get("properties") or {}).keys()) if isinstance(schema, dict) else []
        extra = sorted(k for k in err.instance if k not in allowed) if isinstance(err.instance, dict) else []
        return f"unknown key {extra[0]!r}" if extra else err.message, (
            "allowed keys here: " + ", ".join(allowed)
        ) if allowed else None
    if err.validator == "required":
        missing = [k for k in value if isinstance(err.instance, dict) and k not in err.instance]
        return f"missing required key {json.dumps(missing[0] if missing else value)}", "add it"
    if err.validator == "type":
        expected = " or ".join(names.get(n, n) for n in ([value] if isinstance(value, str) else value))
        return f"expected {expected}, found {_found(err.instance)}", f"write {expected} here"
    if err.validator == "enum":
        return f"{_found(err.instance)} is not allowed here", "use one of: " + ", ".join(str(v) for v in value)
    if err.validator == "const":
        return f"expected {json.dumps(value)}, found {_found(err.instance)}", f"write {json.dumps(value)}"
    if err.validator in ("exclusiveMinimum", "minimum"):
        bound = f"greater than {value}" if err.validator == "exclusiveMinimum" else f"at least {value}"
        return f"expected a number {bound}, found {_found(err.instance)}", f"write a number {bound}"
    if err.validator == "pattern":
        return f"{err.instance!r} is not a valid name here", f"names match {value}"
    if err.validator in ("oneOf", "anyOf") and not isinstance(err.instance, (dict, list)):
        return f"{_found(err.instance)} is not allowed here", "see the format's documentation"
    return err.message, "see the format's documentation"


def schema_problems(
    schema: Mapping[str, object], source: Source, *, fixes: Mapping[str, str] | None = None
) -> list[SpecProblem]:
    """Every JSON-Schema violation of ``source.data`` as ``file:line: $.json.path: what (fix)``, in file order.

    An unknown key is reported at its own line; ``fixes`` maps a missing top-level key
    to the fix to suggest for it.
    """
    validator = jsonschema.Draft202012Validator(schema)
    out: list[SpecProblem] = []
    for err in validator.iter_errors(source.data):
        where = list(err.absolute_path)
        message, fix = _message(err, source.kind)
        line_at = where
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            known = (err.schema.get("properties") or {}) if isinstance(err.schema, dict) else {}
            line_at = [*where, *sorted(k for k in err.instance if k not in known)[:1]]
        if err.validator == "required" and not where and fixes:
            fix = next((f for k, f in fixes.items() if json.dumps(k) in message), fix)
        out.append(source.problem(line_at, f"{json_path(where)}: {message}", fix))
    return sorted(out, key=lambda p: p.line or 0)
