"""The engine's run room: a loaded machine executed, step by step.

Owns the frozen run state, the pure step and the async driver (``runtime``). Imports
only the model room.
"""
