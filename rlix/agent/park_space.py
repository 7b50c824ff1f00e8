"""Host memory the agent owns for relocated pods: one park file per process.

Why files and not the agent's own heap: a relocated pod has freed its memory,
so the parked copy is the only one left, and it must outlive an agent crash or
upgrade. A file on a tmpfs (``--park-dir``, a hostPath such as
``/dev/shm/rlix-agent``) is host memory that stays when the agent's process
dies; the restarted agent finds it at the same path (``<uid>/<pid>.park``).

Why the agent preallocates (``posix_fallocate``) before the copy: tmpfs pages
are charged to the memory cgroup of whoever first touches them. Allocated by
the agent, the parked bytes count against the node agent's budget, not the
preempted pod's memory limit.

Descriptors handed in by a pod are untrusted: each must be a sealed memfd
(``F_SEAL_SHRINK|F_SEAL_GROW``) of exactly the announced size, so the pod
cannot truncate it under the agent's mapping (which would kill the agent with
SIGBUS) and cannot pass a pipe, a socket or a file on a slow filesystem.

How much a pod may make the agent hold is bounded too (``ExportRoom``): the
size is the pod's to announce, and the park file is host memory charged to the
agent, so an unbounded export (a sparse memfd costs its sender nothing) could
take the node's RAM. What is parked is device memory, so one suspend's exports
may hold no more than the pod held on its GPUs when asked (NVML per process),
or, where that could not be read, than this node's GPUs have at all.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import re
import stat
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from rlix.core.digests import HOST_ALGORITHM, host_digest

_UID = re.compile(r"^[0-9a-f-]{1,64}$")
_COPY_CHUNK = 64 << 20  # bounded slices keep the copy interruptible and cache-friendly
REQUIRED_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW


class ExportError(ValueError):
    """A descriptor a pod handed in is not an acceptable export."""


class ExportRoom:
    """What one suspend's exports may still make the agent hold (``export_room``)."""

    def __init__(self, nbytes: int, bound: str) -> None:
        self.left = nbytes
        self.bound = bound  # the bound in words, for a refusal

    def take(self, nbytes: int) -> None:
        """Count an export against the room, or refuse it before anything is allocated."""
        if nbytes > self.left:
            raise ExportError(
                f"the export announces {nbytes} bytes, more than the {self.left} left of "
                f"{self.bound}"
            )
        self.left -= nbytes


def export_room(held_mib: Mapping[int, int], gpu_memory_mib: Sequence[int]) -> ExportRoom:
    """The room for a pod's exports: what it held per GPU (MiB) when asked, or
    where that is unknown (empty: NVML could not attribute it), the memory of
    every GPU of the node; none where neither could be read."""
    held = sum(held_mib.values())
    if held > 0:
        return ExportRoom(held << 20, f"the {held} MiB the pod held on its GPUs when asked")
    total = sum(gpu_memory_mib)
    if total > 0:
        return ExportRoom(
            total << 20,
            f"the {total} MiB this node's GPUs have (what the pod held could not be read)",
        )
    return ExportRoom(0, "nothing: neither what the pod held nor this node's GPUs could be read")


