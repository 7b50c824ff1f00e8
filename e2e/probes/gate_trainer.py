"""The trainer container of e2e/test_phase_gate_real_node.py: busy phases on one GPU.

Runs in the node image (python3 and the rlix wheel, no torch). It reports 1 GiB
on simulated GPU 0 (so the node agent knows which GPU it holds), waits until
the agent's hello has said it runs the phase gate, then runs ``ITERATIONS``
training phases of ``PHASE_S`` seconds with a short pause outside any phase
block between them, printing one JSON line per phase: when it asked to enter,
when it was in, and when it left (wall-clock seconds; both pods share the
node's clock).
"""

import json
import time

import rlix
from rlix.client import api

ITERATIONS = 4
PHASE_S = 1.5
PAUSE_S = 0.3


def out(**kw):
    print(json.dumps(kw), flush=True)


rt = api._get()
deadline = time.monotonic() + 60
while rt.gate_wait_s is None and time.monotonic() < deadline:
    time.sleep(0.05)
rlix.report_usage(gpu=0, memory_mib=1024, utilization=0.9)
out(event="ready", gate=rt.gate_wait_s)
for i in range(ITERATIONS):
    asked = time.time()
    with rlix.phase("training"):
        entered = time.time()
        time.sleep(PHASE_S)
        left = time.time()
    out(event="phase", i=i, asked=asked, entered=entered, left=left)
    time.sleep(PAUSE_S)
out(event="done")
time.sleep(3600)
