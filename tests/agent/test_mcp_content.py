"""What MCP content becomes for the model, what a prompt command's words fill, and how an image is estimated."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import mcp.types as types

from queryloop.handlers.hooks.services.runner import parse_hook_config, run_hooks
from queryloop.handlers.mcp.services.content import IMAGE_MAX_BASE64_CHARS, content_blocks, tool_result_content
from queryloop.handlers.mcp.services.prompts import prompt_arguments
from queryloop.handlers.messages import IMAGE_TOKENS, MessageView, message_tokens

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


def test_an_image_over_the_cap_or_of_a_type_the_api_refuses_is_a_notice_naming_it() -> None:
    big = "A" * (IMAGE_MAX_BASE64_CHARS + 4)
    over, tiff = content_blocks(
        [types.ImageContent(data=big, mime_type="image/jpeg"), types.ImageContent(data=PNG, mime_type="image/tiff")],
        "s",
    )
    assert over["type"] == "text" and "image/jpeg, 3.8 MB, 5.0 MB as base64" in over["text"]
    assert "over the API's 5.0 MB limit" in over["text"]
    assert tiff["type"] == "text" and "image/tiff" in tiff["text"] and "PNG, JPEG, GIF and WebP" in tiff["text"]


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
