"""The kube-scheduler extender (FastAPI)."""
