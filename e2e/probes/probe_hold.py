"""Run only by test_teardown.py in a child pytest: holds a cluster, then fails or waits.

The parent reads the cluster's name from RLIX_PROBE_OUT and then interrupts or
kills this session to prove the teardown leaves no process or port behind.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

# The parent tests Ctrl-C, so this session must turn SIGINT into
# KeyboardInterrupt whatever it inherited. POSIX makes a non-interactive shell's
# background job ignore SIGINT (`make test &`, nohup), and Python keeps an
# ignored SIGINT ignored. Such a run then slept through the parent's SIGINT
# until pytest-timeout (300 s), and the test failed.
signal.signal(signal.SIGINT, signal.default_int_handler)


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
