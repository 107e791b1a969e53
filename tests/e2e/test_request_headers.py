"""End-to-end: the headers of a request as Claude Code 2.1.235 sends them, observed against the
embedded server (``anthropic-version: 2023-06-01``, the key in ``x-api-key``, ``x-stainless-timeout:
600``), sent by the real CLI through the real SDK."""

from __future__ import annotations

from pathlib import Path

import pytest

from queryloop.mockapi import server

from .harness import MockApi, run_cli
from .test_request_layer import scenario

HELLO = scenario('  mock-primary:\n    - reply: {content: [{text: "hi"}]}\n')


def test_a_request_sends_claude_codes_version_key_header_and_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the server runs in this process: have it keep the timeout header too
    monkeypatch.setattr(server, "_LOGGED_HEADERS", (*server._LOGGED_HEADERS, "x-stainless-timeout"))
    with MockApi(HELLO) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    headers = api.requests[0].headers
    assert headers["anthropic-version"] == "2023-06-01"
    assert headers["x-api-key"] == "test-key" and "authorization" not in headers
    assert headers["x-stainless-timeout"] == "600"
