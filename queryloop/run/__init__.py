"""A run's assembly: its configuration, the services it is given, the machine driven to its end, its result.

``config`` (with ``asked``), ``defaults``, ``agent`` (with ``data``, ``services`` and ``result``), ``settings``,
``memory``, ``mcp_config``, ``sessions``, ``tracing``, ``telemetry``, ``otel`` (with ``otel_providers``) and
``startup``. Prints nothing: rendering is the front-ends'.
"""
