"""What the cluster looked like when a real-cluster test failed.

A timeout on a real control plane says only that something did not happen in
time; the pods' phases and nodes, the RLJobs' states, the latest events and
the tails of the components' logs say which part stalled. The cluster and its
logs are torn down with the session, so this is collected at the failure, and
pytest prints it with the test's report (``conftest.pytest_runtest_makereport``).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

TAIL_LINES = 25
EVENTS = 40


def _tail(path: Path, lines: int = TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError as exc:
        return f"(unreadable: {exc})"
    return "\n".join(text[-lines:]) or "(empty)"


def _kubectl(cluster: Any, *args: str) -> str:
    try:
        done = cluster.kubectl(*args, check=False, timeout_s=20)
    except Exception as exc:  # a wedged API server is itself the finding
        return f"(kubectl {' '.join(args)} failed: {exc})"
    return (done.stdout or "") + (done.stderr or "")


def cluster_report(cluster: Any, logs: Iterable[Path] = ()) -> str:
    """RLJobs, pods, recent events and log tails; never raises."""
    parts = [
        "$ kubectl get rljobs -A -o wide",
        _kubectl(cluster, "get", "rljobs", "-A", "-o", "wide"),
        "$ kubectl get pods -A -o wide",
        _kubectl(cluster, "get", "pods", "-A", "-o", "wide"),
        f"$ kubectl get events -A (last {EVENTS})",
        "\n".join(
            _kubectl(cluster, "get", "events", "-A", "--sort-by=.lastTimestamp").splitlines()[
                -EVENTS:
            ]
        ),
    ]
    found = list(logs)
    where = getattr(cluster, "dir", None)
    if isinstance(where, Path):
        found += sorted(where.glob("logs/*.log"))
    for path in found:
        if path.is_file():
            parts += [f"--- {path.name} (last {TAIL_LINES} lines)", _tail(path)]
    return "\n".join(parts)
