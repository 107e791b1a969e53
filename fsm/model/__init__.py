"""The engine's model room: what a machine is, read from its declaration.

Records (``spec``), schema, readers (``source``, ``jsontext``, ``textfile``), templates, properties, contracts and
``load``. Imports no other room.
"""
