"""The trainer container of e2e/test_park_at_gate_real_node.py: turns with memory.

Runs in the node image (python3 and the rlix wheel, no torch). It holds a
buffer that its offload hook copies to host memory and clears, and its restore
hook copies back (the agent checks both checksums). It reports its weights
(``WEIGHTS_MIB``) on simulated GPU 0, waits until the agent's hello has said
its phase gate parks, then, from ``START_AT`` to ``END_AT`` (wall-clock
seconds, the same for both pods), runs training phases of ``PHASE_S`` seconds
in which it holds its peak (``PEAK_MIB``: reported on entering; the simulated
GPU refuses a report that does not fit), with a short pause outside any phase
block between them. One JSON line per phase, park and restore; at the end,
inside one more phase (so that its memory is back), whether its buffer is
what it was.
"""

import hashlib
import json
import os
import time

import rlix
from rlix.client import api
from rlix.core import agent_protocol as proto

START_AT = float(os.environ["START_AT"])
END_AT = float(os.environ["END_AT"])
PEAK_MIB = int(os.environ["PEAK_MIB"])
WEIGHTS_MIB = int(os.environ["WEIGHTS_MIB"])
PHASE_S = 1.5
PAUSE_S = 0.3


def out(**kw):
    print(json.dumps(kw), flush=True)


device = bytearray(os.urandom(1 << 20))  # stands in for the pod's device memory
before = hashlib.sha256(device).hexdigest()
host = {}  # the parked copy, while parked


def offload():
    copy = host["buffer"] = bytes(device)
    device[:] = bytes(len(device))
    out(event="parked", at=time.time())
    return {"buffer": (len(copy), hashlib.sha256(copy).hexdigest())}


def restore():
    device[:] = host.pop("buffer")
    out(event="restored", at=time.time())
    return {"buffer": hashlib.sha256(device).hexdigest()}


rlix.register_offload("state", offload, restore)
rt = api._get()
deadline = time.monotonic() + 60
while not rt.gate_parks and time.monotonic() < deadline:
    time.sleep(0.05)
rlix.report_usage(gpu=0, memory_mib=WEIGHTS_MIB, utilization=0.1)
out(event="ready", gate=rt.gate_wait_s, parks=rt.gate_parks, at=time.time())
time.sleep(max(0.0, START_AT - time.time()))
i = 0
while time.time() < END_AT:
    asked = time.time()
    with rlix.phase("training"):
        entered = time.time()
        # rlix.report_usage's request, answered: the simulated GPU refuses a
        # report it has no room for, which would mean the gate let us in wrongly.
        usage = {"gpu": 0, "memory_mib": PEAK_MIB, "utilization": 0.9}
        reply = rt.link.request(proto.OP_USAGE, **usage).result(timeout=30)
        if not reply.ok:
            out(event="refused", error=reply.error_message)
        time.sleep(PHASE_S)
        left = time.time()
    out(event="phase", i=i, asked=asked, entered=entered, left=left)
    i += 1
    time.sleep(PAUSE_S)
# Parked at the gate for the other's last turn, perhaps: one more phase brings
# it back, and then its buffer must be what it was.
with rlix.phase("training"):
    same = hashlib.sha256(device).hexdigest() == before
out(event="done", same=same)
time.sleep(3600)
