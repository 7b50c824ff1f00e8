"""A child pytest session that starts its own cluster, for tests of what outlives a session.

The child runs one probe module (``e2e/probes``) with the e2e fixtures; it writes
its cluster's name and directory as JSON to ``RLIX_PROBE_OUT`` once the cluster
is up, and the test then fails, interrupts or kills it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from e2e.kube import wait_for
from rlix.devcluster import processes


def start_probe_session(
    probe: Path, tmp_path: Path, *, what: str, timeout_s: float, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    """Start ``probe`` in its own process group; return it and what it wrote once up.

    On a timeout the child (and the cluster it may be starting) is stopped and
    its output shown: a slow start on a loaded machine reads differently from a
    crash.
    """
    out = tmp_path / "probe.json"
    child_env = {**os.environ, "RLIX_PROBE_OUT": str(out), **(env or {})}
    child_env.pop("KUBECONFIG", None)
    log = tmp_path / "probe.log"
    with log.open("wb") as sink:
        child = subprocess.Popen(
            [sys.executable, "-m", "pytest", str(probe), "-q", "-p", "no:cacheprovider"],
            env=child_env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def written() -> dict[str, str] | None:
        # The probe writes the file in one call, but a poll can still land
        # between its creation and the write: half a document is "not yet".
        try:
            found: dict[str, str] = json.loads(out.read_text())
        except (OSError, ValueError):
            return None
        return found

    try:
        info = wait_for(what, written, timeout_s=timeout_s)
    except AssertionError as exc:
        processes.stop_process_group(child.pid)
        child.wait(timeout=60)
        tail = log.read_text(errors="replace")[-3000:]
        raise AssertionError(f"{exc}\n--- probe session output ---\n{tail}") from None
    return child, info
