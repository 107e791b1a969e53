"""The ways in: the ``queryloop`` program, its renderers, the interactive session, the Python API, the Agent SDK.

``cli`` (the program and its flags, ``argtypes``; ``commands``, the registry of its
commands and the module adding each), ``console`` (one renderer per output format, the
formats listed in ``formats``), ``interactive`` (the terminal session), ``api`` with ``options`` and
``messages`` (the Python API in the Claude Agent SDK's shapes) and ``sdk_protocol``,
``sdk_channel``, ``sdk_flags`` (the Agent SDK's stream-json session). Each turns what
its user gives into a run's configuration (``queryloop.run.config``) and shows what
the run publishes; none decides anything the machine decides.
"""
