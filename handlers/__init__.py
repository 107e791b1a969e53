"""Python handlers named by machines/query_loop.yaml: guards, edge handlers and effects,
one module per recovery layer."""
