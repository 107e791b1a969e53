"""A tiny MCP stdio server for the fault fuzzer: a tool that answers, one that crashes, one that hangs.

Standard library only, so it starts in milliseconds. Tools: ``echo(text)``, ``die()`` (exits mid-call) and
``hang()`` (never answers). Imports nothing of queryloop.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

_TOOLS = [
    {"name": name, "description": doc, "inputSchema": {"type": "object", "properties": props}}
    for name, doc, props in (
        ("echo", "Echo the text back.", {"text": {"type": "string"}}),
        ("die", "Exit at once, without an answer.", {}),
        ("hang", "Never answer.", {}),
    )
]


def _answer(request: dict[str, Any]) -> dict[str, Any] | None:
    method, params = request.get("method"), request.get("params") or {}
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "fuzz", "version": "1"},
        }
    if method == "tools/list":
        return {"tools": _TOOLS}
    if method == "tools/call":
        name = params.get("name")
        if name == "die":
            os._exit(1)
        if name == "hang":
            return None
        text = str((params.get("arguments") or {}).get("text", ""))
        return {"content": [{"type": "text", "text": f"echo: {text}"}], "isError": False}
    return {}


def main() -> None:
    for line in sys.stdin:
        try:
            request = json.loads(line)
        except ValueError:
            continue
        if not isinstance(request, dict) or "id" not in request:
            continue  # a notification: nothing to answer
        result = _answer(request)
        if result is not None:
            sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
