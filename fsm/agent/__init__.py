"""Anthropic-facing layer of queryloop: model client, embedded API server, tools, services.

The engine (``fsm`` proper) never imports this package; machines name it by dotted path.
"""
