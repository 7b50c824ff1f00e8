"""A stand-in for hack/gpu-interference.py's GPU worker: the same pipe protocol, no GPU.

It answers every (shape, start, seconds, steps per burst, idle seconds) with
a "rate" that encodes what it was sent, so a test can see which worker got
which message.
"""

from __future__ import annotations

from typing import Any


def echo_worker(conn: Any) -> None:
    conn.send("ready")
    while True:
        msg = conn.recv()
        if msg is None:
            return
        shape, _start, seconds, burst, idle_s = msg
        conn.send((len(shape) * 1000 + burst + idle_s + seconds / 100, 1.0))
