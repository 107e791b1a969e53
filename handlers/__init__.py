"""The query loop's Python, named by ``machines/query_loop.yaml``: one subpackage per YAML ``layer``.

Each layer holds its handlers beside its services and owns its slice of the run data; ``messages`` and ``outcome``
are shared. A layer imports only those and the layers before it: request, output, hooks, session, tools, mcp,
context, agents. The run data is composed in ``queryloop.run.agent``.
"""

__all__: list[str] = []
