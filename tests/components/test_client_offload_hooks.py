"""Offload hooks in-process: torch storages really leave and come back bit for bit,
the fingerprint notices corruption, failed suspends roll back, engines duck-type."""

from __future__ import annotations

from typing import Any

import pytest

from rlix.client.engines import EngineHook, engine_kind
from rlix.client.hooks import CallableHook, Parked, Restored
from rlix.client.runtime import Runtime
from rlix.core import agent_protocol as proto

torch = pytest.importorskip("torch")

from rlix.client.checksums import fingerprint  # noqa: E402
from rlix.client.torch_offload import PinnedPool, TorchOffload  # noqa: E402


def _model_and_optimizer() -> tuple[Any, Any]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.BatchNorm1d(64))
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(8, 32)).sum().backward()
    opt.step()
    return model, opt


def _snapshot(model: Any, opt: Any) -> list[Any]:
    out = [t.detach().clone() for t in model.state_dict().values()]
    out += [p.grad.clone() for p in model.parameters()]
    for st in opt.state.values():
        out += [v.clone() for v in st.values() if isinstance(v, torch.Tensor)]
    return out


def test_offload_frees_storage_and_restore_is_bit_for_bit() -> None:
    model, opt = _model_and_optimizer()
    before = _snapshot(model, opt)
    weight = model[0].weight  # identity must survive (the optimizer refers to it)
    hook = TorchOffload("t", modules=[model], optimizers=[opt])
    parked = hook.offload()
    assert weight.untyped_storage().nbytes() == 0
    assert all(len(p.untyped_storage()) == 0 for p in model.parameters())
    assert sum(n for n, _ in parked.values()) >= sum(t.nbytes for t in before)
    restored = hook.restore()
    assert restored == {k: c for k, (_, c) in parked.items()}
    assert model[0].weight is weight
    after = _snapshot(model, opt)
    assert all(
        torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))
        for a, b in zip(before, after, strict=True)
    )


def test_offload_twice_without_restore_is_refused() -> None:
    model, opt = _model_and_optimizer()
    hook = TorchOffload("t", modules=[model], optimizers=[opt])
    hook.offload()
    with pytest.raises(RuntimeError, match="already parked"):
        hook.offload()
    hook.restore()


def test_shared_storage_is_parked_once() -> None:
    flat = torch.arange(64, dtype=torch.float32)
    a, b = flat[:32], flat[32:]
    hook = TorchOffload("t", tensors=[a, b, flat])
    assert len(hook.offload()) == 1
    hook.restore()
    assert torch.equal(flat, torch.arange(64, dtype=torch.float32))


@pytest.mark.parametrize("algorithm", ["b2b", "ws64"])
def test_fingerprint_sees_flips_swaps_and_tails(algorithm: str) -> None:
    data = torch.arange(4099, dtype=torch.int64).to(torch.uint8)  # not a multiple of 4

    def fp(t: Any) -> str:
        return fingerprint(t, algorithm=algorithm)

    base = fp(data)
    assert base.startswith(f"{algorithm}:4099:")
    assert fp(data.clone()) == base
    flipped = data.clone()
    flipped[4097] ^= 1  # in the tail
    swapped = data.clone()
    swapped[0:4], swapped[4:8] = data[4:8].clone(), data[0:4].clone()  # reordered words
    one_bit = data.clone()
    one_bit[100] ^= 0x80
    assert len({base, fp(flipped), fp(swapped), fp(one_bit)}) == 4


def test_ws64_is_chunk_size_independent_and_position_sensitive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rlix.client import checksums

    data = torch.randint(0, 255, (4 * 1000 + 3,), dtype=torch.uint8)
    whole = fingerprint(data, algorithm="ws64")
    monkeypatch.setattr(checksums, "CHUNK_WORDS", 64)  # many chunks, same answer
    assert fingerprint(data, algorithm="ws64") == whole
    halves = torch.cat([data[2000:4000], data[:2000], data[4000:]])  # equal-size chunks swapped
    assert fingerprint(halves, algorithm="ws64") != whole


def test_fingerprint_rejects_what_it_cannot_read() -> None:
    with pytest.raises(ValueError, match="flat, contiguous uint8"):
        fingerprint(torch.zeros(4))
    with pytest.raises(ValueError, match="flat, contiguous uint8"):
        fingerprint(torch.zeros(8, dtype=torch.uint8)[::2])
    with pytest.raises(ValueError, match="unknown fingerprint algorithm"):
        fingerprint(torch.zeros(8, dtype=torch.uint8), algorithm="md5")


