"""The images and documents one request may carry: at most a count and a total of base64, the oldest dropped first.

A text stands in for each block dropped; the stored transcript never changes. The caps: docs/security.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Final, Literal, TypeAlias, TypeGuard

from ...messages import Block, Message, MessageView, ToolResultBlock, is_tool_result, with_content

if TYPE_CHECKING:
    from anthropic.types import TextBlockParam

__all__ = [
    "IMAGE_MAX_BASE64_CHARS",
    "MEDIA_MAX_BASE64_CHARS",
    "MEDIA_MAX_COUNT",
    "MEDIA_SLACK_BASE64_CHARS",
    "MEDIA_SLACK_COUNT",
    "media_totals",
    "sniffed_image_type",
    "within_media_cap",
]

IMAGE_MAX_BASE64_CHARS: Final = 5 * 1024 * 1024
"""The largest image (its base64 data, in characters) passed to the model: the Messages API's
per-image limit is 5 MB; a larger one would fail the whole request (MCP images and Read check it)."""

MEDIA_MAX_BASE64_CHARS: Final = 24 * 1024 * 1024
"""The most base64 of images and documents one request carries: Claude Code 2.1.235's first-party cap, the
API's 32 MiB request limit less 8 MiB for everything else."""

MEDIA_MAX_COUNT: Final = 100
"""The most image and document blocks one request carries (the API's limit on images, Claude Code's cap)."""

MEDIA_SLACK_BASE64_CHARS: Final = 10 * 1024 * 1024
"""How far under :data:`MEDIA_MAX_BASE64_CHARS` dropping goes, once it must (Claude Code's)."""

MEDIA_SLACK_COUNT: Final = 20
"""How far under :data:`MEDIA_MAX_COUNT` dropping goes, once it must (Claude Code's)."""

_MEDIA = frozenset({"image", "document"})


ImageType: TypeAlias = Literal["image/jpeg", "image/png", "image/gif", "image/webp"]


def sniffed_image_type(raw: bytes) -> ImageType | None:
    """The API image type ``raw`` is, by its first bytes; None when it is none of them (PNG, JPEG, GIF, WebP)."""
    if raw.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if raw.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if raw.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if raw[:4] == b"RIFF" and raw[8:12] == b"WEBP":
        return "image/webp"
    return None


# the key, in a history's memos (MessageView.memos), of the running (count, base64 characters) after each
# message counted so far
_TOTALS = f"{__name__}.totals"


def _is_media(block: object) -> TypeGuard[dict[str, object]]:
    return isinstance(block, dict) and block.get("type") in _MEDIA


def _chars(block: Mapping[str, object]) -> int:
    source = block.get("source")
    data = source.get("data") if isinstance(source, dict) and source.get("type") == "base64" else None
    return len(data) if isinstance(data, str) else 0


def _media_of(message: Message) -> tuple[int, int]:
    """The media blocks of one message (at its top and in its tool results) and their base64 characters."""
    count = chars = 0
    content = message.get("content")
    if not isinstance(content, list):
        return 0, 0
    for block in content:
        if _is_media(block):
            count, chars = count + 1, chars + _chars(block)
        elif is_tool_result(block) and isinstance(block.get("content"), list):
            for inner in block["content"]:
                if _is_media(inner):
                    count, chars = count + 1, chars + _chars(inner)
    return count, chars


def media_totals(messages: MessageView) -> tuple[int, int]:
    """How many media blocks ``messages`` carry and their base64 characters (counted once per message appended)."""
    if not len(messages):
        return 0, 0
    totals: list[tuple[int, int]] = messages.memos.setdefault(_TOTALS, [])
    count, chars = totals[-1] if totals else (0, 0)
    for index in range(len(totals), len(messages)):
        more, size = _media_of(messages.at(index))
        count, chars = count + more, chars + size
        totals.append((count, chars))
    return totals[len(messages) - 1]


def _notice(block: Mapping[str, object]) -> TextBlockParam:
    size = _chars(block) * 3 // 4
    source = block.get("source")
    kind = source.get("media_type") if isinstance(source, dict) else None
    what = f"{block.get('type')} ({kind}, {size / (1024 * 1024):.1f} MB)" if kind else str(block.get("type"))
    return {
        "type": "text",
        "text": f"[{what} left out of this request: the conversation's images and documents are over what one "
        "request may carry; the oldest are left out first]",
    }


class _Dropping:
    """What is still to be dropped, oldest first, as Claude Code counts it."""

    def __init__(self, count: int, chars: int) -> None:
        self.count = count - MEDIA_MAX_COUNT
        self.chars = chars - MEDIA_MAX_BASE64_CHARS
        if self.count > 0:
            self.count += MEDIA_SLACK_COUNT
        if self.chars > 0:
            self.chars += MEDIA_SLACK_BASE64_CHARS

    @property
    def done(self) -> bool:
        return self.count <= 0 and self.chars <= 0

    def drops(self, block: Mapping[str, object]) -> bool:
        size = _chars(block)
        if self.count > 0 or (self.chars > 0 and size > 0):
            self.count -= 1
            self.chars -= size
            return True
        return False

    def blocks(self, content: list[Block]) -> list[Block]:
        """``content`` with the media it drops replaced by a notice each (tool results' media first, as Claude Code)."""
        inner = [self._in_result(b) if is_tool_result(b) else b for b in content]
        return [_notice(b) if not self.done and _is_media(b) and self.drops(b) else b for b in inner]

    def _in_result(self, block: ToolResultBlock) -> ToolResultBlock:
        content = block.get("content")
        if self.done or not isinstance(content, list) or not any(_is_media(b) for b in content):
            return block
        kept = [_notice(b) if not self.done and _is_media(b) and self.drops(b) else b for b in content]
        return {**block, "content": kept}


def within_media_cap(messages: MessageView) -> MessageView:
    """``messages`` as a request carries them: itself when within the caps, else a copy whose oldest media are
    notices (see the module's docstring)."""
    count, chars = media_totals(messages)
    if count <= MEDIA_MAX_COUNT and chars <= MEDIA_MAX_BASE64_CHARS:
        return messages
    dropping = _Dropping(count, chars)
    kept: list[Message] = []
    for message in messages:
        content = message.get("content")
        if not dropping.done and isinstance(content, list) and _media_of(message)[0]:
            message = with_content(message, dropping.blocks(content))
        kept.append(message)
    return MessageView.of(kept, (messages.is_meta(i) for i in range(len(messages))))
