"""The engine's run room: a loaded machine executed, step by step.

Owns the frozen run state (``records``), the pure step (``program``) and the async driver (``runtime``). Imports
only the model room.
"""
