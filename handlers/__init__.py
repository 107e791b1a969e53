"""The query loop's Python, named by ``machines/query_loop.yaml``: one subpackage per YAML ``layer``.

``messages`` and ``outcome`` are shared; a layer imports only those and the layers before it: request, output,
hooks, session, tools, mcp, context, agents.
"""

__all__: list[str] = []
