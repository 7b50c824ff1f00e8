"""The RLJob operator (kopf)."""
