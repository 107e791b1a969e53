"""How ``Read`` shows an image file: one ``image`` block for the model, its record for PostToolUse hooks.

Owns :data:`IMAGE_EXTENSIONS`, :func:`read_image` (the type from the bytes, the size from the header) and
:func:`read_pdf` (a ``document`` block). Limits: docs/security.md.
"""

from __future__ import annotations

import base64
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Final

from ...messages import ResultBlock
from ...request import IMAGE_MAX_BASE64_CHARS, MEDIA_MAX_BASE64_CHARS, sniffed_image_type
from .base import ToolError, ToolOutput

if TYPE_CHECKING:
    from anthropic.types import ImageBlockParam

__all__ = ["IMAGE_EXTENSIONS", "IMAGE_MAX_SIDE", "PDF_MAX_BYTES", "read_image", "read_pdf"]

IMAGE_EXTENSIONS: Final = frozenset({".png", ".jpg", ".jpeg", ".gif", ".webp"})
"""The file names Read shows as images (an ``.svg`` is text, as in Claude Code)."""

IMAGE_MAX_SIDE: Final = 8000
"""The widest or tallest image the Messages API takes, in pixels; a larger one fails the whole request."""

PDF_MAX_BYTES: Final = MEDIA_MAX_BASE64_CHARS // 4 * 3
"""The largest PDF Read sends: its base64 fills what one request may carry of images and documents."""

# The largest file whose base64 stays within IMAGE_MAX_BASE64_CHARS.
_MAX_BYTES: Final = IMAGE_MAX_BASE64_CHARS // 4 * 3

_KNOWN: Final = (
    (b"%PDF", "a PDF document"),
    (b"PK\x03\x04", "a ZIP archive"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"\x7fELF", "an ELF program"),
    (b"BM", "a BMP image (the model takes PNG, JPEG, GIF and WebP)"),
    (b"II*\x00", "a TIFF image (the model takes PNG, JPEG, GIF and WebP)"),
    (b"MM\x00*", "a TIFF image (the model takes PNG, JPEG, GIF and WebP)"),
)


def _what_it_is(head: bytes) -> str:
    """What ``head`` (a file's first bytes) looks like, for the error naming a false image."""
    for magic, name in _KNOWN:
        if head.startswith(magic):
            return name
    stripped = head.lstrip().lower()
    if stripped.startswith((b"<!doctype html", b"<html")):
        return "an HTML page"
    if stripped.startswith(b"<svg") or (stripped.startswith(b"<?xml") and b"<svg" in head):
        return "an SVG drawing (Read shows a .svg file as text)"
    if not head:
        return "an empty file"
    return "bytes " + " ".join(f"{b:02x}" for b in head[:8])


def _png_size(raw: bytes) -> tuple[int, int] | None:
    return struct.unpack(">II", raw[16:24]) if raw[12:16] == b"IHDR" and len(raw) >= 24 else None


def _gif_size(raw: bytes) -> tuple[int, int] | None:
    return struct.unpack("<HH", raw[6:10]) if len(raw) >= 10 else None


