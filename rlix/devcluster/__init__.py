"""A local Kubernetes control plane (kwokctl, binary runtime) for development and tests."""
