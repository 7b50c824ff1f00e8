"""Run only by test_teardown.py in a child pytest: holds a cluster, then fails or waits.

The parent reads the cluster's name from RLIX_PROBE_OUT and then interrupts or
kills this session to prove the teardown leaves no process or port behind.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


def test_hold(cluster: Any) -> None:
    out = Path(os.environ["RLIX_PROBE_OUT"])
    out.write_text(json.dumps({"name": cluster.options.name, "dir": str(cluster.dir)}))
    go = out.with_suffix(".go")
    deadline = time.monotonic() + 600
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    if os.environ.get("RLIX_PROBE_MODE") == "fail":
        raise AssertionError("probe fails on purpose")
    time.sleep(600)
