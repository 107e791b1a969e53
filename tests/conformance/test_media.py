"""Read of images, ``--add-dir`` and ``--include-partial-messages`` beside Claude Code 2.1.235, in both programs.

Each row runs one probe in both and reads one value of what each did (the tool result the
next request carried, the files made, the stream's event types…). ``same``: queryloop
observes what Claude Code does. Otherwise the reference value is pinned too, with the
reason (docs/differences.md lists them).
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest

from .reference import Observed, Probe, SeenRow, observe, seen_alike

pytestmark = pytest.mark.slow  # two programs per probe


def png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    rows = (b"\x00" + b"\x80" * width * 3) * height
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


PNG = png(4, 4)
GIF = base64.b64decode("R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7")
WEBP = base64.b64decode("UklGRiIAAABXRUJQVlA4IBYAAAAwAQCdASoBAAEADsD+JaQAA3AAAAAA")
JPEG = base64.b64decode(
    "/9j/4AAQSkZJRgABAQEASABIAAD/2wBDAP//////////////////////////////////////////////////////////////////////////////"
    "////////wgALCAABAAEBAREA/8QAFBABAAAAAAAAAAAAAAAAAAAAAP/aAAgBAQABPxA="
)
PDF = b"%PDF-1.4\n1 0 obj<</Type/Catalog>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n"
SVG = '<svg xmlns="http://www.w3.org/2000/svg"/>\n'


def _tool_result(observed: Observed) -> dict[str, Any]:
    """The first tool_result the second request carried."""
    return next(
        b
        for m in observed.requests[1].messages
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "tool_result"
    )


def _blocks(observed: Observed) -> list[str]:
    """The block types of the user message that carried the tool's result (and what came with it)."""
    result = _tool_result(observed)
    message = next(
        m for m in observed.requests[1].messages if isinstance(m["content"], list) and result in m["content"]
    )
    return [b["type"] for b in message["content"]]


def _document(observed: Observed) -> object:
    """The bytes of the PDF document the model got, inside the tool's result or beside it (None: none)."""
    result = _tool_result(observed)
    message = next(
        m for m in observed.requests[1].messages if isinstance(m["content"], list) and result in m["content"]
    )
    inside = result["content"] if isinstance(result["content"], list) else []
    for block in (*message["content"], *inside):
        if block.get("type") == "document":
            return base64.b64decode(block["source"]["data"])
    return None


def _shown(observed: Observed) -> object:
    """What the model was shown of the file: the image blocks' types and bytes, or the text, or that it failed."""
    result = _tool_result(observed)
    if result.get("is_error"):
        return "error"
    content = result["content"]
    if isinstance(content, str):
        return content
    return [(b["type"], b["source"]["media_type"], len(base64.b64decode(b["source"]["data"]))) for b in content]


def _read(name: str, data: bytes | str) -> Probe:
    return Probe(calls=(("Read", {"file_path": name}),), files={name: data})


def _stream_event_types(observed: Observed) -> object:
    return [line["event"]["type"] for line in observed.lines if line.get("type") == "stream_event"]


def _stream_event_keys(observed: Observed) -> object:
    return sorted({tuple(sorted(line)) for line in observed.lines if line.get("type") == "stream_event"})


def _lines_around_first_block_stop(observed: Observed) -> object:
    """The line types around the first block's end: where each program writes the ``assistant`` line."""
    kinds = [line["event"]["type"] if line["type"] == "stream_event" else line["type"] for line in observed.lines]
    at = kinds.index("content_block_stop")
    return kinds[at - 1 : at + 1]


Row = SeenRow


ADD_DIR_FILES = {"../other/o.txt": "o\n", "../third/t.txt": "t\n"}
PARTIAL = json.dumps(
    {
        "schema_version": 1,
        "scenario": "partial",
        "model": "mock-primary",
        "default": [
            {
                "reply": {
                    "content": [{"text": "hello there"}, {"tool_use": {"name": "Read", "input": {"file_path": "x"}}}]
                }
            },
            {"reply": {"content": [{"text": "done"}]}},
        ],
    }
)
ONE_TURN = ["content_block_start", "content_block_delta", "content_block_delta", "content_block_stop"]
TOOL_TURN = ["content_block_start", "content_block_delta", "content_block_delta", "content_block_delta"]


