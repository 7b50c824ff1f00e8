"""A real trainer for the agent and client tests; started by pod_processes.Trainer.

A small torch model and Adam, registered with rlix; waits for one stdin line
(the test puts this PID in a pod), then answers commands on stdin with one JSON
line each: live, digest, connected, "phase NAME", train, replicas.
"""

import ctypes
import hashlib
import json
import sys

import torch

import rlix


def out(**kw):
    print(json.dumps(kw), flush=True)


def tensors():
    ts = [p for p in model.parameters()] + [p.grad for p in model.parameters()]
    for st in opt.state.values():
        ts += [v for v in st.values() if isinstance(v, torch.Tensor)]
    return ts


def digest():
    h = hashlib.sha256()
    for t in tensors():
        h.update(ctypes.string_at(t.data_ptr(), t.nbytes))
    return h.hexdigest()


def live_bytes():
    return sum(t.untyped_storage().nbytes() for t in tensors())


def step():
    opt.zero_grad()
    model(torch.randn(32, 256, generator=gen)).pow(2).mean().backward()
    opt.step()


torch.manual_seed(0)
gen = torch.Generator().manual_seed(1)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 64))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
step()  # so the optimizer has state worth parking
sys.stdin.readline()  # wait until the test has put this PID in a pod
rlix.register_torch(modules=[model], optimizers=[opt])
out(event="ready", digest=digest(), live=live_bytes())
for line in sys.stdin:
    cmd = line.strip()
    if cmd == "live":
        out(event="live", live=live_bytes())
    elif cmd == "digest":
        out(event="digest", digest=digest())
    elif cmd == "connected":
        out(event="connected", connected=rlix.agent_connected(), suspended=rlix.suspended())
    elif cmd.startswith("phase "):
        with rlix.phase(cmd.split()[1]):
            out(event="in-phase", digest=digest())
    elif cmd == "replicas":
        roster = rlix.active_replicas()
        if roster is None:
            out(event="replicas", roster=None)
        else:
            out(event="replicas", roster=[roster.role, list(roster.active), list(roster.suspended)])
    elif cmd == "train":
        with rlix.phase("training"):
            step()
        out(event="trained", digest=digest())
