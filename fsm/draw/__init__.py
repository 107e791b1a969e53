"""The engine's draw room: a machine shown to people.

Owns the wording of decisions (``ladder``), the Graphviz and Mermaid pictures
(``render``, ``mermaid``), the recovery document (``recovery``) and a recorded run read
back to be drawn on the graph (``trace``). Imports the model room, and the verify room's
coverage to colour what runs took.
"""
