"""The host-memory fingerprint both ends compute: BLAKE2b over the bytes.

It lives in the core because the client (over its parked tensors) and the
agent (over a relocated copy it holds, before it lets the client free the
original) must produce the same string for the same bytes. The prefix names
the algorithm and the length, so fingerprints of different kinds or sizes can
never compare equal by accident (see ``rlix.client.checksums`` for the device
one, ``ws64``).
"""

from __future__ import annotations

import hashlib
from typing import Any

HOST_ALGORITHM = "b2b"


def host_digest(data: Any) -> str:
    """``b2b:<nbytes>:<hex>`` of a bytes-like object (buffer protocol), read in place."""
    view = memoryview(data).cast("B")
    n = view.nbytes
    if n == 0:
        return f"{HOST_ALGORITHM}:0:"
    return f"{HOST_ALGORITHM}:{n}:{hashlib.blake2b(view, digest_size=16).hexdigest()}"
