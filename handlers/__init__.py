"""The query loop's Python, named by ``machines/query_loop.yaml``: one subpackage per YAML ``layer``.

``request``, ``output``, ``hooks``, ``tools`` and ``context`` each hold their edge
handlers, effects and guards beside the services they drive, and own their slice of
the run data. Two small modules hold no layer's state and every layer may use them:
``messages`` (the message graph) and ``outcome`` (how the run ends, and the run data
every layer shares). A layer imports only the shared modules and the layers below
it, in this order: request, output, hooks, tools, context. The composed run data and
the wiring of the whole agent live above, in ``queryloop.run.agent``. Installed as
``queryloop.handlers``.
"""

__all__: list[str] = []
