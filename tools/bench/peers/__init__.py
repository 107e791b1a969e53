"""The same agent on other frameworks, for the side-by-side table of ``run.py``.

One module per framework, each with ``load() -> Agent`` (imports the framework, builds
what is built once per process) where ``Agent.run(turns, model)`` plays N turns of a
no-op tool then a final text answer with a zero-latency fake model, and checks that it
did. ``child.py`` times one framework in a process of its own; ``run.py`` starts the
children, interleaved across repeats, and prints the table. Needs the ``bench-peers``
extra (``pip install -e '.[bench-peers]'``) for the third-party frameworks.
"""
