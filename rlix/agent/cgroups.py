"""Host PID -> pod UID, read from ``/proc/PID/cgroup``.

The kubelet puts every container in a cgroup whose path names the pod UID. The
spelling depends on the cgroup version and the kubelet's cgroup driver:

* cgroupfs driver:  ``/kubepods/burstable/pod<uid>/<container-id>``
  (UID with dashes)
* systemd driver:   ``/kubepods.slice/kubepods-burstable.slice/
  kubepods-burstable-pod<uid>.slice/cri-containerd-<id>.scope``
  (UID with the dashes turned into underscores, because systemd reserves '-')

cgroup v1 lists one line per hierarchy (``4:memory:/kubepods/...``); v2 has a
single ``0::/...`` line. We accept any line that names a pod and require all of
them to agree, so a process cannot be attributed to two pods.

The proc root is a parameter so tests can point it at a fake tree, and so the
agent can read the host's ``/proc`` when it runs in a container with hostPID
(``/host/proc`` is also common).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

# ``pod`` followed by a UUID spelled with '-' or '_' separators; the lookahead
# stops ``pod<uid>`` from matching inside a longer hex run.
_POD_UID: Final = re.compile(
    r"pod(?P<uid>[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
    r"(?![0-9a-f])",
    re.IGNORECASE,
)


class CgroupError(Exception):
    """The cgroup file names more than one pod, or cannot be read."""


def pod_uid_from_cgroup(text: str) -> str | None:
    """The pod UID (canonical, lower case, dashes) named in a cgroup file, or None.

    None means the process is not in a pod (a host process, or the agent's own
    test harness); callers treat that as "no pod identity", never as a guess.
    """
    found: set[str] = set()
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        path = parts[2]
        if "kubepods" not in path:
            continue
        matches = {m.group("uid").replace("_", "-").lower() for m in _POD_UID.finditer(path)}
        found |= matches
    if len(found) > 1:
        raise CgroupError(f"cgroup names more than one pod: {sorted(found)}")
    return next(iter(found), None)


def pod_uid_of_pid(pid: int, *, proc_root: Path) -> str | None:
    """Read ``<proc_root>/<pid>/cgroup`` and return the pod UID it names.

    A process that has already exited raises :class:`CgroupError`: the caller
    cannot be identified, so it must be refused rather than treated as a host
    process.
    """
    if pid <= 0:
        raise CgroupError(f"invalid pid {pid}")
    path = proc_root / str(pid) / "cgroup"
    try:
        text = path.read_text()
    except OSError as exc:
        raise CgroupError(f"cannot read {path}: {exc.strerror or exc}") from None
    return pod_uid_from_cgroup(text)
