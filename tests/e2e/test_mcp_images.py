"""End-to-end: an MCP server's images are checked before the model gets them, and a request carries at most 24 MiB.

The server is ``tests/fixtures/mcp/image_server.py``, started by ``queryloop run`` as a stdio
subprocess; the model is the embedded server over loopback through the real ``anthropic``
SDK (it reads bodies up to the API's 32 MB and answers a larger one with its 413). What is
checked is what the requests carried. The behaviours are Claude Code 2.1.235's, seen with
the same server: a result with an image that is not base64 is an error result, whole; an
image goes as the type its bytes are; the request's images stay within 24 MiB, the oldest
left out first.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from queryloop.handlers.request.services.media import MEDIA_MAX_BASE64_CHARS

from .harness import ROOT, CliRun, MockApi, run_cli

pytestmark = pytest.mark.slow  # 40 MB of images cross a pipe and a socket

SERVER = ROOT / "tests" / "fixtures" / "mcp" / "image_server.py"
CONFIG = json.dumps({"mcpServers": {"images": {"command": sys.executable, "args": [str(SERVER)]}}})


# the server would count the images' base64 as text (millions of tokens, and a compaction); the API counts
# an image as ~1,600 tokens
USAGE = json.dumps({"input_tokens": 9000, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0})


def _script(*calls: tuple[str, dict[str, Any]]) -> str:
    steps = [{"tool_use": {"name": f"mcp__images__{name}", "input": arguments}} for name, arguments in calls]
    replies = "\n".join(
        f"    - reply: {{content: [{json.dumps(s)}], usage: {USAGE}}}" for s in [*steps, {"text": "done"}]
    )
    return f"schema_version: 1\nscenario: mcp-images\nmodel: mock-primary\nmodels:\n  mock-primary:\n{replies}\n"


def _run(tmp_path: Path, *calls: tuple[str, dict[str, Any]]) -> tuple[CliRun, list[Any]]:
    with MockApi(_script(*calls)) as api:
        run = run_cli(
            ["--mcp-config", CONFIG, "--model", "mock-primary", "--", "go"],
            api=api,
            cwd=tmp_path,
            timeout=120,
            QUERYLOOP_HOME=str(tmp_path / "home"),
        )
        return run, api.requests


def _results(request: Any) -> list[dict[str, Any]]:
    return [
        b
        for m in request.messages
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_result"
    ]


def _images(request: Any) -> list[dict[str, Any]]:
    results = [r["content"] for r in _results(request) if isinstance(r["content"], list)]
    return [b for content in results for b in content if b["type"] == "image"]


def test_an_image_that_is_not_base64_makes_the_result_an_error_and_one_mislabelled_goes_as_what_it_is(
    tmp_path: Path,
) -> None:
    run, requests = _run(tmp_path, ("broken", {}), ("mislabelled", {}), ("not_an_image", {}))
    assert run.returncode == 0, run.stderr
    broken, mislabelled, not_an_image = _results(requests[-1])
    assert broken["is_error"] is True and "not*base64" not in json.dumps(broken)
    assert broken["content"] == (
        "MCP server 'images' returned a malformed result: image 1 (image/png) is not valid base64; "
        "none of it was passed on to the model"
    )
    sources = [b["source"] for b in mislabelled["content"]]
    assert [s["media_type"] for s in sources] == ["image/png", "image/gif"]
    assert base64.b64decode(sources[0]["data"]).startswith(b"\x89PNG")
    (notice,) = not_an_image["content"] if isinstance(not_an_image["content"], list) else [not_an_image]
    text = not_an_image["content"] if isinstance(not_an_image["content"], str) else notice["text"]
    assert "its bytes are not a PNG, JPEG, GIF or WebP image" in text and not not_an_image.get("is_error")


def test_images_of_4_9_mb_never_make_a_request_over_the_cap_the_oldest_left_out_first(tmp_path: Path) -> None:
    run, requests = _run(tmp_path, ("photos", {"count": 3, "label": "a"}), ("photos", {"count": 3, "label": "b"}))
    assert run.returncode == 0, run.stderr
    assert [r.response_status for r in requests] == [200, 200, 200]  # no 413
    first, second = _results(requests[1]), _results(requests[2])
    assert len(_images(requests[1])) == 3 and first[0]["content"][0]["type"] == "image"
    images = _images(requests[2])
    total = sum(len(b["source"]["data"]) for b in images)
    assert total <= MEDIA_MAX_BASE64_CHARS
    kept = [base64.b64decode(b["source"]["data"][:40])[8:12] for b in images]
    assert kept == [b"b-1:", b"b-2:"]  # the newest stay: dropping goes 10 MiB under the cap, as Claude Code's
    left_out = [b for r in second for b in r["content"] if b["type"] == "text"]
    assert len(left_out) == 4 and all("left out of this request" in b["text"] for b in left_out)
    transcript = next((tmp_path / "home" / "projects").glob("*/*.jsonl")).read_text()
    assert transcript.count('"type":"image"') + transcript.count('"type": "image"') >= 6  # the transcript keeps all
