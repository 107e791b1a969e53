"""Re-exports imported on first use (PEP 562), so importing a package costs only what its caller touches.

Why: ``queryloop --help`` and ``queryloop check`` must not pay for the SDKs a run needs.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, homes: Mapping[str, Iterable[str]]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, given each home module (relative or absolute) and its names.

    Use it in the ``else`` branch of the package's ``if TYPE_CHECKING:`` imports, so mypy
    sees the real names and never a catch-all ``__getattr__``.
    """
    home_of = {name: module for module, names in homes.items() for name in names}
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> object:
        module = home_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value  # the next lookup does not come here
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *home_of})

    return __getattr__, __dir__
