"""The pure core of RLix: API models, phases, cluster snapshot and policy.

Nothing under ``rlix.core`` may import kopf, FastAPI, a Kubernetes client, NVML
or torch (an import-linter contract enforces it in CI), and nothing here reads
the wall clock or the environment: callers pass time and configuration in.
"""
