"""Host PID -> pod UID through /proc/PID/cgroup, on the layouts kubelets write."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlix.agent.cgroups import CgroupError, pod_uid_from_cgroup, pod_uid_of_pid

UID = "0f1e2d3c-4b5a-6978-8a9b-acbdcedf0011"
UID_US = UID.replace("-", "_")
OTHER = "11111111-2222-3333-4444-555555555555"


def _v1_lines(path: str) -> str:
    """/proc/PID/cgroup of the real node (cgroup v1 controllers plus the unified "0::" line)."""
    controllers = ("name=systemd", "pids", "blkio", "freezer", "devices", "memory", "cpuset")
    controllers += ("cpuacct", "cpu", "")
    return "".join(f"{9 - n}:{c}:{path}\n" for n, c in enumerate(controllers))


CASES = [
    # cgroup v2, systemd driver (containerd), burstable
    (
        "v2-systemd-burstable",
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_US}.slice/"
        "cri-containerd-6d1f0c.scope\n",
        UID,
    ),
    # cgroup v2, systemd driver, guaranteed QoS (no QoS slice level)
    (
        "v2-systemd-guaranteed",
        f"0::/kubepods.slice/kubepods-pod{UID_US}.slice/cri-containerd-6d1f0c.scope\n",
        UID,
    ),
    # cgroup v2, cgroupfs driver, besteffort
    ("v2-cgroupfs", f"0::/kubepods/besteffort/pod{UID}/6d1f0c9e\n", UID),
    # cgroup v2 seen from inside a container with cgroup namespaces and a nested path
    ("v2-cri-o", f"0::/kubepods.slice/kubepods-pod{UID_US}.slice/crio-abc.scope/init\n", UID),
    # cgroup v1, cgroupfs driver: many hierarchies, all naming the pod
    (
        "v1-cgroupfs",
        f"12:memory:/kubepods/burstable/pod{UID}/abc\n"
        f"11:cpu,cpuacct:/kubepods/burstable/pod{UID}/abc\n"
        "1:name=systemd:/kubepods/burstable/pod" + UID + "/abc\n",
        UID,
    ),
    # cgroup v1, systemd driver, docker
    (
        "v1-systemd-docker",
        f"4:devices:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_US}"
        ".slice/docker-0123.scope\n",
        UID,
    ),
    # Exactly what this project's real node writes (e2e/test_real_containers.py checks
    # the same shape live): kubelet 1.35 with the cgroupfs driver under its
    # cgroupRoot, containerd 2.4 + runc, on a host with the v1 controllers and the
    # unified hierarchy both mounted, so a v2 "0::" line agrees with the v1 ones.
    (
        "real-node-burstable",
        _v1_lines(
            "/rlix-node-eacf75e4/kubepods/burstable/pod360dae0b-f5d1-4bfa-bf78-fcbbfad4c0d0/"
            "71a79870f4d85b67e5d07646cab26e8cc79c9ab0f0384dbd8f2ac8bb2523c4be"
        ),
        "360dae0b-f5d1-4bfa-bf78-fcbbfad4c0d0",
    ),
    # The same node, a pod without CPU or memory requests (the e2e trainers; GPUs
    # do not count for QoS): the besteffort level. Copied from a test_real_containers run.
    (
        "real-node-besteffort",
        _v1_lines(
            "/rlix-node-c9157cd6/kubepods/besteffort/pod4e9f603c-d7e9-4699-b159-d5f43389e5a2/"
            "b439aaeb4e1a4b19e17ab32de39e87e1a743f9c03e2eb3b42f9c53462ef76dee"
        ),
        "4e9f603c-d7e9-4699-b159-d5f43389e5a2",
    ),
    # upper-case hex is normalised
    ("upper-case", f"0::/kubepods/pod{UID.upper()}/x\n", UID),
    # host processes: no pod
    ("host-v2", "0::/user.slice/user-1000.slice/session-3.scope\n", None),
    ("host-v1", "12:memory:/\n11:cpu:/system.slice/containerd.service\n", None),
    ("empty", "", None),
    # "pod" + a UID outside a kubepods path (a user's own cgroup) is not a pod
    ("not-kubepods", f"0::/user.slice/pod{UID}.scope\n", None),
    # a longer hex run after the UID is not a UID
    ("too-long", f"0::/kubepods/pod{UID}ff/x\n", None),
    # garbage lines are skipped
    ("garbage", f"nonsense\n0::/kubepods/pod{UID}/x\n", UID),
]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_pod_uid_from_cgroup(text: str, expected: str | None) -> None:
    assert pod_uid_from_cgroup(text) == expected


def test_two_pods_in_one_file_are_refused() -> None:
    text = f"12:memory:/kubepods/pod{UID}/a\n11:cpu:/kubepods/pod{OTHER}/b\n"
    with pytest.raises(CgroupError, match="more than one pod"):
        pod_uid_from_cgroup(text)


def test_reads_from_a_fake_proc_root(tmp_path: Path) -> None:
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "cgroup").write_text(f"0::/kubepods/pod{UID}/c\n")
    assert pod_uid_of_pid(4242, proc_root=tmp_path) == UID


def test_a_vanished_process_is_an_error_not_a_host_process(tmp_path: Path) -> None:
    with pytest.raises(CgroupError, match="cannot read"):
        pod_uid_of_pid(4243, proc_root=tmp_path)
    with pytest.raises(CgroupError, match="invalid pid"):
        pod_uid_of_pid(0, proc_root=tmp_path)
