"""Park torch modules and optimizers in (pinned) host memory, bit for bit.

Why storages and not tensors: parameters are often views into one flat buffer
and optimizer state refers to parameters by identity. Parking works on each
distinct *storage*: its bytes are copied into a preallocated host pool, then the
storage is resized to zero, which returns the device memory while every tensor
object, view and optimizer reference stays valid. Restore resizes the storage
back and copies the bytes in; nothing outside notices but the memory.

Why a preallocated pool: allocating pinned memory on every suspend (what
published tools do) costs more than the copy itself; the pool is sized at
registration (or grown once, on the first suspend) and reused.

``torch`` is imported lazily, so ``import rlix`` stays free of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from rlix.client.checksums import fingerprint
from rlix.client.hooks import Parked, Restored


class PinnedPool:
    """One host buffer handed out by a bump allocator, reset on each restore.

    Pinned (page-locked) when CUDA is available, so device-to-host copies can
    run asynchronously at link speed; plain host memory otherwise (CPU tests).
    """

    ALIGN = 4096

    def __init__(self, nbytes: int = 0) -> None:
        import torch

        self._torch: Any = torch
        self._buf: Any = None
        self._offset = 0
        if nbytes:
            self.reserve(nbytes)

    @property
    def capacity(self) -> int:
        return 0 if self._buf is None else int(self._buf.numel())

    @property
    def pinned(self) -> bool:
        return self._buf is not None and bool(self._buf.is_pinned())

    def reserve(self, nbytes: int) -> None:
        """Make sure ``nbytes`` fit; only ever grows (a one-time cost)."""
        if nbytes <= self.capacity:
            return
        if self._offset:
            raise RuntimeError("cannot grow the pool while it holds parked memory")
        torch = self._torch
        pin = bool(torch.cuda.is_available())
        self._buf = None  # release the old buffer before allocating the new one
        self._buf = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pin)

    def take(self, nbytes: int) -> Any:
        start = -(-self._offset // self.ALIGN) * self.ALIGN
        if start + nbytes > self.capacity:
            raise MemoryError(f"pool of {self.capacity} bytes cannot take {nbytes} more")
        self._offset = start + nbytes
        return self._buf[start : start + nbytes]

    def reset(self) -> None:
        self._offset = 0

    @classmethod
    def size_for(cls, sizes: Iterable[int]) -> int:
        return sum(-(-n // cls.ALIGN) * cls.ALIGN for n in sizes)


def _byte_view(storage: Any, torch: Any) -> Any:
    """A flat uint8 tensor over a whole untyped storage."""
    t = torch.empty(0, dtype=torch.uint8, device=storage.device)
    t.set_(storage, 0, (storage.nbytes(),), (1,))
    return t


class TorchOffload:
    """The offload hook for torch modules and optimizers (``rlix.register_torch``).

    It parks in its own pool (``offload``/``restore``) or, when the agent
    relocates the pod, exports its storages for the agent to copy
    (``export_views``, ``free_exported``, ``regrow``, ``finish_import``).
    """

    relocatable = True

    def __init__(
        self,
        name: str,
        *,
        modules: Iterable[Any] = (),
        optimizers: Iterable[Any] = (),
        tensors: Iterable[Any] = (),
        pool: PinnedPool | None = None,
        reserve_bytes: int | None = None,
    ) -> None:
        import torch

        self.name = name
        self._torch: Any = torch
        self._modules = list(modules)
        self._optimizers = list(optimizers)
        self._tensors = list(tensors)
        self._pool = pool or PinnedPool()
        # Storages parked by the last offload: (key, storage, host copy, nbytes).
        self._parked: list[tuple[str, Any, Any, int]] = []
        # Storages handed to the agent by the last export: (key, storage, nbytes).
        self._exported: list[tuple[str, Any, int]] = []
        size = self.live_bytes() if reserve_bytes is None else reserve_bytes
        self._pool.reserve(size)

    def _storages(self) -> Iterator[tuple[str, Any]]:
        """Each distinct, non-empty storage once, under a stable name."""
        seen: set[int] = set()

        def named() -> Iterator[tuple[str, Any]]:
            for mi, m in enumerate(self._modules):
                for n, p in m.named_parameters():
                    yield f"m{mi}.{n}", p
                    if p.grad is not None:
                        yield f"m{mi}.{n}.grad", p.grad
                for n, b in m.named_buffers():
                    yield f"m{mi}.{n}", b
            for oi, opt in enumerate(self._optimizers):
                # Parameter order within param_groups is stable; state is keyed by them.
                index = 0
                for group in opt.param_groups:
                    for p in group["params"]:
                        for k, v in opt.state.get(p, {}).items():
                            if isinstance(v, self._torch.Tensor):
                                yield f"o{oi}.{index}.{k}", v
                        index += 1
            for ti, t in enumerate(self._tensors):
                yield f"t{ti}", t

        for key, tensor in named():
            storage = tensor.untyped_storage()
            ptr = storage.data_ptr()
            if storage.nbytes() == 0 or ptr in seen:
                continue
            if storage.device.type == "cpu" and not storage.resizable():
                # Memory-mapped weights (safetensors) or memory shared with numpy:
                # host memory we could not free anyway, and never device memory.
                continue
            seen.add(ptr)
            yield key, storage

    def live_bytes(self) -> int:
        return PinnedPool.size_for(s.nbytes() for _, s in self._storages())

    def offload(self) -> Parked:
        torch = self._torch
        if self._parked:
            raise RuntimeError(f"hook {self.name!r} is already parked")
        storages = list(self._storages())
        self._pool.reserve(PinnedPool.size_for(s.nbytes() for _, s in storages))
        parked: dict[str, tuple[int, str]] = {}
        for key, storage in storages:
            n = storage.nbytes()
            src = _byte_view(storage, torch)
            parked[key] = (n, fingerprint(src))
            host = self._pool.take(n)
            host.copy_(src, non_blocking=src.is_cuda)
            self._parked.append((key, storage, host, n))
        if torch.cuda.is_available():
            torch.cuda.synchronize()  # the copies must land before the memory goes
        for _, storage, _, _ in self._parked:
            storage.resize_(0)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()  # hand the freed blocks back to the driver
        return parked

    def restore(self) -> Restored:
        torch = self._torch
        restored: dict[str, str] = {}
        for _, storage, host, n in self._parked:
            storage.resize_(n)
            _byte_view(storage, torch).copy_(host, non_blocking=storage.device.type == "cuda")
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        for key, storage, _, _ in self._parked:
            restored[key] = fingerprint(_byte_view(storage, torch))
        self._parked = []
        self._pool.reset()
        return restored

    # -- relocation (the agent holds the copy; see rlix.client.export) ---------
    def export_views(self) -> list[tuple[str, Any]]:
        """Each storage as a flat byte view, to be copied by the agent; the
        memory stays in place until :meth:`free_exported`."""
        if self._parked or self._exported:
            raise RuntimeError(f"hook {self.name!r} is already parked")
        self._exported = [(key, st, st.nbytes()) for key, st in self._storages()]
        return [(key, _byte_view(st, self._torch)) for key, st, _ in self._exported]

    def free_exported(self) -> None:
        torch = self._torch
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        for _, storage, _ in self._exported:
            storage.resize_(0)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()  # the agent has closed its handles: return the blocks

    def regrow(self) -> list[tuple[str, Any]]:
        """Reallocate every exported storage (contents undefined until filled)."""
        for _, storage, n in self._exported:
            if storage.nbytes() != n:
                storage.resize_(n)
        return [(key, _byte_view(st, self._torch)) for key, st, _ in self._exported]

    def finish_import(self) -> Restored:
        """The storages hold their bytes again: fingerprint them."""
        torch = self._torch
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return {key: fingerprint(_byte_view(st, torch)) for key, st, _ in self._exported}

    def cancel_export(self) -> None:
        """Forget the export (restored and verified, or never released)."""
        self._exported = []
