"""JSON someone else wrote, read within what Python can walk: nesting depth and integer length bounded.

Too deep a document would end in ``RecursionError`` far from where it was read; here it is a
``json.JSONDecodeError`` (:class:`JsonLimitError`) at its position.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any, Final

__all__ = ["MAX_JSON_DEPTH", "JsonLimitError", "loads_json", "long_number_error", "nesting_problem", "well_formed"]

MAX_JSON_DEPTH: Final = 100
"""Objects and arrays nested deeper than this are refused: far more than any setting, message or tool input
needs, and far less than the ~1000 frames after which Python's walkers fail."""

# A JSON string (escapes included), or one bracket: what the depth scan steps through.
_STRING_OR_BRACKET = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
# A JSON string, or a number: only integers (no fraction, no exponent) go through int().
_STRING_OR_NUMBER = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|-?(\d+)(\.\d+)?([eE][-+]?\d+)?', re.DOTALL)
# A surrogate, escaped or raw (bytes read with surrogatepass): the text may hold one alone.
_SURROGATE_IN_TEXT = re.compile(r"\\u[dD][89a-fA-F]|[\ud800-\udfff]")
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
_FLATTEN = "write it with fewer levels of objects and arrays"
_SHORTEN = "write it as a string, or with fewer digits"


class JsonLimitError(json.JSONDecodeError):
    """Well-formed JSON past what Python reads safely: nested deeper than the limit, or an integer too long."""

    def __init__(self, msg: str, doc: str, pos: int, fix: str) -> None:
        super().__init__(msg, doc, pos)
        self.fix = fix

    def __reduce__(self) -> tuple[object, ...]:
        return type(self), (self.msg, self.doc, self.pos, self.fix)


def nesting_problem(text: str, max_depth: int = MAX_JSON_DEPTH) -> JsonLimitError | None:
    """Where ``text`` nests deeper than ``max_depth`` (found without parsing it), else None."""
    # Counting brackets is enough for almost every document: fewer openers than the limit cannot nest past it.
    if text.count("[") + text.count("{") <= max_depth:
        return None
    depth = 0
    for match in _STRING_OR_BRACKET.finditer(text):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            if depth > max_depth:
                return JsonLimitError(f"JSON nested deeper than {max_depth} levels", text, match.start(), _FLATTEN)
        elif token in ("]", "}"):
            depth -= 1
    return None


def long_number_error(text: str) -> JsonLimitError:
    """The error for the first integer in ``text`` too long for ``int()`` (looked for once parsing has failed)."""
    limit = sys.get_int_max_str_digits()
    for match in _STRING_OR_NUMBER.finditer(text):
        digits, fraction, exponent = match.groups()
        if digits is not None and fraction is None and exponent is None and 0 < limit < len(digits):
            msg = f"a number {len(digits)} digits long (integers are read up to {limit} digits)"
            return JsonLimitError(msg, text, match.start(), _SHORTEN)
    return JsonLimitError(f"a number longer than {limit} digits", text, 0, _SHORTEN)


def loads_json(text: str | bytes, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads(text)``, refusing nesting deeper than ``max_depth`` and integers Python will not convert.

    Every failure is a :class:`json.JSONDecodeError` (a ``ValueError``) with the position:
    a :class:`JsonLimitError` for the limits. Bytes are decoded as ``json.loads`` decodes
    them (UTF-8, -16 or -32); bytes in none of them raise ``UnicodeDecodeError``.
    """
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode(json.detect_encoding(text), "surrogatepass")
    problem = nesting_problem(text, max_depth)
    if problem is not None:
        raise problem
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError:  # int() past its digit limit: the only other ValueError the decoder lets out
        raise long_number_error(text) from None
    except RecursionError:  # within the depth limit but called from deep in the stack already
        raise JsonLimitError("JSON nested too deep to read here", text, 0, _FLATTEN) from None
    return well_formed(value) if _SURROGATE_IN_TEXT.search(text) else value


def well_formed(value: object) -> Any:
    """``value`` (as parsed from JSON) with every string valid Unicode.

    JSON may escape a surrogate alone (``"\\ud800"``) and Python's parser keeps it as a code point
    no UTF-8 writer takes: the transcript, stdout and the next request would fail on it. A pair
    split over two strings joined later is one character again; one alone becomes U+FFFD.
    """
    if isinstance(value, str):
        if _SURROGATE.search(value) is None:
            return value
        return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    if isinstance(value, dict):
        return {well_formed(k): well_formed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [well_formed(v) for v in value]
    return value