ROWS: dict[str, Row] = {
    "read a png": Row(probe=_read("a.png", PNG), seen=_shown, queryloop=[("image", "image/png", len(PNG))]),
    "read a gif": Row(probe=_read("c.gif", GIF), seen=_shown, queryloop=[("image", "image/gif", len(GIF))]),
    "read a webp": Row(probe=_read("d.webp", WEBP), seen=_shown, queryloop=[("image", "image/webp", len(WEBP))]),
    "read a jpeg": Row(probe=_read("b.jpg", JPEG), seen=_shown, queryloop=[("image", "image/jpeg", len(JPEG))]),
    "read a png named .jpg": Row(probe=_read("p.jpg", PNG), seen=_shown, queryloop=[("image", "image/png", len(PNG))]),
    "read an svg": Row(probe=_read("e.svg", SVG), seen=_shown, queryloop=f"1\t{SVG[:-1]}\n2\t"),
    "read text named .png": Row(probe=_read("g.png", "<html>login</html>\n"), seen=_shown, queryloop="error"),
    "read a pdf named .png": Row(probe=_read("h.png", PDF), seen=_shown, queryloop="error"),
    "read a png named .txt": Row(
        probe=_read("p.txt", PNG),
        seen=lambda o: _shown(o) == "error",
        queryloop=True,
        reference=False,  # Claude Code shows the bytes as numbered text
        design="a file with NUL bytes is binary whatever its name; its bytes as text are noise to the model "
        "([security](security.md#what-leaves-the-run-telemetry-mcp-content-the-inspector))",
    ),
    "read a wide png": Row(
        probe=_read("w.png", png(4000, 10)),
        seen=_blocks,
        queryloop=["tool_result"],
        reference=["tool_result", "text"],  # shrunk to 2000 wide, with a note of the scale
        design="queryloop has no image library: it sends an image up to the API's 8000 pixels a side as it is "
        "([security](security.md#what-leaves-the-run-telemetry-mcp-content-the-inspector))",
    ),
    "read a large png": Row(
        probe=_read("big.png", png(1, 1) + b"\x00" * (4 * 1024 * 1024)),
        seen=lambda o: _shown(o) == "error",
        queryloop=True,
        reference=False,  # Claude Code re-encodes it (as a JPEG) under the limit
        design="queryloop has no image library: an image over the API's 5 MB is refused with its size "
        "([security](security.md#what-leaves-the-run-telemetry-mcp-content-the-inspector))",
    ),
    "read a pdf": Row(probe=_read("f.pdf", PDF), seen=_document, queryloop=PDF),
    "read a pdf: where the document goes": Row(
        probe=_read("f.pdf", PDF),
        seen=_blocks,
        queryloop=["tool_result"],  # the document inside it
        reference=["tool_result", "document"],
        design="a tool's output stays in its tool_result: the tools add no blocks to the message beside it "
        "([security](security.md#what-leaves-the-run-telemetry-mcp-content-the-inspector))",
    ),
    "read a pdf: a PostToolUse hook's tool_response": Row(
        probe=Probe(
            calls=(("Read", {"file_path": "f.pdf"}),),
            files={
                "f.pdf": PDF,
                ".claude/settings.json": {
                    "hooks": {"PostToolUse": [{"hooks": [{"type": "command", "command": "cat > hook.json"}]}]}
                },
            },
            trusted=("project",),
        ),
        seen=lambda o: "hook.json" in str(o.made),
        queryloop=True,
    ),
    "read an image: the stream-json line's tool_use_result": Row(
        probe=_read("a.png", PNG),
        seen=lambda o: next(type(line["tool_use_result"]).__name__ for line in o.lines if "tool_use_result" in line),
        queryloop="dict",  # {type: image, file: {base64, type, originalSize, dimensions}} (test_stream.py: whole)
    ),
    "read an image: a PostToolUse hook's tool_response": Row(
        probe=Probe(
            calls=(("Read", {"file_path": "a.png"}),),
            files={
                "a.png": PNG,
                ".claude/settings.json": {
                    "hooks": {"PostToolUse": [{"hooks": [{"type": "command", "command": "cat > hook.json"}]}]}
                },
            },
            trusted=("project",),
        ),
        seen=lambda o: "hook.json" in str(o.made),
        queryloop=True,
    ),
    "add-dir: read": Row(
        probe=Probe(
            calls=(("Read", {"file_path": "../other/o.txt"}),), files=ADD_DIR_FILES, args=("--add-dir", "../other")
        ),
        seen=lambda o: o.denied,
        queryloop=(),
    ),
    "add-dir: read outside it": Row(
        probe=Probe(
            calls=(("Read", {"file_path": "../third/t.txt"}),), files=ADD_DIR_FILES, args=("--add-dir", "../other")
        ),
        seen=lambda o: o.denied,
        queryloop=("Read",),
    ),
    "add-dir: write asks": Row(
        probe=Probe(
            calls=(("Write", {"file_path": "../other/w.txt", "content": "x"}),),
            files=ADD_DIR_FILES,
            args=("--add-dir", "../other"),
        ),
        seen=lambda o: (o.denied, o.made),
        queryloop=(("Write",), frozenset()),
    ),
    "add-dir: write in acceptEdits": Row(
        probe=Probe(
            calls=(("Write", {"file_path": "../other/w.txt", "content": "x"}),),
            files=ADD_DIR_FILES,
            args=("--add-dir", "../other", "--permission-mode", "acceptEdits"),
        ),
        seen=lambda o: (o.denied, o.made),
        queryloop=((), frozenset({"other/w.txt"})),
    ),
    "add-dir: edit in acceptEdits": Row(
        probe=Probe(
            calls=(("Edit", {"file_path": "../other/o.txt", "old_string": "o", "new_string": "p"}),),
            files=ADD_DIR_FILES,
            args=("--add-dir", "../other", "--permission-mode", "acceptEdits"),
        ),
        seen=lambda o: o.denied,
        queryloop=(),
    ),
    "add-dir: repeated": Row(
        probe=Probe(
            calls=(("Read", {"file_path": "../other/o.txt"}), ("Read", {"file_path": "../third/t.txt"})),
            files=ADD_DIR_FILES,
            args=("--add-dir", "../other", "--add-dir", "../third"),
        ),
        seen=lambda o: o.denied,
        queryloop=(),
    ),
    "add-dir: several at once": Row(
        probe=Probe(
            calls=(("Read", {"file_path": "../third/t.txt"}),),
            files=ADD_DIR_FILES,
            args=("--add-dir", "../other", "../third"),
        ),
        seen=lambda o: o.denied,
        queryloop=(),
    ),
    "add-dir: missing directory": Row(
        probe=Probe(
            calls=(("Read", {"file_path": "../other/o.txt"}),), files=ADD_DIR_FILES, args=("--add-dir", "../nope")
        ),
        seen=lambda o: (o.returncode, o.denied),
        queryloop=(0, ("Read",)),
    ),
    "add-dir: in an untrusted folder": Row(
        probe=Probe(
            calls=(("Read", {"file_path": "../other/o.txt"}),),
            files={**ADD_DIR_FILES, ".claude/settings.json": {"permissions": {"additionalDirectories": ["../third"]}}},
            args=("--add-dir", "../other"),
        ),
        seen=lambda o: o.denied,
        queryloop=(),
    ),
    "partial messages: the event types": Row(
        probe=Probe(calls=(), scenario=PARTIAL, files={"x": "x"}, args=("--include-partial-messages",)),
        seen=_stream_event_types,
        queryloop=[
            "message_start",
            *ONE_TURN,
            *TOOL_TURN,
            "content_block_stop",
            "message_delta",
            "message_stop",
            "message_start",
            *ONE_TURN,
            "message_delta",
            "message_stop",
        ],
    ),
    "partial messages: a line's keys": Row(
        probe=Probe(calls=(), scenario=PARTIAL, files={"x": "x"}, args=("--include-partial-messages",)),
        seen=_stream_event_keys,
        queryloop=[
            ("event", "parent_tool_use_id", "session_id", "ttft_ms", "type", "uuid"),  # message_start's line
            ("event", "parent_tool_use_id", "session_id", "type", "uuid"),
        ],
    ),
    "partial messages: where the assistant line goes": Row(
        probe=Probe(calls=(), scenario=PARTIAL, files={"x": "x"}, args=("--include-partial-messages",)),
        seen=_lines_around_first_block_stop,
        queryloop=["content_block_delta", "content_block_stop"],
        reference=["assistant", "content_block_stop"],
        design="an assistant line is written once its message is whole, so a stream cut and retried shows no "
        "half answer ([the CLI](cli.md#output-formats))",
    ),
}


@pytest.mark.parametrize("name", list(ROWS))
def test_each_media_probe_is_the_same_in_both_programs_or_differs_by_design(name: str, tmp_path: Path) -> None:
    seen_alike(ROWS[name], tmp_path)


@pytest.mark.parametrize("kind", ["an image", "a pdf"])
def test_a_post_tool_use_hook_gets_the_same_record_of_an_image_or_pdf_in_both(kind: str, tmp_path: Path) -> None:
    row = ROWS[f"read {kind}: a PostToolUse hook's tool_response"]
    responses = []
    for who in ("queryloop", "claude"):
        observe(who, row.probe, tmp_path / who)
        text = (tmp_path / who / "project" / "hook.json").read_text().replace(str(tmp_path / who), "BASE")
        responses.append(json.loads(text)["tool_response"])
    assert responses[0] == responses[1]
