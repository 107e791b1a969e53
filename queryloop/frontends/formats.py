"""The output formats: each ``--output-format`` name and the renderer class that prints it — the one list.

Owns :data:`OUTPUT_FORMATS`. It imports nothing, so the program's parser takes its
``--output-format`` choices (and the CLI reference its list) from here without loading the
renderers; ``queryloop.frontends.console`` holds the classes and builds its ``RENDERERS``
from this list. Adding a format: a ``Renderer`` subclass in ``console`` and its row here.
"""

from __future__ import annotations

__all__ = ["OUTPUT_FORMATS"]

OUTPUT_FORMATS: dict[str, str] = {
    "text": "TextRenderer",
    "json": "JsonRenderer",
    "stream-json": "StreamJsonRenderer",
}
"""Each output format, in the order ``--help`` lists them, and its class's name in ``queryloop.frontends.console``."""
