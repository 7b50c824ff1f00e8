"""The trainer containers of e2e/test_park_at_gate_real_node.py: turns with memory.

Runs in the node image (python3 and the rlix wheel, no torch). It holds a
buffer that its offload hook copies to host memory and clears, and its restore
hook copies back (the agent checks both checksums). It waits until the agent's
hello has said its phase gate parks, then at ``LOAD_AT`` (wall-clock, the same
for both pods) loads inside ``rlix.loading()``: its peak for ``LOAD_S``
seconds on simulated GPU 0 (its pod declares GPU 0, ``rlix.io/gpu-indices``),
then its weights (``WEIGHTS_MIB``), which it keeps outside its phases. Then,
from ``START_AT`` to ``END_AT`` (wall-clock
seconds, the same for both pods), runs phases in which it holds its peak
(``PEAK_MIB``: reported on entering; the simulated GPU refuses a report that
does not fit), with a pause outside any phase block between them. ``ROLE``:

- ``turns`` (the default): training phases of ``PHASE_S`` seconds;
- ``trainer``: training phases of ``TRAIN_S`` seconds (long enough that a
  stop, its peak out and back at the PCIe floors and the sync, pays for most
  of them: ``gate_room.worth_stopping``), entered with ``safe_points=True``,
  calling ``rlix.safe_point()`` every 0.1 s;
- ``syncer``: weight-sync phases of ``SYNC_S`` seconds, ``GAP_S`` apart;
- ``eager``: no load through the gate and no phases: at ``START_AT`` it
  holds its weights on simulated GPU ``GPU`` without asking the gate (as a
  trainer that loads before it attaches does), until ``END_AT``.

One JSON line for its load, each phase, park and restore; at the end, inside
one more phase (so that its memory is back), whether its buffer is what it was.
"""

import hashlib
import json
import os
import time

import rlix
from rlix.client import api
from rlix.core import agent_protocol as proto

ROLE = os.environ.get("ROLE", "turns")
GPU = int(os.environ.get("GPU", "0"))
LOAD_AT = float(os.environ["LOAD_AT"])
START_AT = float(os.environ["START_AT"])
END_AT = float(os.environ["END_AT"])
PEAK_MIB = int(os.environ["PEAK_MIB"])
WEIGHTS_MIB = int(os.environ["WEIGHTS_MIB"])
LOAD_S = 2.0
PHASE_S = 1.5
PAUSE_S = 0.3
TRAIN_S, SYNC_S, GAP_S = 12.0, 0.5, 1.5  # as the sync test's rlix.io/phase-seconds say


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


def holds(mib):
    # rlix.report_usage's request, answered: the simulated GPU refuses a
    # report it has no room for, which would mean the gate let us in wrongly.
    usage = {"gpu": GPU, "memory_mib": mib, "utilization": 0.9}
    reply = rt.link.request(proto.OP_USAGE, **usage).result(timeout=30)
    if not reply.ok:
        out(event="refused", error=reply.error_message)


def at_peak():
    holds(PEAK_MIB)


def one_phase():
    """One phase of this role: (entered, left)."""
    if ROLE == "syncer":
        with rlix.phase("weight-sync"):
            entered = time.time()
            at_peak()
            time.sleep(SYNC_S)
            return entered, time.time()
    if ROLE == "trainer":
        with rlix.phase("training", safe_points=True):
            entered = time.time()
            at_peak()
            while time.time() < entered + TRAIN_S:
                time.sleep(0.1)
                rlix.safe_point()  # the only place a park can land inside the block
            return entered, time.time()
    with rlix.phase("training"):
        entered = time.time()
        at_peak()
        time.sleep(PHASE_S)
        return entered, time.time()


rlix.register_offload("state", offload, restore)
rt = api._get()
deadline = time.monotonic() + 60
while not rt.gate_parks and time.monotonic() < deadline:
    time.sleep(0.05)
out(event="ready", gate=rt.gate_wait_s, parks=rt.gate_parks, stops=rt.gate_stops, at=time.time())
if ROLE == "eager":
    time.sleep(max(0.0, START_AT - time.time()))
    holds(WEIGHTS_MIB)  # outside every block: the gate is never asked
    out(event="loaded", asked=None, entered=time.time(), left=time.time())
    time.sleep(max(0.0, END_AT - time.time()))
    out(event="done", same=hashlib.sha256(device).hexdigest() == before)
    time.sleep(3600)
time.sleep(max(0.0, LOAD_AT - time.time()))
asked = time.time()
with rlix.loading():  # its first allocation: in only where its peak fits on GPU 0
    entered = time.time()
    at_peak()
    time.sleep(LOAD_S)
    holds(WEIGHTS_MIB)
    left = time.time()
out(event="loaded", asked=asked, entered=entered, left=left)
time.sleep(max(0.0, START_AT - time.time()))
i = 0
while time.time() < END_AT:
    asked = time.time()
    entered, left = one_phase()
    out(event="phase", i=i, asked=asked, entered=entered, left=left)
    i += 1
    time.sleep(GAP_S if ROLE == "syncer" else PAUSE_S)
# Parked at the gate for the other's last turn, perhaps: one more phase brings
# it back, and then its buffer must be what it was.
with rlix.phase("weight-sync" if ROLE == "syncer" else "training"):
    same = hashlib.sha256(device).hexdigest() == before
out(event="done", same=same)
time.sleep(3600)
