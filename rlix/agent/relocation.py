"""Device copies for relocation: CUDA IPC exports in and out of the park file,
and copies held in spare HBM of another GPU of the node.

Why the agent and not the pod: only a privileged process that sees every GPU
can open a pod's memory and hold memory on a GPU the pod was not given.

CUDA IPC's rule shapes the protocol: the exporter must keep its memory alive
until the importer has copied and closed the handle, so a pod frees its
storages only when the agent sends ``release`` (after :meth:`park` returned).

The park file (host memory, see :mod:`rlix.agent.park_space`) is always
written, even for a ``gpu:<i>`` target: an HBM copy lives in the agent's own
process and dies with it, so the host copy is what makes an agent restart
lose nothing. With the HBM copy present, a resume copies from it over
NVLink/PCIe peer-to-peer instead of from host memory.

Only real GPUs run :class:`CudaRelocator` (``hack/gpu-check.py``); simulated
nodes use :class:`SimulatedHbm`, which keeps the bytes in the park file and
models where the memory went in the simulated backend's accounting.

A ``gpu:<i>`` hold is filled from the park file (host -> GPU i) after the park
copy; a resume copies peer-to-peer from it into the pod's GPU.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import mmap
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from rlix.agent.simulated_gpus import SimulatedBackend

MIB = 1 << 20


class RelocationUnsupportedError(Exception):
    """This node cannot do that relocation; the message says why."""


class DeviceRelocator(Protocol):
    def unsupported_reason(self) -> str | None:
        """Why CUDA IPC exports cannot be opened here (None: they can)."""
        ...

    def park(self, cuda: Sequence[Mapping[str, Any]], park_file: Path) -> None:
        """Copy exported device buffers into the park file at their offsets."""
        ...

    def hold(self, owner: str, gpu: int, park_file: Path, size: int) -> None:
        """Keep a copy of the park file in HBM of ``gpu`` (the ``gpu:<i>`` target)."""
        ...

    def unpark(self, owner: str, cuda: Sequence[Mapping[str, Any]], park_file: Path) -> None:
        """Copy into the pod's freshly exported device buffers, from HBM if held."""
        ...

    def drop(self, owner: str) -> None: ...


