"""MCP layer, what a server's content becomes for the model: text and image blocks of the Messages API.

Images are checked by their bytes and capped; resources and links become text, audio a notice (docs/mcp.md).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final, Literal, TypeAlias, TypedDict

from ...request import IMAGE_MAX_BASE64_CHARS, MEDIA_MAX_BASE64_CHARS, sniffed_image_type

if TYPE_CHECKING:
    import mcp.types
    from anthropic.types import ImageBlockParam, TextBlockParam

__all__ = [
    "API_IMAGE_TYPES",
    "IMAGE_MAX_BASE64_CHARS",
    "Block",
    "MalformedContent",
    "PromptMessage",
    "blocks_text",
    "content_blocks",
    "prompt_messages",
    "resource_text",
    "tool_result_content",
]

Block: TypeAlias = "TextBlockParam | ImageBlockParam"
"""What a server's content becomes: text, or an image the model takes."""

API_IMAGE_TYPES: Final = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
"""The media types the Messages API takes in an ``image`` block."""

_TEXT_TYPES: Final = ("text/", "application/json", "application/xml", "application/yaml", "application/javascript")


class MalformedContent(ValueError):
    """A server's content breaks the protocol (an image whose data is not base64): none of it is passed on."""


class _Images:
    """The images of one server answer as the model gets them: each checked, their total kept within a request's."""

    def __init__(self) -> None:
        self.count = 0
        self.total = 0  # base64 characters of the images passed on

    def block(self, data: str, declared: str, what: str) -> Block:
        """An ``image`` block, or the notice saying why ``what`` (an image) is not passed on; MalformedContent
        when its data is not base64."""
        self.count += 1
        try:
            raw = binascii.a2b_base64(data, strict_mode=True)
        except (binascii.Error, ValueError):
            raise MalformedContent(f"image {self.count} ({declared}) is not valid base64") from None
        media_type = sniffed_image_type(raw)
        if media_type is None:
            shown = "the model takes PNG, JPEG, GIF and WebP"
            if declared in API_IMAGE_TYPES:
                shown = "its bytes are not a PNG, JPEG, GIF or WebP image"
            return _text(f"[{what}: {declared}, {_bytes(len(raw))}; not shown: {shown}]")
        if len(data) > IMAGE_MAX_BASE64_CHARS:
            sizes = f"{_size(len(data))}, {_bytes(len(data))} as base64"
            cap = _bytes(IMAGE_MAX_BASE64_CHARS)
            limit = f"not shown: over the API's {cap} limit for an image's base64"
            return _text(f"[{what}: {media_type}, {sizes}; {limit}]")
        if self.total + len(data) > MEDIA_MAX_BASE64_CHARS:
            cap = _bytes(MEDIA_MAX_BASE64_CHARS)
            return _text(
                f"[{what}: {media_type}, {_size(len(data))}; not shown: with the images before it, over the {cap} "
                "of images one request may carry]"
            )
        self.total += len(data)
        return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}


def _bytes(size: int) -> str:
    if size >= 1024 * 1024:
        return f"{size / (1024 * 1024):.1f} MB"
    if size >= 1024:
        return f"{size / 1024:.1f} KB"
    return f"{size} bytes"


def _size(chars: int) -> str:
    """The decoded size of ``chars`` base64 characters, for a person."""
    return _bytes(chars * 3 // 4)


def _text(text: str) -> Block:
    return {"type": "text", "text": text}


def _decoded_text(blob: str, mime: str | None) -> str | None:
    """A blob of a text type, decoded (None when it is not text)."""
    if mime is None or not mime.startswith(_TEXT_TYPES):
        return None
    try:
        return base64.b64decode(blob, validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return None


def _resource_blocks(
    contents: mcp.types.TextResourceContents | mcp.types.BlobResourceContents, server: str, images: _Images
) -> Block:
    import mcp.types

    uri = str(contents.uri)
    where = f"[Resource from {server} at {uri}]"
    if isinstance(contents, mcp.types.TextResourceContents):
        return _text(f"{where} {contents.text}")
    mime = contents.mime_type
    if mime is not None and mime.startswith("image/"):
        return images.block(contents.blob, mime, f"image resource {uri}")
    text = _decoded_text(contents.blob, mime)
    if text is not None:
        return _text(f"{where} {text}")
    return _text(f"{where} binary content ({mime or 'unknown type'}, {_size(len(contents.blob))}); not shown")


def content_blocks(content: Iterable[mcp.types.ContentBlock], server: str) -> list[Block]:
    """Each block of a server's content as the model gets it, in order (MalformedContent: an image's data is
    not base64)."""
    import mcp.types

    images = _Images()
    blocks: list[Block] = []
    for block in content:
        if isinstance(block, mcp.types.TextContent):
            blocks.append(_text(block.text))
        elif isinstance(block, mcp.types.ImageContent):
            blocks.append(images.block(block.data, block.mime_type, "image"))
        elif isinstance(block, mcp.types.EmbeddedResource):
            blocks.append(_resource_blocks(block.resource, server, images))
        elif isinstance(block, mcp.types.ResourceLink):
            named = f"[Resource link: {block.title or block.name}] {block.uri}"
            blocks.append(_text(f"{named} ({block.description})" if block.description else named))
        elif isinstance(block, mcp.types.AudioContent):
            blocks.append(
                _text(f"[audio: {block.mime_type}, {_size(len(block.data))}; not shown: the model takes no audio]")
            )
        else:
            blocks.append(_text(f"[{getattr(block, 'type', 'unknown')} content: not shown]"))
    return blocks


def blocks_text(blocks: Iterable[Block]) -> str:
    """The text of ``blocks``, one block a line; an image reads ``[image: TYPE]``."""
    lines = []
    for block in blocks:
        if block["type"] == "image":
            lines.append(f"[image: {block['source'].get('media_type')}]")
        else:
            lines.append(str(block.get("text", "")))
    return "\n".join(lines)


def tool_result_content(result: mcp.types.CallToolResult, tool: str, server: str) -> str | list[Block]:
    """A call's result for the ``tool_result``: its text, or its blocks when it carries an image.

    A result with only text is one string (its blocks a line each), as before images
    were passed on; structured content is used only when there is no content block (the
    protocol asks a server to put the same in a text block).
    """
    blocks = content_blocks(result.content, server)
    if not blocks and result.structured_content is not None:
        blocks.append(_text(json.dumps(result.structured_content, ensure_ascii=False)))
    if not blocks:
        return f"({tool} completed with no output)"
    if any(b["type"] == "image" for b in blocks):
        return blocks
    return blocks_text(blocks)


def resource_text(result: mcp.types.ReadResourceResult, server: str) -> str | list[Block]:
    """A read resource for ``ReadMcpResourceTool``: each of its contents, as embedded resources are shown."""
    images = _Images()
    blocks = [_resource_blocks(contents, server, images) for contents in result.contents]
    if not blocks:
        return "(the resource has no contents)"
    if any(b["type"] == "image" for b in blocks):
        return blocks
    return blocks_text(blocks)


class PromptMessage(TypedDict):
    """A message of a server's prompt, as the Messages API takes it."""

    role: Literal["user", "assistant"]
    content: list[Block]


def prompt_messages(result: mcp.types.GetPromptResult, server: str) -> list[PromptMessage]:
    """A prompt's messages as Messages API messages: each its role and its content as blocks."""
    messages: list[PromptMessage] = []
    for message in result.messages:
        blocks = content_blocks([message.content], server)  # each a message: a request carries them all
        messages.append({"role": message.role, "content": blocks})
    return messages
