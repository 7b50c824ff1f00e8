"""Who is on the other end of the socket: kernel peer credentials -> pod.

Authentication never trusts the message: the PID comes from ``SO_PEERCRED``
(filled in by the kernel at ``connect()``), the pod UID from that PID's cgroup,
and the namespace/name from the pod directory (the API server, or a static map
in tests). A pod can therefore only ever speak for itself.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from rlix.agent.cgroups import CgroupError, pod_uid_of_pid

_UCRED = struct.Struct("3i")  # struct ucred { pid_t pid; uid_t uid; gid_t gid; }


@dataclass(frozen=True, slots=True)
class PeerCredentials:
    pid: int
    uid: int
    gid: int


@dataclass(frozen=True, slots=True)
class PodIdentity:
    uid: str
    namespace: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated peer: a pod, or a host process (``pod`` is None)."""

    creds: PeerCredentials
    pod: PodIdentity | None


class UnknownCallerError(Exception):
    """The peer could not be identified; it must be refused."""


def peer_credentials(sock: socket.socket) -> PeerCredentials:
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, gid = _UCRED.unpack(raw)
    return PeerCredentials(pid=pid, uid=uid, gid=gid)


# uid -> (namespace, name); None when the pod is unknown to the directory.
PodDirectory = Callable[[str], PodIdentity | None]


def static_directory(pods: Mapping[str, tuple[str, str]]) -> PodDirectory:
    """A directory from a fixed uid -> (namespace, name) map (tests, --no-kube)."""

    def lookup(uid: str) -> PodIdentity | None:
        entry = pods.get(uid)
        return PodIdentity(uid=uid, namespace=entry[0], name=entry[1]) if entry else None

    return lookup


class CgroupResolver:
    """Resolves a peer PID to a pod through ``<proc_root>/PID/cgroup``."""

    def __init__(self, *, proc_root: Path, directory: PodDirectory) -> None:
        self._proc_root = proc_root
        self._directory = directory

    def pod_uid(self, pid: int) -> str | None:
        """The pod UID of any host PID (e.g. one NVML lists); None if unknown."""
        try:
            return pod_uid_of_pid(pid, proc_root=self._proc_root)
        except CgroupError:
            return None

    def resolve(self, creds: PeerCredentials) -> Caller:
        try:
            uid = pod_uid_of_pid(creds.pid, proc_root=self._proc_root)
        except CgroupError as exc:
            raise UnknownCallerError(f"cannot identify peer pid {creds.pid}: {exc}") from None
        if uid is None:
            return Caller(creds=creds, pod=None)
        pod = self._directory(uid)
        if pod is None:
            # A pod this node does not know (yet): still a pod, never a host
            # process, so it gets a placeholder name rather than control rights.
            pod = PodIdentity(uid=uid, namespace="", name=f"pod-{uid}")
        return Caller(creds=creds, pod=pod)
