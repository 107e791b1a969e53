"""Small example machines proving the engine, and the Python their YAML names."""