class SimulatedHbm:
    """Simulated GPUs: no device memory to open; the HBM target is accounting."""

    def __init__(self, backend: SimulatedBackend) -> None:
        self._backend = backend
        self._held: dict[str, int] = {}
        self._lock = threading.Lock()

    def unsupported_reason(self) -> str | None:
        return "simulated GPUs: exports must be host memory (memfd), not CUDA IPC"

    def park(self, cuda: Sequence[Mapping[str, Any]], park_file: Path) -> None:
        if cuda:
            raise RelocationUnsupportedError(self.unsupported_reason())

    def hold(self, owner: str, gpu: int, park_file: Path, size: int) -> None:
        # The bytes stay in the park file; the simulated GPU's memory shows the
        # copy, so the published node state looks as it would on real GPUs.
        self._backend.hold(owner, gpu, max(1, -(-size // MIB)))
        with self._lock:
            self._held[owner] = gpu

    def unpark(self, owner: str, cuda: Sequence[Mapping[str, Any]], park_file: Path) -> None:
        if cuda:
            raise RelocationUnsupportedError(self.unsupported_reason())

    def drop(self, owner: str) -> None:
        with self._lock:
            gpu = self._held.pop(owner, None)
        if gpu is not None:
            self._backend.hold(owner, gpu, 0)


class CudaRelocator:
    """Real GPUs, through the CUDA driver API (cuda-bindings, in the agent extra).

    No torch in the agent: it opens each piece's IPC handle in the primary
    context of the GPU that holds it, copies with the driver's synchronous
    memcpy calls, and closes the handle before the pod is told to free.
    The park file is registered as pinned memory for the copies, so they run
    at link speed instead of through a pageable bounce buffer.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, tuple[int, int, int]] = {}  # owner -> (gpu, dptr, size)
        self._ctx: dict[int, Any] = {}
        self._uuids: dict[str, int] = {}
        self._reason: str | None = None
        try:
            from cuda.bindings import driver

            self._driver: Any = driver
            _cu(driver.cuInit(0), "cuInit")
            (count,) = _cu(driver.cuDeviceGetCount(), "cuDeviceGetCount")
            for i in range(int(count)):
                (dev,) = _cu(driver.cuDeviceGet(i), "cuDeviceGet")
                (uuid,) = _cu(driver.cuDeviceGetUuid(dev), "cuDeviceGetUuid")
                self._uuids[bytes(uuid.bytes).hex()] = i
        except ImportError as exc:
            self._reason = f"cuda-bindings is not installed ({exc}); install rlix[agent]"
        except Exception as exc:  # no driver, no device: say why, do not crash
            self._reason = f"the CUDA driver is not usable here: {exc}"

    def unsupported_reason(self) -> str | None:
        return self._reason

    def _use(self, gpu: int) -> None:
        """Make ``gpu``'s primary context current in this thread."""
        if self._reason is not None:
            raise RelocationUnsupportedError(self._reason)
        d = self._driver
        with self._lock:
            ctx = self._ctx.get(gpu)
            if ctx is None:
                (dev,) = _cu(d.cuDeviceGet(gpu), "cuDeviceGet")
                (ctx,) = _cu(d.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
                self._ctx[gpu] = ctx
        _cu(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")

    def _gpu_of(self, doc: Mapping[str, Any]) -> int:
        uuid = str(doc.get("device_uuid", ""))
        if self._reason is not None:
            raise RelocationUnsupportedError(self._reason)
        if uuid not in self._uuids:
            raise RelocationUnsupportedError(f"no GPU with UUID {uuid} is visible to the agent")
        return self._uuids[uuid]

    def _open(self, doc: Mapping[str, Any]) -> tuple[int, int]:
        """Open a piece's handle; returns (gpu, device pointer of the piece)."""
        d = self._driver
        gpu = self._gpu_of(doc)
        raw = base64.b64decode(str(doc["handle"]), validate=True)
        if len(raw) != IPC_HANDLE_BYTES:
            raise ValueError(f"an IPC handle has {IPC_HANDLE_BYTES} bytes, got {len(raw)}")
        handle = d.CUipcMemHandle()
        ctypes.memmove(handle.getPtr(), raw, IPC_HANDLE_BYTES)
        self._use(gpu)
        flags = d.CUipcMem_flags.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
        (base,) = _cu(d.cuIpcOpenMemHandle(handle, flags), "cuIpcOpenMemHandle")
        return gpu, int(base) + int(doc["alloc_offset"])

    def _close(self, gpu: int, ptr: int, doc: Mapping[str, Any]) -> None:
        self._use(gpu)
        base = ptr - int(doc["alloc_offset"])
        _cu(self._driver.cuIpcCloseMemHandle(base), "cuIpcCloseMemHandle")

    @contextlib.contextmanager
    def _pinned(self, park_file: Path) -> Iterator[int]:
        """The park file mapped and page-locked; yields its host address."""
        d = self._driver
        with park_file.open("r+b") as f, mmap.mmap(f.fileno(), 0) as m:
            view = (ctypes.c_char * len(m)).from_buffer(m)
            addr = ctypes.addressof(view)
            registered = False
            try:
                result = d.cuMemHostRegister(addr, len(m), 0)
                registered = _ok(result)  # pageable copies still work if this is refused
                yield addr
            finally:
                if registered:
                    d.cuMemHostUnregister(addr)
                del view

    def park(self, cuda: Sequence[Mapping[str, Any]], park_file: Path) -> None:
        if not cuda:
            return
        if self._reason is not None:
            raise RelocationUnsupportedError(self._reason)
        d = self._driver
        with self._pinned(park_file) as host:
            for doc in cuda:
                gpu, src = self._open(doc)
                try:
                    _cu(
                        d.cuMemcpyDtoH(host + int(doc["offset"]), src, int(doc["nbytes"])),
                        "cuMemcpyDtoH",
                    )
                finally:
                    self._close(gpu, src, doc)

    def hold(self, owner: str, gpu: int, park_file: Path, size: int) -> None:
        if self._reason is not None:
            raise RelocationUnsupportedError(self._reason)
        if not 0 <= gpu < len(self._uuids):
            raise RelocationUnsupportedError(f"gpu {gpu} is not visible to the agent")
        d = self._driver
        self._use(gpu)
        (dptr,) = _cu(d.cuMemAlloc(max(size, 1)), "cuMemAlloc")
        try:
            with self._pinned(park_file) as host:
                _cu(d.cuMemcpyHtoD(dptr, host, size), "cuMemcpyHtoD")
        except BaseException:
            d.cuMemFree(dptr)
            raise
        with self._lock:
            self._held[owner] = (gpu, int(dptr), size)

    def unpark(self, owner: str, cuda: Sequence[Mapping[str, Any]], park_file: Path) -> None:
        if not cuda:
            return
        if self._reason is not None:
            raise RelocationUnsupportedError(self._reason)
        d = self._driver
        with self._lock:
            held = self._held.get(owner)
        with self._pinned(park_file) as host:
            for doc in cuda:
                gpu, dst = self._open(doc)
                off, n = int(doc["offset"]), int(doc["nbytes"])
                try:
                    if held is not None:  # peer copy from the HBM copy (NVLink/PCIe P2P)
                        hold_gpu, hold_ptr, _ = held
                        _cu(
                            d.cuMemcpyPeer(
                                dst, self._ctx[gpu], hold_ptr + off, self._ctx[hold_gpu], n
                            ),
                            "cuMemcpyPeer",
                        )
                    else:
                        _cu(d.cuMemcpyHtoD(dst, host + off, n), "cuMemcpyHtoD")
                finally:
                    self._close(gpu, dst, doc)

    def drop(self, owner: str) -> None:
        with self._lock:
            held = self._held.pop(owner, None)
        if held is not None:
            gpu, dptr, _ = held
            self._use(gpu)
            self._driver.cuMemFree(dptr)


IPC_HANDLE_BYTES = 64


def _ok(result: Any) -> bool:
    err = result[0] if isinstance(result, tuple) else result
    return int(err) == 0


def _cu(result: Any, call: str) -> tuple[Any, ...]:
    """Unpack a cuda-bindings result tuple, raising with the driver's message."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise RelocationUnsupportedError(f"{call} failed: {getattr(err, 'name', err)}")
    return tuple(rest)
