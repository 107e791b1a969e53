"""A run's assembly: its configuration, the services it is given, the machine driven to its end, its result.

Everything a front-end (``queryloop.frontends``) or the fleet needs to start a run of
``machines/query_loop.yaml``: ``config`` (the one record of a run's configuration and
how it is resolved from flags, settings files, a scenario and API options), ``defaults``
(every default the YAML does not own), ``agent`` (run data, services, :class:`AgentRun`,
the result object), ``settings``, ``memory`` (CLAUDE.md), ``mcp_config``, ``sessions``
(which stored session a run continues), ``tracing``, ``telemetry`` and ``otel``
(OpenTelemetry export, imported only when configured) and ``startup``. Draws nothing and
prints nothing of a run: rendering belongs to the front-ends.
"""
