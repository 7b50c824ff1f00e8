"""The demo's simulated trainer parks and restores its stand-in device memory.

Its hooks are plain bytes, not torch tensors; `make demo` never suspended one
until the chaos run did, and the first suspend failed inside the hook.
"""

from __future__ import annotations

import pytest

from rlix.demo.trainer import DeviceBuffer


def test_offload_then_restore_is_bit_for_bit() -> None:
    buffer = DeviceBuffer(1 << 16, seed=7)
    original = bytes(buffer.device or b"")
    parked = buffer.offload()
    assert buffer.device is None
    ((nbytes, checksum),) = parked.values()
    assert nbytes == len(original)
    restored = buffer.restore()
    assert restored == {"weights": checksum}
    assert bytes(buffer.device or b"") == original


def test_a_corrupted_restore_does_not_match() -> None:
    buffer = DeviceBuffer(4096, seed=1)
    ((_, checksum),) = buffer.offload().values()
    assert buffer.parked is not None
    buffer.parked = b"\x00" + buffer.parked[1:]
    assert buffer.restore() != {"weights": checksum}


def test_suspending_twice_is_refused() -> None:
    buffer = DeviceBuffer(16, seed=0)
    buffer.offload()
    with pytest.raises(AssertionError, match="suspended twice"):
        buffer.offload()
