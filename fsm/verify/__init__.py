"""The engine's verify room: what can be proven or measured of a machine without running it.

Owns the checker (``check``), the symbolic bounds (``bounds``), replayable
counterexamples (``counterexample``), shortest paths for test planning (``paths``), the
Promela export and SPIN (``promela``, ``spin``) and transition coverage of recorded runs
(``coverage``). Imports only the model room.
"""