def check_export_fd(fd: int, nbytes: int) -> None:
    """Refuse anything but a sealed memfd of exactly ``nbytes`` bytes."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise ExportError("the exported descriptor is not a regular file (need a memfd)")
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    except OSError:
        raise ExportError("the exported descriptor is not a memfd (it takes no seals)") from None
    if seals & REQUIRED_SEALS != REQUIRED_SEALS:
        raise ExportError("the exported memfd must be sealed against shrinking and growing")
    if st.st_size != nbytes:
        raise ExportError(f"the exported memfd holds {st.st_size} bytes, {nbytes} announced")


def _copy(dst: memoryview, src: memoryview) -> None:
    for start in range(0, len(src), _COPY_CHUNK):
        dst[start : start + _COPY_CHUNK] = src[start : start + _COPY_CHUNK]


class ParkSpace:
    """Park files under ``root``: ``<root>/<pod-uid>/<pid>.park``."""

    def __init__(self, root: Path) -> None:
        # Created on first use: an agent that never relocates writes nothing there.
        self.root = root

    def path(self, uid: str, pid: int) -> Path:
        if not _UID.match(uid):
            raise ValueError(f"not a pod UID: {uid!r}")
        return self.root / uid / f"{pid}.park"

    def size(self, uid: str, pid: int) -> int | None:
        """Bytes parked for this process, or None when there is no park file."""
        try:
            return self.path(uid, pid).stat().st_size
        except FileNotFoundError:
            return None

    def allocate(self, uid: str, pid: int, nbytes: int) -> Path:
        """An empty (zeroed) park file, for exports that are device memory only."""
        return self._write(uid, pid, None, nbytes)

    def park_from_fd(self, uid: str, pid: int, fd: int, nbytes: int) -> Path:
        """Copy a pod's exported memfd into a new park file (atomically named)."""
        check_export_fd(fd, nbytes)
        return self._write(uid, pid, fd, nbytes)

    def _write(self, uid: str, pid: int, fd: int | None, nbytes: int) -> Path:
        path = self.path(uid, pid)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        out = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            if nbytes:
                os.posix_fallocate(out, 0, nbytes)  # charge the agent, not the pod
            if nbytes and fd is not None:
                with (
                    mmap.mmap(fd, nbytes, prot=mmap.PROT_READ) as src,
                    mmap.mmap(out, nbytes) as dst,
                ):
                    _copy(memoryview(dst), memoryview(src))
        except BaseException:
            os.close(out)
            tmp.unlink(missing_ok=True)
            raise
        os.close(out)
        tmp.replace(path)
        return path

    def unpark_into_fd(self, uid: str, pid: int, fd: int, nbytes: int) -> None:
        """Copy a park file into the empty memfd a resuming pod exported."""
        check_export_fd(fd, nbytes)
        path = self.path(uid, pid)
        size = path.stat().st_size
        if size != nbytes:
            raise ExportError(f"{path} holds {size} bytes, the pod exported {nbytes}")
        if not nbytes:
            return
        with (
            path.open("rb") as f,
            mmap.mmap(f.fileno(), nbytes, prot=mmap.PROT_READ) as src,
            mmap.mmap(fd, nbytes) as dst,
        ):
            _copy(memoryview(dst), memoryview(src))

    def mismatches(
        self, uid: str, pid: int, entries: Iterable[tuple[str, int, int, str]]
    ) -> tuple[list[str], int]:
        """Check (name, offset, nbytes, checksum) entries against the park file.

        Host fingerprints are recomputed here, before the pod frees its copy;
        device fingerprints (``ws64``) can only be checked where they were made,
        so those are counted as unchecked (the pod checks them on resume).
        """
        path = self.path(uid, pid)
        bad: list[str] = []
        unchecked = 0
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            data = mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ) if size else None
            try:
                with memoryview(data if data is not None else b"") as whole:
                    for name, offset, nbytes, checksum in entries:
                        if not checksum.startswith(f"{HOST_ALGORITHM}:"):
                            unchecked += 1
                        elif offset < 0 or offset + nbytes > size:
                            bad.append(name)
                        else:
                            with whole[offset : offset + nbytes] as piece:
                                if host_digest(piece) != checksum:
                                    bad.append(name)
            finally:
                if data is not None:
                    data.close()
        return bad, unchecked

    def files(self) -> list[tuple[str, int, Path]]:
        """Every park file and half-written ``*.tmp`` as (pod uid, pid, path).

        Anything else under the root is not the agent's and is left alone.
        """
        out: list[tuple[str, int, Path]] = []
        if not self.root.is_dir():
            return out
        for pod_dir in sorted(self.root.iterdir()):
            if not pod_dir.is_dir() or not _UID.match(pod_dir.name):
                continue
            for path in sorted(pod_dir.iterdir()):
                if path.suffix in (".park", ".tmp") and path.stem.isdigit():
                    out.append((pod_dir.name, int(path.stem), path))
        return out

    def remove(self, path: Path) -> int:
        """Delete one file :meth:`files` listed; returns the bytes it held."""
        try:
            nbytes = path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            return 0
        with contextlib.suppress(OSError):
            path.parent.rmdir()  # only when it was the pod's last park file
        return nbytes

    def delete(self, uid: str, pid: int) -> None:
        path = self.path(uid, pid)
        path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            path.parent.rmdir()  # only when it was the pod's last park file
