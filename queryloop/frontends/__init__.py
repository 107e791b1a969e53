"""The ways in: the ``queryloop`` program, its renderers, the interactive session, the Python API, the Agent SDK.

``cli``, ``commands``, ``console``, ``interactive``, ``api`` with ``options`` and ``messages``, and ``sdk_*``. Each
turns what its user gives into a run's configuration and shows what the run publishes.
"""
