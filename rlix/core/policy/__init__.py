"""The policy layer of ``rlix.core``: placement, admission and the policy port.

The extender, the operator and the simulator all run this code, so a benchmark
measures what ships. It imports only the vocabulary below it (names, phases,
snapshot, API models) and never the simulator above it.
"""
