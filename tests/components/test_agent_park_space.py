"""Park files and descriptor framing, without an agent process.

The agent maps descriptors a pod hands in; anything but a sealed memfd of the
announced size could hang it, kill it (SIGBUS on a truncated mapping) or make
it read a file the pod chose, so each refusal is checked here by kind.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlix.agent.fd_lines import FdLineReader
from rlix.agent.park_space import ExportError, ParkSpace, check_export_fd, export_room
from rlix.core import agent_protocol as proto
from rlix.core.digests import host_digest

UID = "eeeeeeee-0000-4000-8000-000000000005"


def sealed_memfd(data: bytes) -> int:
    fd = os.memfd_create("rlix-export", os.MFD_ALLOW_SEALING)
    os.write(fd, data)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    return fd


@pytest.fixture
def fds() -> Iterator[list[int]]:
    opened: list[int] = []
    yield opened
    for fd in opened:
        with contextlib.suppress(OSError):
            os.close(fd)


def test_only_a_sealed_memfd_of_the_announced_size_is_accepted(
    tmp_path: Path, fds: list[int]
) -> None:
    r, w = os.pipe()
    fds += [r, w]
    with pytest.raises(ExportError, match="not a regular file"):
        check_export_fd(r, 0)
    regular = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    fds.append(regular)
    with pytest.raises(ExportError, match="not a memfd"):
        check_export_fd(regular, 0)
    unsealed = os.memfd_create("x", os.MFD_ALLOW_SEALING)
    fds.append(unsealed)
    with pytest.raises(ExportError, match="sealed against shrinking and growing"):
        check_export_fd(unsealed, 0)
    good = sealed_memfd(b"x" * 10)
    fds.append(good)
    with pytest.raises(ExportError, match="holds 10 bytes, 11 announced"):
        check_export_fd(good, 11)
    check_export_fd(good, 10)


def test_park_verify_and_unpark_round_trip(tmp_path: Path, fds: list[int]) -> None:
    space = ParkSpace(tmp_path / "parked")
    data = os.urandom(3 * 4096 + 17)
    src = sealed_memfd(data)
    fds.append(src)
    path = space.park_from_fd(UID, 42, src, len(data))
    assert path == tmp_path / "parked" / UID / "42.park"
    assert space.size(UID, 42) == len(data)
    pieces = [
        ("a", 0, 4096, host_digest(data[:4096])),
        ("b", 8192, 100, host_digest(data[8192:8292])),
    ]
    assert space.mismatches(UID, 42, pieces) == ([], 0)
    # A device fingerprint cannot be checked here: counted, not failed.
    assert space.mismatches(UID, 42, [("c", 0, 4, "ws64:4:0:0")]) == ([], 1)
    assert space.mismatches(UID, 42, [("a", 1, 4096, pieces[0][3])]) == (["a"], 0)
    assert space.mismatches(UID, 42, [("z", len(data), 1, "b2b:1:00")]) == (["z"], 0)

    dst = os.memfd_create("rlix-export", os.MFD_ALLOW_SEALING)
    fds.append(dst)
    os.ftruncate(dst, len(data))
    fcntl.fcntl(dst, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    space.unpark_into_fd(UID, 42, dst, len(data))
    assert os.pread(dst, len(data), 0) == data
    with pytest.raises(ExportError, match="exported 5"):
        space.unpark_into_fd(UID, 42, sealed_memfd(b"12345"), 5)

    space.delete(UID, 42)
    assert space.size(UID, 42) is None
    assert not (tmp_path / "parked" / UID).exists()


def test_an_empty_park_file_for_device_only_exports(tmp_path: Path) -> None:
    space = ParkSpace(tmp_path)
    path = space.allocate(UID, 7, 8192)
    assert path.read_bytes() == bytes(8192)
    with pytest.raises(ValueError, match="not a pod UID"):
        space.path("../../etc", 1)


def test_lines_get_exactly_the_descriptors_they_announce(fds: list[int]) -> None:
    a, b = socket.socketpair()
    with a, b:
        r, w = os.pipe()
        fds += [r, w]
        socket.send_fds(a, [proto.encode_reply(1, nfds=1, export={})], [r])
        a.sendall(proto.encode_reply(2))
        reader = FdLineReader(b)
        first = proto.decode(reader.readline(proto.MAX_LINE_BYTES))
        got = reader.take(first.nfds)
        fds.extend(got)
        assert len(got) == 1 and os.fstat(got[0]).st_ino == os.fstat(r).st_ino
        second = proto.decode(reader.readline(proto.MAX_LINE_BYTES))
        assert second.nfds == 0 and reader.take(0) == ()
        with pytest.raises(proto.ProtocolError, match="announced 1 file descriptors, 0 arrived"):
            reader.take(1)


def test_descriptors_nobody_announced_are_closed(fds: list[int]) -> None:
    a, b = socket.socketpair()
    with a, b:
        r, w = os.pipe()
        fds += [r, w]
        socket.send_fds(a, [proto.encode_reply(1)], [r])  # not announced
        reader = FdLineReader(b)
        assert proto.decode(reader.readline(proto.MAX_LINE_BYTES)).nfds == 0
        before = set(os.listdir("/proc/self/fd"))
        reader.line_done()
        closed = before - set(os.listdir("/proc/self/fd"))
        assert len(closed) == 1  # the received copy, not ours
        os.fstat(r)


def test_the_cuda_relocator_says_why_it_cannot_run_here_and_refuses_cleanly(
    tmp_path: Path,
) -> None:
    """Without a GPU the device path must fail with a reason, not crash (on a
    GPU node `make gpu-check` drives it for real)."""
    from rlix.agent.relocation import CudaRelocator, RelocationUnsupportedError

    relocator = CudaRelocator()
    reason = relocator.unsupported_reason()
    piece = {"device_uuid": "00" * 16, "handle": "", "alloc_offset": 0, "offset": 0, "nbytes": 1}
    park = ParkSpace(tmp_path).allocate(UID, 1, 4096)
    relocator.park([], park)  # nothing on a device: nothing to do
    if reason is None:  # a GPU node: an unknown device is still refused by name
        with pytest.raises(RelocationUnsupportedError, match="no GPU with UUID 0000"):
            relocator.park([piece], park)
        return
    assert "CUDA driver" in reason or "cuda-bindings" in reason
    with pytest.raises(RelocationUnsupportedError, match=r"CUDA driver|cuda-bindings"):
        relocator.park([piece], park)
    with pytest.raises(RelocationUnsupportedError):
        relocator.hold("owner", 0, park, 4096)
    relocator.drop("owner")  # nothing held: a no-op


def test_a_pods_exports_share_the_device_memory_it_held_when_asked() -> None:
    room = export_room({0: 3, 1: 1}, [80, 80])  # 4 MiB held over two GPUs
    room.take(3 << 20)  # one process's export
    room.take(1 << 20)  # another's: the room is the pod's, not each process's
    with pytest.raises(ExportError, match="more than the 0 left of the 4 MiB the pod held"):
        room.take(1)


def test_without_what_the_pod_held_the_nodes_gpus_bound_its_exports() -> None:
    room = export_room({}, [2, 2])
    room.take(4 << 20)
    with pytest.raises(ExportError, match="the 4 MiB this node's GPUs have"):
        room.take(1)


def test_with_nothing_read_no_export_is_taken() -> None:
    room = export_room({}, [])
    room.take(0)  # an empty export costs nothing
    with pytest.raises(ExportError, match="neither what the pod held nor this node's GPUs"):
        room.take(1)
