"""A discrete-event simulator of an RL cluster, driving the policies that ship.

The top layer of ``rlix.core``: it imports the policy layer (``rlix.core.policy``)
and the vocabulary below it, and nothing below imports it (an import-linter
``layers`` contract enforces that).
"""
