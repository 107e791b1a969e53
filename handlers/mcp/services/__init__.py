"""The services the mcp layer's edges drive: code the YAML does not name.

The functions machines/query_loop.yaml names for this layer live one level up
(see the layer's __init__); here is what they call.
"""
