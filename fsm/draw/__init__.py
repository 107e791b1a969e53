"""The engine's draw room: a machine shown to people.

``ladder``, ``render`` (with ``key``, ``marks``, ``style``), ``mermaid``, ``recovery`` and ``trace``.
Imports the model room, and coverage from the verify room.
"""