def _webp_size(raw: bytes) -> tuple[int, int] | None:
    chunk = raw[12:16]
    if chunk == b"VP8 " and len(raw) >= 30:
        width, height = struct.unpack("<HH", raw[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L" and len(raw) >= 25:
        bits = int.from_bytes(raw[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X" and len(raw) >= 30:
        return int.from_bytes(raw[24:27], "little") + 1, int.from_bytes(raw[27:30], "little") + 1
    return None


_SOF_MARKERS: Final = frozenset({*range(0xC0, 0xC4), *range(0xC5, 0xC8), *range(0xC9, 0xCC), *range(0xCD, 0xD0)})


def _jpeg_size(raw: bytes) -> tuple[int, int] | None:
    """The first frame header's size: segments are walked by their lengths, at most the whole file once."""
    at = 2
    while at + 9 <= len(raw):
        if raw[at] != 0xFF:
            return None
        marker = raw[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in _SOF_MARKERS:
            height, width = struct.unpack(">HH", raw[at + 5 : at + 9])
            return width, height
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # no length
            at += 2
            continue
        at += 2 + int.from_bytes(raw[at + 2 : at + 4], "big")
    return None


_SIZES: Final[dict[str, Callable[[bytes], tuple[int, int] | None]]] = {
    "image/png": _png_size,
    "image/gif": _gif_size,
    "image/webp": _webp_size,
    "image/jpeg": _jpeg_size,
}


def _response(data: str, media_type: str, size: int, dimensions: tuple[int, int] | None) -> dict[str, object]:
    """Claude Code 2.1.235's record of an image Read, as a PostToolUse hook gets it (shown as it is sent)."""
    file: dict[str, object] = {"base64": data, "type": media_type, "originalSize": size}
    if dimensions is not None:
        width, height = dimensions
        file["dimensions"] = {
            "originalWidth": width,
            "originalHeight": height,
            "displayWidth": width,
            "displayHeight": height,
        }
    return {"type": "image", "file": file}


def read_image(path: Path, shown: str, raw: IO[bytes], *, respond: bool) -> ToolOutput:
    """The image in ``raw`` (opened ``path``, shown as ``shown``) as one ``image`` block, or a ToolError saying
    why not: its bytes are no image the model takes, or it is over the API's limits."""
    size = os.fstat(raw.fileno()).st_size
    head = raw.read(64)
    media_type = sniffed_image_type(head)
    if media_type is None:
        raise ToolError(
            f"{shown} has an image's name but is not a PNG, JPEG, GIF or WebP image: it looks like "
            f"{_what_it_is(head)}; read it as text with Bash (`head -c 500`) to see what it holds"
        )
    if size > _MAX_BYTES:
        raise ToolError(
            f"{shown} is a {media_type} of {size / (1024 * 1024):.1f} MB, over the {_MAX_BYTES / (1024 * 1024):.2f} MB "
            "one image may be (the API's 5 MB limit on its base64); make a smaller copy (e.g. with ImageMagick's "
            "`convert -resize`) and Read that"
        )
    data = head + raw.read(_MAX_BYTES + 1 - len(head))
    if len(data) > _MAX_BYTES:  # it grew since it was measured
        raise ToolError(f"{shown} grew while it was read; Read it again")
    dimensions = _SIZES[media_type](data)
    if dimensions is not None and max(dimensions) > IMAGE_MAX_SIDE:
        width, height = dimensions
        raise ToolError(
            f"{shown} is {width}x{height} pixels, over the {IMAGE_MAX_SIDE} pixels a side the API takes; make a "
            "smaller copy and Read that"
        )
    encoded = base64.b64encode(data).decode("ascii")
    block: ImageBlockParam = {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": encoded}}
    response = _response(encoded, media_type, len(data), dimensions) if respond else None
    return ToolOutput(content=[block], response=response)


def read_pdf(path: Path, shown: str, raw: IO[bytes], *, respond: bool) -> ToolOutput:
    """The PDF in ``raw`` as a note and a ``document`` block, or a ToolError: it is no PDF, or too large."""
    size = os.fstat(raw.fileno()).st_size
    head = raw.read(5)
    if head != b"%PDF-":
        raise ToolError(
            f"{shown} has a PDF's name but does not start as a PDF does (%PDF-): it looks like {_what_it_is(head)}"
        )
    if size > PDF_MAX_BYTES:
        raise ToolError(
            f"{shown} is a PDF of {size / (1024 * 1024):.1f} MB, over the {PDF_MAX_BYTES / (1024 * 1024):.0f} MB one "
            "request may carry; split it (e.g. with `qpdf --split-pages`) or extract its text with Bash (`pdftotext`)"
        )
    data = head + raw.read(PDF_MAX_BYTES + 1 - len(head))
    if len(data) > PDF_MAX_BYTES:
        raise ToolError(f"{shown} grew while it was read; Read it again")
    encoded = base64.b64encode(data).decode("ascii")
    blocks: list[ResultBlock] = [
        {"type": "text", "text": f"{shown}: a PDF of {len(data)} bytes, in the document that follows"},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": encoded}},
    ]
    response = None
    if respond:  # Claude Code 2.1.235's record, as its PostToolUse hooks get it
        response = {"type": "pdf", "file": {"filePath": str(path), "base64": encoded, "originalSize": len(data)}}
    return ToolOutput(content=blocks, response=response)
