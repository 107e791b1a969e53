"""A small deploy MCP server, the remote side of the seed's failure chain: ``python -m queryloop.mockapi.deploy_mcp``.

``deploy`` is not idempotent and a re-proposed call carries a fresh key, so only the agent's ledger can tell a
repeat.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

__all__ = ["build_server", "main"]


@contextlib.contextmanager
def _locked_state(path: Path) -> Iterator[dict[str, Any]]:
    """The state file's content, changed in place and written back atomically, under an exclusive lock."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(path.suffix + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            state = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
        except ValueError:
            state = {}
        state.setdefault("deployments", [])
        yield state
        temporary = path.with_suffix(path.suffix + ".tmp")
        temporary.write_text(json.dumps(state, indent=2), encoding="utf-8")
        temporary.replace(path)


def build_server(state_file: Path) -> MCPServer:
    """The deploy server, keeping its deployments in ``state_file``."""
    server = MCPServer("deploy")

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False))
    def deploy(release: str, idempotency_key: str) -> str:
        """Deploy a release to production. Returns the deployment id (dep-N)."""
        with _locked_state(state_file) as state:
            for existing in state["deployments"]:
                if existing["idempotency_key"] == idempotency_key:
                    return f"already deployed: {existing['id']} ({existing['release']})"
            deployment = {
                "id": f"dep-{41 + len(state['deployments']) + 1}",
                "release": release,
                "idempotency_key": idempotency_key,
            }
            state["deployments"].append(deployment)
        return f"deployed {release} as {deployment['id']}"

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
    def deployment_status(id: str) -> str:
        """The status of a deployment by its id."""
        with _locked_state(state_file) as state:
            found = next((d for d in state["deployments"] if d["id"] == id), None)
        return f"{id}: live ({found['release']})" if found else f"{id}: no such deployment"

    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m queryloop.mockapi.deploy_mcp", description=__doc__.splitlines()[0])
    parser.add_argument("--state", type=Path, default=Path("deployments.json"), help="the deployments' JSON file")
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT/mcp")
    args = parser.parse_args(argv)
    server = build_server(args.state.resolve())
    if args.http is not None:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
