"""The engine's model room: what a machine is, read from its declaration.

Owns the records a declaration becomes (``spec``), the schema it must satisfy
(``schema``), reading files with line numbers (``source``, ``jsontext``, ``textfile``), templates
(``templates``), the properties and contracts a machine declares (``properties``,
``contract``) and loading a machine with its handlers bound (``load``). Imports none of
the other rooms: running, verifying and drawing all start from here.
"""
