"""Client library internals (socket protocol to the node agent)."""
