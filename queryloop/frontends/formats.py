"""The output formats: each ``--output-format`` name and the renderer class that prints it — the one list.

Owns :data:`OUTPUT_FORMATS`. It imports nothing, so the parser reads its choices without the renderers. A new format
is a ``Renderer`` in ``console`` and a row here.
"""

from __future__ import annotations

__all__ = ["OUTPUT_FORMATS"]

OUTPUT_FORMATS: dict[str, str] = {
    "text": "TextRenderer",
    "json": "JsonRenderer",
    "stream-json": "StreamJsonRenderer",
}
"""Each output format, in the order ``--help`` lists them, and its class's name in ``queryloop.frontends.console``."""
