"""The engine's model room: what a machine is, read from its declaration.

Records (``spec``), schema, readers (``source``, ``jsontext``, ``textfile``), templates, properties (and the
run's ``watch`` on them), contracts and ``load`` (built by ``build``, checked by ``rules``, ``caps``, ``children``,
``naming``, bound by ``bind``).
Imports no other room.
"""
