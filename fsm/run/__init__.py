"""The engine's run room: a loaded machine executed, step by step.

Owns the frozen run state, the pure step and the async driver (``runtime``) and the
record construction it does at every step (``slots``). Imports only the model room.
"""
