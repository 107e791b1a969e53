"""What the benchmark scripts share: the agent they time, the fake server's process, the bare SDK loop, the machine.

Owns the one agent every benchmark runs (N turns of a registered no-op tool, then a
final text answer), the embedded fake server started as a process of its own, the bare
``anthropic`` SDK loop that is the HTTP baseline, and how figures and the machine are
printed. Does not own any measurement: ``tools/bench_loop.py``, ``tools/bench_sessions.py``
and ``tools/bench/peers/run.py`` decide what they time.
"""
