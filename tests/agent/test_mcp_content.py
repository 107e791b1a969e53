"""What MCP content becomes for the model (an image checked, a result's images capped), what a request carries
of a conversation's images, what a prompt command's words fill, and how an image is estimated."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import mcp.types as types
import pytest

from queryloop.handlers.hooks.services.config import parse_hook_config
from queryloop.handlers.hooks.services.runner import run_hooks
from queryloop.handlers.mcp.services.content import (
    IMAGE_MAX_BASE64_CHARS,
    MalformedContent,
    content_blocks,
    resource_text,
    tool_result_content,
)
from queryloop.handlers.mcp.services.prompts import prompt_arguments
from queryloop.handlers.messages import IMAGE_TOKENS, MessageView, message_tokens
from queryloop.handlers.request.services.media import (
    MEDIA_MAX_BASE64_CHARS,
    MEDIA_MAX_COUNT,
    MEDIA_SLACK_BASE64_CHARS,
    media_totals,
    within_media_cap,
)

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(40)).decode()


def _result(*content: Any, structured: Any = None) -> types.CallToolResult:
    return types.CallToolResult(content=list(content), structured_content=structured)


def test_an_image_is_an_image_block_among_the_text_in_its_place() -> None:
    result = _result(types.TextContent(text="before"), types.ImageContent(data=PNG, mime_type="image/png"))
    blocks = tool_result_content(result, "mcp__s__t", "s")
    assert blocks == [
        {"type": "text", "text": "before"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
    ]


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


JPEG = b"\xff\xd8\xff\xe0" + bytes(60)


def test_an_image_over_the_cap_or_of_a_type_the_api_refuses_is_a_notice_naming_it() -> None:
    big = _b64(JPEG + bytes(IMAGE_MAX_BASE64_CHARS * 3 // 4))
    tiff = _b64(b"II*\x00" + bytes(40))
    over, refused = content_blocks(
        [types.ImageContent(data=big, mime_type="image/jpeg"), types.ImageContent(data=tiff, mime_type="image/tiff")],
        "s",
    )
    assert over["type"] == "text" and "image/jpeg, 3.8 MB, 5.0 MB as base64" in over["text"]
    assert "over the API's 5.0 MB limit" in over["text"]
    assert refused["type"] == "text" and "image/tiff" in refused["text"]
    assert "PNG, JPEG, GIF and WebP" in refused["text"]


def test_an_image_goes_as_the_type_its_bytes_are_and_bytes_of_no_image_type_are_a_notice() -> None:
    said_tiff, said_png, words = content_blocks(
        [
            types.ImageContent(data=PNG, mime_type="image/tiff"),
            types.ImageContent(data=_b64(JPEG), mime_type="image/png"),
            types.ImageContent(data=_b64(b"just some words"), mime_type="image/png"),
        ],
        "s",
    )
    assert said_tiff["source"] == {"type": "base64", "media_type": "image/png", "data": PNG}
    assert said_png["source"]["media_type"] == "image/jpeg"
    assert words == {
        "type": "text",
        "text": "[image: image/png, 15 bytes; not shown: its bytes are not a PNG, JPEG, GIF or WebP image]",
    }


@pytest.mark.parametrize("data", ["not*base64!!", PNG[:-2], PNG + "\n", " " + PNG])
def test_an_image_whose_data_is_not_strict_base64_makes_the_whole_result_malformed(data: str) -> None:
    result = _result(types.TextContent(text="fine"), types.ImageContent(data=data, mime_type="image/png"))
    with pytest.raises(MalformedContent, match=r"^image 1 \(image/png\) is not valid base64$"):
        tool_result_content(result, "mcp__s__t", "s")
    resource = types.BlobResourceContents(uri="demo://i", mime_type="image/png", blob=data)
    with pytest.raises(MalformedContent):
        resource_text(types.ReadResourceResult(contents=[resource]), "s")


def test_one_results_images_stop_at_what_a_request_may_carry_and_the_rest_are_notices() -> None:
    photo = _b64(b"\x89PNG\r\n\x1a\n" + bytes(3_675_000))  # 4.9 MB of base64, under the per-image limit
    blocks = content_blocks([types.ImageContent(data=photo, mime_type="image/png")] * 8, "s")
    kept = [b for b in blocks if b["type"] == "image"]
    assert len(kept) == 5 and sum(len(b["source"]["data"]) for b in kept) <= MEDIA_MAX_BASE64_CHARS
    assert [b["type"] for b in blocks] == ["image"] * 5 + ["text"] * 3
    assert "with the images before it, over the 24.0 MB of images one request may carry" in blocks[5]["text"]


def _with_images(*sizes: int) -> MessageView:
    """A conversation of one tool call per image, each result holding an image of ``size`` base64 characters."""
    view = MessageView.of([{"role": "user", "content": "go"}])
    for n, size in enumerate(sizes):
        image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "A" * size}}
        call = {"type": "tool_use", "id": f"t{n}", "name": "mcp__s__shot", "input": {}}
        view = view.append({"role": "assistant", "content": [call]})
        result = {"type": "tool_result", "tool_use_id": f"t{n}", "content": [image]}
        view = view.append({"role": "user", "content": [result]})
    return view


def test_a_request_within_the_media_caps_carries_the_transcript_as_it_is() -> None:
    view = _with_images(*[4_900_000] * 5)
    assert media_totals(view) == (5, 24_500_000)
    assert within_media_cap(view) is view


def test_over_the_media_cap_the_oldest_images_are_left_out_until_10_mib_under_and_the_transcript_keeps_them() -> None:
    view = _with_images(*[4_900_000] * 8)  # 37 MiB
    sent = within_media_cap(view)
    count, chars = media_totals(sent)
    assert count == 2 and chars <= MEDIA_MAX_BASE64_CHARS - MEDIA_SLACK_BASE64_CHARS
    results = [m["content"][0]["content"][0] for m in sent if m["role"] == "user" and isinstance(m["content"], list)]
    assert [b["type"] for b in results] == ["text"] * 6 + ["image"] * 2
    assert results[0]["text"].startswith("[image (image/png, 3.5 MB) left out of this request")
    assert media_totals(view) == (8, 39_200_000) and len(sent) == len(view)


def test_over_the_count_cap_twenty_more_than_the_excess_are_left_out() -> None:
    assert media_totals(within_media_cap(_with_images(*[8] * (MEDIA_MAX_COUNT + 1)))) == (MEDIA_MAX_COUNT - 20, 640)


def test_resources_and_links_are_text_naming_their_uri_and_a_text_blob_is_decoded() -> None:
    text = types.TextResourceContents(uri="demo://a", mime_type="text/plain", text="hello")
    blob = types.BlobResourceContents(uri="demo://b", mime_type="text/plain", blob=base64.b64encode(b"bytes").decode())
    binary = types.BlobResourceContents(uri="demo://c", mime_type="application/zip", blob="AAAA")
    link = types.ResourceLink(uri="demo://d", name="doc", description="a document")
    result = _result(
        types.EmbeddedResource(resource=text),
        types.EmbeddedResource(resource=blob),
        types.EmbeddedResource(resource=binary),
        link,
    )
    assert tool_result_content(result, "mcp__s__t", "s").splitlines() == [
        "[Resource from s at demo://a] hello",
        "[Resource from s at demo://b] bytes",
        "[Resource from s at demo://c] binary content (application/zip, 3 bytes); not shown",
        "[Resource link: doc] demo://d (a document)",
    ]


def test_structured_content_is_used_only_without_a_content_block() -> None:
    assert tool_result_content(_result(structured={"a": 1}), "t", "s") == '{"a": 1}'
    assert tool_result_content(_result(types.TextContent(text="x"), structured={"a": 1}), "t", "s") == "x"
    assert tool_result_content(_result(), "t", "s") == "(t completed with no output)"


def test_an_image_counts_as_a_fixed_estimate_not_as_its_base64() -> None:
    data = "A" * 400_000
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}
    message = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [image]}]}
    estimate = message_tokens(message)
    assert IMAGE_TOKENS <= estimate < IMAGE_TOKENS + 100
    assert MessageView.of([message]).tokens == estimate


def test_a_prompt_commands_words_fill_the_arguments_in_order_the_last_taking_the_rest() -> None:
    assert prompt_arguments(["city", "state"], "Boston MA") == {"city": "Boston", "state": "MA"}
    assert prompt_arguments(["city"], '"New York" NY') == {"city": "New York NY"}
    assert prompt_arguments(["city", "state"], "Boston") == {"city": "Boston"}
    assert prompt_arguments([], "ignored") == {}


def test_an_elicitation_hook_for_the_server_answers_and_one_for_another_server_does_not(tmp_path: Path) -> None:
    answer = {"hookSpecificOutput": {"hookEventName": "Elicitation", "action": "accept", "content": {"n": 1}}}

    def group(matcher: str) -> dict[str, Any]:
        return {"matcher": matcher, "hooks": [{"type": "command", "command": f"echo '{json.dumps(answer)}'"}]}

    config = parse_hook_config({"Elicitation": [group("everything")]})

    def ask(server: str) -> Any:
        payload = {"mcp_server_name": server, "message": "name?", "mode": "form", "requested_schema": {}}
        return asyncio.run(
            run_hooks(
                "Elicitation",
                payload,
                config,
                cwd=tmp_path,
                session_id="s",
                transcript_path="",
                permission_mode="default",
            )
        )

    assert ask("everything").elicitation == ("accept", {"n": 1})
    assert ask("other").elicitation is None