def test_pool_is_reused_and_refuses_overflow() -> None:
    pool = PinnedPool(8192)
    a = pool.take(10)
    b = pool.take(10)
    assert b.data_ptr() - a.data_ptr() == PinnedPool.ALIGN
    with pytest.raises(MemoryError, match="cannot take"):
        pool.take(8192)
    with pytest.raises(RuntimeError, match="while it holds parked memory"):
        pool.reserve(1 << 20)
    pool.reset()
    pool.reserve(1 << 20)
    assert pool.capacity == 1 << 20
    assert not pool.pinned  # no CUDA here: plain host memory


class _Failing:
    name = "broken"

    def offload(self) -> Parked:
        raise RuntimeError("disk on fire")

    def restore(self) -> Restored:
        raise AssertionError("never parked, never restored")


def test_a_failed_suspend_restores_what_was_already_parked() -> None:
    model, opt = _model_and_optimizer()
    before = _snapshot(model, opt)
    rt = Runtime(None)
    rt.register(TorchOffload("torch", modules=[model], optimizers=[opt]))
    rt.register(_Failing())
    with pytest.raises(RuntimeError, match="disk on fire"):
        rt._on_agent_request(proto.Request(id=1, op=proto.OP_SUSPEND, args={}))
    assert not rt.suspended
    assert all(torch.equal(a, b) for a, b in zip(before, _snapshot(model, opt), strict=True))


def test_runtime_suspend_resume_round_trip_and_manifest_check() -> None:
    log: list[str] = []
    rt = Runtime(None)
    rt.register(CallableHook("kv", lambda: {"blocks": (10, "c1")}, lambda: {"blocks": "c1"}))
    rt.register(CallableHook("w", lambda: log.append("off") or {}, lambda: log.append("on") or {}))
    out = proto.decode(rt._on_agent_request(proto.Request(1, proto.OP_SUSPEND, {})))
    assert isinstance(out, proto.Reply) and out.ok
    manifest = out.body["manifest"]
    assert manifest == {
        "where": "self",
        "entries": [{"name": "kv/blocks", "nbytes": 10, "checksum": "c1"}],
    }
    assert rt.suspended
    wrong = {"where": "host", "entries": [{"name": "kv/other", "nbytes": 1, "checksum": "x"}]}
    with pytest.raises(proto.ProtocolError, match="resume manifest names"):
        rt._on_agent_request(proto.Request(2, proto.OP_RESUME, {"manifest": wrong}))
    back = proto.decode(
        rt._on_agent_request(proto.Request(3, proto.OP_RESUME, {"manifest": manifest}))
    )
    assert isinstance(back, proto.Reply) and back.body["checksums"] == {"kv/blocks": "c1"}
    assert log == ["off", "on"]
    assert not rt.suspended
    with pytest.raises(proto.ProtocolError, match="not suspended"):
        rt._on_agent_request(proto.Request(4, proto.OP_RESUME, {"manifest": manifest}))


class _Vllm:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def sleep(self, level: int = 1) -> None:
        self.calls.append(f"sleep{level}")

    def wake_up(self) -> None:
        self.calls.append("wake")


class _Sglang:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def release_memory_occupation(self) -> None:
        self.calls.append("release")

    def resume_memory_occupation(self) -> None:
        self.calls.append("resume")


def test_engines_are_found_by_duck_typing() -> None:
    vllm, sgl = _Vllm(), _Sglang()
    assert (engine_kind(vllm), engine_kind(sgl), engine_kind(object())) == ("vllm", "sglang", None)
    hook = EngineHook("gen", vllm, sleep_level=2)
    assert hook.offload() == {"engine": (0, "engine:vllm")}
    assert hook.restore() == {"engine": "engine:vllm"}
    EngineHook("gen", sgl).offload()
    assert (vllm.calls, sgl.calls) == (["sleep2", "wake"], ["release"])
    with pytest.raises(TypeError, match="neither sleep"):
        EngineHook("x", object())


def test_host_memory_that_cannot_be_freed_is_left_in_place() -> None:
    """numpy-shared or memory-mapped host tensors are not device memory: skip, don't fail."""
    m = torch.nn.Linear(4, 4)
    m.weight.detach().numpy()  # torch marks the storage as not resizable from here on
    before = m.weight.detach().clone()
    hook = TorchOffload("t", modules=[m])
    parked = hook.offload()
    assert sorted(parked) == ["m0.bias"]
    assert m.bias.untyped_storage().nbytes() == 0
    assert torch.equal(m.weight.detach(), before)
    restored = hook.restore()
    assert restored["m0.bias"] == parked["m0.bias"][1]
