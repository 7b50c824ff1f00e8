"""The pod being scheduled, read strictly through the core reader.

Pods already running are read by the cache with safe values for anything
malformed (``rlix.core.objects``); the pod a scheduling call is about is the
user's own, so a malformed value there is an error the user must see (filter
reports it on every node, where ``kubectl describe pod`` shows it).
"""

from __future__ import annotations

from rlix.core.objects import ObjectError, read_pod
from rlix.core.snapshot import Workload


def pending_workload(pod: object) -> Workload:
    """The Workload of the pod being scheduled; ``ObjectError`` on any bad value."""
    facts = read_pod(pod)
    if facts.errors:
        raise facts.errors[0]
    return facts.workload


__all__ = ["ObjectError", "pending_workload"]
