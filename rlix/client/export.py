"""Hand parked memory to the node agent (relocation), and take it back.

Two kinds of export, one layout: every piece gets an offset in one flat
*export* (4 KiB aligned), which is also the layout of the agent's park file.

* ``memfd`` (host tensors; the CPU tests): the pieces are copied into one
  memfd, sealed against shrinking and growing, and the descriptor goes to the
  agent over the socket (SCM_RIGHTS). A descriptor cannot be forged: the agent
  reads only what this process chose to give it. On resume the client exports
  an empty sealed memfd of the same size, the agent fills it, and the client
  copies each piece back into its storage.
* ``cuda-ipc`` (device tensors): each storage's CUDA IPC handle (see
  :func:`cuda_ipc_doc`), which the agent (it sees every GPU of the node) opens
  to copy the bytes to host memory or to another GPU, and on resume into the
  freshly allocated storages. The agent's copies run over PCIe/NVLink.

The pod frees its memory only when the agent says it holds a copy
(``release``): until then an agent crash leaves the pod exactly as it was.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import fcntl
import mmap
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

ALIGN = 4096
SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW


def layout(sizes: Sequence[int]) -> tuple[list[int], int]:
    """Aligned offsets for pieces of these sizes, and the export's total size."""
    offsets: list[int] = []
    end = 0
    for n in sizes:
        start = -(-end // ALIGN) * ALIGN
        offsets.append(start)
        end = start + n
    return offsets, end


@dataclass
class MemfdExport:
    """One sealed memfd mapped into this process."""

    fd: int
    size: int
    _map: mmap.mmap | None = field(default=None, repr=False)

    @classmethod
    def create(cls, size: int) -> MemfdExport:
        fd = os.memfd_create("rlix-export", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, size)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
            mapping = mmap.mmap(fd, size) if size else None
        except BaseException:
            os.close(fd)
            raise
        return cls(fd=fd, size=size, _map=mapping)

    def tensor(self, torch: Any) -> Any:
        """The whole export as a flat uint8 tensor sharing its memory."""
        if self._map is None:
            return torch.empty(0, dtype=torch.uint8)
        return torch.frombuffer(self._map, dtype=torch.uint8)

    def close(self) -> None:
        if self._map is not None:
            # A tensor view still alive keeps the mapping; it goes with the view.
            with contextlib.suppress(BufferError):
                self._map.close()
            self._map = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def cuda_ipc_doc(view: Any) -> dict[str, Any]:
    """A CUDA IPC handle for a device byte view, as JSON.

    Raw driver calls (cuda-bindings, which torch itself depends on) rather than
    torch's ``_share_cuda_``: torch's sharing puts a reference counter in a
    shared-memory file of *this* container's /dev/shm, which the agent in its
    own container cannot open, and without its decrement the freed block
    would never leave torch's IPC limbo. A handle names the whole allocation
    (cudaMalloc'd segment); ``alloc_offset`` locates the piece inside it.
    The default caching allocator is required: expandable segments (VMM)
    cannot be exported this way, and the driver says so.
    """
    import torch
    from cuda.bindings import driver

    torch.cuda.set_device(view.device)  # the primary context, current in this thread
    ptr = int(view.data_ptr())
    base, _ = _cu(driver.cuMemGetAddressRange(ptr), "cuMemGetAddressRange")
    (handle,) = _cu(driver.cuIpcGetMemHandle(base), "cuIpcGetMemHandle")
    (ordinal,) = _cu(
        driver.cuPointerGetAttribute(
            driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr
        ),
        "cuPointerGetAttribute",
    )
    (device,) = _cu(driver.cuDeviceGet(int(ordinal)), "cuDeviceGet")
    (uuid,) = _cu(driver.cuDeviceGetUuid(device), "cuDeviceGetUuid")
    return {
        "device_uuid": bytes(uuid.bytes).hex(),
        "handle": base64.b64encode(ctypes.string_at(handle.getPtr(), IPC_HANDLE_BYTES)).decode(),
        "alloc_offset": ptr - int(base),
    }


IPC_HANDLE_BYTES = 64


def _cu(result: Any, call: str) -> tuple[Any, ...]:
    """Unpack a cuda-bindings result tuple, raising with the driver's message."""
    from cuda.bindings import driver

    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != driver.CUresult.CUDA_SUCCESS:
        _, text = driver.cuGetErrorString(err)
        raise RuntimeError(f"{call} failed: {err.name}: {text.decode() if text else ''}")
    return tuple(rest)


@dataclass
class _Piece:
    name: str  # "<hook>/<key>"
    offset: int
    nbytes: int
    on_device: bool


class Relocation:
    """One relocated suspension of this process, from export to resume.

    States: ``exported`` (the agent has been handed the memory; it is still
    here) -> ``released`` (the agent holds the only copy; storages are empty)
    -> ``regrown`` (storages reallocated and exported empty for the agent to
    fill) -> resumed (:meth:`finish`).
    """

    def __init__(self, hooks: Sequence[Any]) -> None:
        import torch

        self._torch: Any = torch
        self.hooks = list(hooks)
        self.pieces: list[_Piece] = []
        self.size = 0
        self.state = "new"
        self._memfd: MemfdExport | None = None

    # -- suspend ---------------------------------------------------------------
    def export(self) -> tuple[list[dict[str, Any]], dict[str, Any], list[int]]:
        """Export every hook's storages: manifest entries, export doc, descriptors."""
        from rlix.client.checksums import fingerprint

        named: list[tuple[str, Any]] = []
        try:
            for hook in self.hooks:
                named += [(f"{hook.name}/{key}", view) for key, view in hook.export_views()]
        except BaseException:
            for hook in self.hooks:
                hook.cancel_export()
            raise
        offsets, self.size = layout([int(v.numel()) for _, v in named])
        self.pieces = [
            _Piece(name, off, int(v.numel()), v.device.type == "cuda")
            for (name, v), off in zip(named, offsets, strict=True)
        ]
        entries = [
            {"name": p.name, "nbytes": p.nbytes, "checksum": fingerprint(v), "offset": p.offset}
            for p, (_, v) in zip(self.pieces, named, strict=True)
        ]
        doc, fds = self._export_doc([v for _, v in named], fill=True)
        self.state = "exported"
        return entries, doc, fds

    def release(self) -> None:
        """The agent holds a copy: free the memory and the export."""
        if self.state != "exported":
            raise ValueError(f"release in state {self.state!r}")
        for hook in self.hooks:
            hook.free_exported()
        self._close_memfd()
        self.state = "released"

    # -- resume ----------------------------------------------------------------
    def regrow(self) -> tuple[dict[str, Any] | None, list[int]]:
        """Reallocate and export empty buffers; ``None`` when nothing was freed."""
        if self.state == "exported":
            return None, []  # never released: the memory is still here
        if self.state not in ("released", "regrown"):
            raise ValueError(f"regrow in state {self.state!r}")
        views = self._regrown_views()
        self._close_memfd()
        doc, fds = self._export_doc(views, fill=False)
        self.state = "regrown"
        return doc, fds

    def finish(self) -> dict[str, str]:
        """Copy back what the agent filled in (host pieces) and fingerprint;
        :meth:`done` once the fingerprints are accepted."""
        if self.state == "released":
            raise ValueError("the agent must regrow this process before resuming it")
        if self.state == "regrown" and self._memfd is not None:
            src = self._memfd.tensor(self._torch)
            for piece, view in zip(self.pieces, self._regrown_views(), strict=True):
                if not piece.on_device:
                    view.copy_(src[piece.offset : piece.offset + piece.nbytes])
            del src
        checksums: dict[str, str] = {}
        for hook in self.hooks:
            for key, checksum in hook.finish_import().items():
                checksums[f"{hook.name}/{key}"] = checksum
        return checksums

    def done(self) -> None:
        """The restore was verified: forget the export (a failed one may be retried)."""
        self._close_memfd()
        for hook in self.hooks:
            hook.cancel_export()
        self.state = "done"

    # -- helpers ---------------------------------------------------------------
    def _regrown_views(self) -> list[Any]:
        """Every piece's storage at full size (regrow is idempotent), in export order."""
        return [view for hook in self.hooks for _, view in hook.regrow()]

    def _export_doc(self, views: Sequence[Any], *, fill: bool) -> tuple[dict[str, Any], list[int]]:
        host = [(p, v) for p, v in zip(self.pieces, views, strict=True) if not p.on_device]
        doc: dict[str, Any] = {"size": self.size, "memfd": None, "cuda": []}
        fds: list[int] = []
        if host:
            # One memfd over the whole layout: device pieces leave holes, and a
            # hole in a memfd costs no memory.
            self._memfd = MemfdExport.create(self.size)
            if fill:
                dst = self._memfd.tensor(self._torch)
                for piece, view in host:
                    dst[piece.offset : piece.offset + piece.nbytes].copy_(view)
                del dst
            doc["memfd"] = {"fd": 0}
            fds.append(self._memfd.fd)
        for piece, view in zip(self.pieces, views, strict=True):
            if piece.on_device:
                entry = cuda_ipc_doc(view)
                entry.update(name=piece.name, offset=piece.offset, nbytes=piece.nbytes)
                doc["cuda"].append(entry)
        return doc, fds

    def _close_memfd(self) -> None:
        if self._memfd is not None:
            self._memfd.close()
            self._memfd = None
