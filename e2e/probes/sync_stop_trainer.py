"""The containers of e2e/test_park_at_gate_real_node.py's sync test: a weight
sync parks a trainer mid-phase, at its safe points.

Runs in the node image (python3 and the rlix wheel, no torch). Like
parking_trainer.py it holds a buffer its offload hook parks and its restore
hook brings back, reports its weights (``WEIGHTS_MIB``) on simulated GPU 0 and,
inside each phase, its peak (``PEAK_MIB``; the simulated GPU refuses a report
that does not fit). ``ROLE``:

- ``trainer``: training phases of ``TRAIN_S`` seconds (long enough that a
  stop, its peak out and back at the PCIe floors and the sync, pays for most
  of them: ``gate_room.worth_stopping``), entered with
  ``safe_points=True``, calling ``rlix.safe_point()`` every 0.1 s;
- ``syncer``: weight-sync phases of ``SYNC_S`` seconds, ``GAP_S`` apart.

Both from ``START_AT`` to ``END_AT`` (wall clock). One JSON line per phase,
park and restore; at the end, inside one more phase, whether its buffer is
what it was.
"""

import hashlib
import json
import os
import time

import rlix
from rlix.client import api
from rlix.core import agent_protocol as proto

ROLE = os.environ["ROLE"]
START_AT = float(os.environ["START_AT"])
END_AT = float(os.environ["END_AT"])
PEAK_MIB = int(os.environ["PEAK_MIB"])
WEIGHTS_MIB = int(os.environ["WEIGHTS_MIB"])
TRAIN_S, SYNC_S, GAP_S = 12.0, 0.5, 1.5  # as the test's rlix.io/phase-seconds say


def out(**kw):
    print(json.dumps(kw), flush=True)


device = bytearray(os.urandom(1 << 20))  # stands in for the pod's device memory
before = hashlib.sha256(device).hexdigest()
host = {}


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
while not rt.gate_stops and time.monotonic() < deadline:
    time.sleep(0.05)
rlix.report_usage(gpu=0, memory_mib=WEIGHTS_MIB, utilization=0.1)
out(event="ready", parks=rt.gate_parks, stops=rt.gate_stops, at=time.time())


def at_peak():
    # Answered, so that a report the simulated GPU has no room for is seen.
    usage = {"gpu": 0, "memory_mib": PEAK_MIB, "utilization": 0.9}
    reply = rt.link.request(proto.OP_USAGE, **usage).result(timeout=30)
    if not reply.ok:
        out(event="refused", error=reply.error_message)


time.sleep(max(0.0, START_AT - time.time()))
i = 0
while time.time() < END_AT:
    asked = time.time()
    if ROLE == "trainer":
        with rlix.phase("training", safe_points=True):
            entered = time.time()
            at_peak()
            while time.time() < entered + TRAIN_S:
                time.sleep(0.1)
                rlix.safe_point()  # the only place a park can land inside the block
            left = time.time()
    else:
        with rlix.phase("weight-sync"):
            entered = time.time()
            at_peak()
            time.sleep(SYNC_S)
            left = time.time()
    out(event="phase", i=i, asked=asked, entered=entered, left=left)
    i += 1
    time.sleep(0.3 if ROLE == "trainer" else GAP_S)
with rlix.phase("training" if ROLE == "trainer" else "weight-sync"):
    same = hashlib.sha256(device).hexdigest() == before
out(event="done", same=same)
time.sleep(3600)
