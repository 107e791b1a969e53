"""The engine's verify room: what can be proven or measured of a machine without running it.

``check`` (with ``passes``, ``explore``, ``figures``, ``report``, ``progress``), ``bounds`` (with ``decompose``,
``algebra``, ``expr``), ``counterexample``, ``paths``, ``promela`` (with ``monitors``), ``spin`` and ``coverage``.
Imports only the model room.
"""
