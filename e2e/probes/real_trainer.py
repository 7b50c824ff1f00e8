"""The trainer container of e2e/test_real_containers.py: a loop on the client library.

Runs in the node image (python3 and the rlix wheel, no torch) as every replica
of the test's RLJob. It
- serves its name on port 8080 and fetches its peers' by their headless Service
  names (``$PEERS``: ``<job>-<role>-<i>.<job>``, resolved by the node's CoreDNS),
  printing ``{"event": "peer", ...}`` once each answers;
- holds ``SIZE`` bytes of "device memory" (simulated GPUs: an anonymous mapping
  at a fixed address) filled from the pod's name, registered with
  ``rlix.register_offload``: on suspend the bytes move to a host copy and the
  mapping is zeroed, on resume they are copied back; each side reports a sha256
  to the agent, which refuses a resume whose checksums differ;
- prints the mapping's address once, so the test can read the bytes itself
  through /proc/<pid>/mem (the checksum it compares is its own, not ours);
- loops rollout -> training, each phase long enough for the agent to publish it
  and the operator to see it (an iteration ends when training ends);
- reports its memory on the simulated GPU its claim holds (``RLIX_GPU_INDICES``,
  which the agent's CDI spec sets), where NVML would find it on a real GPU.
"""

import ctypes
import hashlib
import http.server
import json
import mmap
import os
import random
import socket
import threading
import time
import urllib.request

import rlix

SIZE = 4 << 20
PHASE_S = 1.5
NAME = socket.gethostname()  # the pod's hostname: <job>-<role>-<i>
GPU = int(os.environ.get("RLIX_GPU_INDICES", "0").split(",")[0])


def out(**kw):
    print(json.dumps(kw), flush=True)


class Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(NAME.encode())

    def log_message(self, *args):
        pass


def serve():
    http.server.ThreadingHTTPServer(("0.0.0.0", 8080), Hello).serve_forever()


def reach(peer):
    while True:
        try:
            with urllib.request.urlopen(f"http://{peer}:8080/", timeout=2) as reply:
                out(event="peer", peer=peer, answered=reply.read().decode())
                return
        except OSError as exc:
            out(event="peer-retry", peer=peer, error=str(exc))
            time.sleep(0.5)


def sha(data):
    return hashlib.sha256(data).hexdigest()


memory = mmap.mmap(-1, SIZE)
memory[:] = random.Random(NAME).randbytes(SIZE)
address = ctypes.addressof(ctypes.c_char.from_buffer(memory))
parked = {}


def offload():
    parked["weights"] = bytes(memory)
    memory[:] = bytes(SIZE)  # the "device" copy is gone while suspended
    rlix.report_usage(gpu=GPU, memory_mib=0, utilization=0.0)
    out(event="offloaded")
    return {"weights": (SIZE, sha(parked["weights"]))}


def restore():
    memory[:] = parked.pop("weights")
    rlix.report_usage(gpu=GPU, memory_mib=SIZE >> 20, utilization=0.5)
    out(event="restored")
    return {"weights": sha(memory[:])}


threading.Thread(target=serve, daemon=True).start()
for peer in filter(None, os.environ.get("PEERS", "").split(",")):
    threading.Thread(target=reach, args=(peer,), daemon=True).start()
rlix.register_offload("weights", offload, restore)
deadline = time.monotonic() + 30
while not rlix.agent_connected() and time.monotonic() < deadline:
    time.sleep(0.1)  # the link connects in the background
rlix.report_usage(gpu=GPU, memory_mib=SIZE >> 20, utilization=0.5)
out(
    event="ready",
    pid=os.getpid(),
    address=address,
    size=SIZE,
    gpus=os.environ.get("RLIX_GPU_INDICES"),
    connected=rlix.agent_connected(),
)
step = 0
while True:
    with rlix.phase("rollout"):
        time.sleep(PHASE_S)
        rlix.safe_point()
    with rlix.phase("training"):
        time.sleep(PHASE_S)
    step += 1
    out(event="step", step=step)
