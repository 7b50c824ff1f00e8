"""A discrete-event simulator of an RL cluster, driving the policies that ship.

Kept import-light on purpose: ``rlix.core.admission`` imports the policy port
from here, so this package must not import the engine at import time.
"""
