"""The trainer container of e2e/test_phase_gate_real_node.py: busy phases on one GPU.

Runs in the node image (python3 and the rlix wheel, no torch). It reports 1 GiB
on simulated GPU 0 (so the node agent knows which GPU it holds), waits until
the agent's hello has said it runs the phase gate, then, from ``START_AT`` to
``END_AT`` (wall-clock seconds from its environment, the same for both pods, so
that they contend however far apart their containers start), runs training
phases of ``PHASE_S`` seconds with a short pause outside any phase block
between them, printing one JSON line per phase: when it asked to enter, when
it was in, and when it left (both pods share the node's clock).
"""

import json
import os
import time

import rlix
from rlix.client import api

START_AT = float(os.environ["START_AT"])
END_AT = float(os.environ["END_AT"])
PHASE_S = 1.5
PAUSE_S = 0.3


def out(**kw):
    print(json.dumps(kw), flush=True)


rt = api._get()
deadline = time.monotonic() + 60
while rt.gate_wait_s is None and time.monotonic() < deadline:
    time.sleep(0.05)
rlix.report_usage(gpu=0, memory_mib=1024, utilization=0.9)
out(event="ready", gate=rt.gate_wait_s, at=time.time())
time.sleep(max(0.0, START_AT - time.time()))
i = 0
while time.time() < END_AT:
    asked = time.time()
    with rlix.phase("training"):
        entered = time.time()
        time.sleep(PHASE_S)
        left = time.time()
    out(event="phase", i=i, asked=asked, entered=entered, left=left)
    i += 1
    time.sleep(PAUSE_S)
out(event="done")
time.sleep(3600)
