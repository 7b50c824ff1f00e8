"""The relocation copy engine on CPU tensors (the CUDA IPC path runs in gpu-check)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from rlix.agent.relocation import Relocator  # noqa: E402


def test_park_to_host_and_back_is_exact() -> None:
    src = [torch.randn(1000), torch.randint(0, 9, (7, 3))]
    relocator = Relocator()
    parked = relocator.park(src, "host")
    assert all(p.data_ptr() != s.data_ptr() for p, s in zip(parked, src, strict=True))
    fresh = [torch.empty_like(s) for s in src]
    relocator.unpark(parked, fresh)
    assert all(torch.equal(a, b) for a, b in zip(src, fresh, strict=True))


def test_bad_targets_and_mismatched_destinations_are_refused() -> None:
    relocator = Relocator()
    with pytest.raises(ValueError, match="'host' or 'cuda:<index>'"):
        relocator.park([torch.zeros(1)], "gpu1")
    parked = relocator.park([torch.zeros(4)], "host")
    with pytest.raises(ValueError, match="1 parked buffers, 2 destinations"):
        relocator.unpark(parked, [torch.zeros(4), torch.zeros(4)])
    with pytest.raises(ValueError, match="shape/dtype mismatch"):
        relocator.unpark(parked, [torch.zeros(5)])
