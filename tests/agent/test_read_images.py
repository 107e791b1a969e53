"""Read of an image file: one image block of the type its bytes are, or a one-line error saying why not.

Real files in a temporary folder, through the real dispatcher. The behaviours are Claude Code
2.1.235's (tests/conformance/test_media.py runs both programs on them); where queryloop
refuses what Claude Code would shrink, the error names the size and how to make it smaller.
"""

from __future__ import annotations

import asyncio
import base64
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest

from queryloop.handlers.messages import ToolCall
from queryloop.handlers.tools import ToolContext
from queryloop.handlers.tools.services.dispatch import run_tool_calls
from queryloop.handlers.tools.services.registry import default_registry

GIF = base64.b64decode("R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7")
WEBP = base64.b64decode("UklGRiIAAABXRUJQVlA4IBYAAAAwAQCdASoBAAEADsD+JaQAA3AAAAAA")


def png(width: int, height: int, rows: bytes | None = None) -> bytes:
    """A real PNG of ``width`` x ``height`` grey pixels (or the given raw rows)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = rows if rows is not None else (b"\x00" + b"\x80" * width * 3) * height
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def jpeg(width: int, height: int) -> bytes:
    """The start of a baseline JPEG: SOI, an APP0 segment and the frame header naming its size."""
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app0 + sof + b"\xff\xd9"


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(cwd=tmp_path, responses={})


def read(ctx: ToolContext, name: str) -> dict[str, Any]:
    call = ToolCall(id="toolu_1", name="Read", input={"file_path": name})
    (block,) = asyncio.run(run_tool_calls([call], default_registry(), ctx))
    return dict(block)


def image_of(block: dict[str, Any]) -> dict[str, Any]:
    assert block["is_error"] is False, block["content"]
    (image,) = block["content"]
    assert image["type"] == "image" and image["source"]["type"] == "base64"
    return dict(image["source"])


@pytest.mark.parametrize(
    ("name", "data", "media_type"),
    [("a.png", png(4, 4), "image/png"), ("c.gif", GIF, "image/gif"), ("d.webp", WEBP, "image/webp")],
    ids=["png", "gif", "webp"],
)
def test_read_of_an_image_is_one_image_block_with_its_base64(
    ctx: ToolContext, name: str, data: bytes, media_type: str
) -> None:
    (ctx.cwd / name).write_bytes(data)
    source = image_of(read(ctx, name))
    assert source["media_type"] == media_type
    assert base64.b64decode(source["data"]) == data


def test_read_of_a_jpeg_by_either_extension_is_an_image(ctx: ToolContext) -> None:
    for name in ("b.jpg", "B.JPEG"):
        (ctx.cwd / name).write_bytes(jpeg(3, 2))
        assert image_of(read(ctx, name))["media_type"] == "image/jpeg"


def test_an_image_goes_as_the_type_its_bytes_are_not_its_name(ctx: ToolContext) -> None:
    (ctx.cwd / "really-a-png.jpg").write_bytes(png(2, 2))
    assert image_of(read(ctx, "really-a-png.jpg"))["media_type"] == "image/png"


def test_a_file_with_an_image_name_that_is_no_image_is_an_error_naming_what_it_is(ctx: ToolContext) -> None:
    (ctx.cwd / "saved.png").write_text("<!DOCTYPE html><html>login</html>")
    (ctx.cwd / "doc.jpg").write_bytes(b"%PDF-1.4\n")
    html, pdf = read(ctx, "saved.png"), read(ctx, "doc.jpg")
    assert html["is_error"] and pdf["is_error"]
    assert "saved.png has an image's name but is not a PNG, JPEG, GIF or WebP image" in html["content"]
    assert "an HTML page" in html["content"] and "a PDF document" in pdf["content"]


def test_an_svg_is_read_as_text(ctx: ToolContext) -> None:
    (ctx.cwd / "e.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg"/>\n')
    block = read(ctx, "e.svg")
    assert block["content"] == '1\t<svg xmlns="http://www.w3.org/2000/svg"/>\n2\t'


def test_an_image_over_the_apis_five_mb_is_refused_with_its_size(ctx: ToolContext) -> None:
    big = png(1, 1) + b"\x00" * (4 * 1024 * 1024)  # a PNG's header, 4 MB: 5.3 MB as base64
    (ctx.cwd / "big.png").write_bytes(big)
    block = read(ctx, "big.png")
    assert block["is_error"] is True
    assert "big.png is a image/png of 4.0 MB, over the 3.75 MB one image may be" in block["content"]


def test_an_image_wider_than_the_api_takes_is_refused_with_its_size(ctx: ToolContext) -> None:
    (ctx.cwd / "wide.png").write_bytes(png(9000, 1))
    block = read(ctx, "wide.png")
    assert block["is_error"] is True
    assert "wide.png is 9000x1 pixels, over the 8000 pixels a side" in block["content"]


def test_a_post_tool_use_hook_gets_the_image_as_claude_code_records_it(ctx: ToolContext) -> None:
    data = png(4, 3)
    (ctx.cwd / "a.png").write_bytes(data)
    read(ctx, "a.png")
    assert ctx.responses == {
        "toolu_1": {
            "type": "image",
            "file": {
                "base64": base64.b64encode(data).decode(),
                "type": "image/png",
                "originalSize": len(data),
                "dimensions": {"originalWidth": 4, "originalHeight": 3, "displayWidth": 4, "displayHeight": 3},
            },
        }
    }


@pytest.mark.parametrize(
    ("data", "size"), [(GIF, (1, 1)), (WEBP, (1, 1)), (jpeg(640, 480), (640, 480))], ids=["gif", "webp", "jpeg"]
)
def test_an_images_width_and_height_are_read_from_its_header(ctx: ToolContext, data: bytes, size: Any) -> None:
    (ctx.cwd / "x.gif").write_bytes(data)  # the name only makes it an image: the type is the bytes'
    read(ctx, "x.gif")
    assert ctx.responses is not None
    dimensions = ctx.responses["toolu_1"]["file"]["dimensions"]
    assert (dimensions["originalWidth"], dimensions["originalHeight"]) == size


PDF = b"%PDF-1.4\n1 0 obj<</Type/Catalog>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n"


def test_read_of_a_pdf_is_a_note_and_a_document_block(ctx: ToolContext) -> None:
    (ctx.cwd / "f.pdf").write_bytes(PDF)
    block = read(ctx, "f.pdf")
    assert block["is_error"] is False, block["content"]
    note, document = block["content"]
    assert note == {"type": "text", "text": f"f.pdf: a PDF of {len(PDF)} bytes, in the document that follows"}
    assert document["type"] == "document" and document["source"]["media_type"] == "application/pdf"
    assert base64.b64decode(document["source"]["data"]) == PDF
    assert ctx.responses is not None and ctx.responses["toolu_1"]["type"] == "pdf"


def test_a_file_named_pdf_that_is_no_pdf_is_an_error_naming_what_it_is(ctx: ToolContext) -> None:
    (ctx.cwd / "f.pdf").write_text("<html>not found</html>")
    block = read(ctx, "f.pdf")
    assert block["is_error"] is True
    assert "f.pdf has a PDF's name but does not start as a PDF does" in block["content"]
