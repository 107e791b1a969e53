"""slot_function builds a record as its attrs ``__init__`` does, or refuses a class whose ``__init__`` does more."""

from __future__ import annotations

import attrs
import pytest

from queryloop.fsm.run.slots import slot_function


@attrs.frozen
class Plain:
    a: int = attrs.field(validator=attrs.validators.ge(0))
    b: str = "x"


def build_plain(a: int, b: str) -> Plain:
    build = slot_function(Plain, "build(a, b)", lambda name: name)
    assert build is not None
    made: Plain = build(a, b)
    return made


def test_it_makes_the_record_the_constructor_makes_and_runs_its_validators() -> None:
    assert build_plain(3, "y") == Plain(3, "y")
    with pytest.raises(ValueError, match="'a' must be >= 0"):
        build_plain(-1, "y")
    with attrs.validators.disabled():
        assert build_plain(-1, "y").a == -1, "validators switched off are off here too"


@attrs.frozen
class Converted:
    a: int = attrs.field(converter=int)


@attrs.frozen
class PostInit:
    a: int

    def __attrs_post_init__(self) -> None:
        pass


@attrs.define(slots=False)
class NotSlotted:
    a: int


@attrs.frozen
class Hidden:
    a: int
    b: int = attrs.field(init=False, default=0)


@attrs.frozen(cache_hash=True)
class CachedHash:
    a: int


@pytest.mark.parametrize("cls", [Converted, PostInit, NotSlotted, Hidden, CachedHash])
def test_a_class_whose_init_does_more_is_refused(cls: type) -> None:
    assert slot_function(cls, "build(a)", lambda name: name) is None
