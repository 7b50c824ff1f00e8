"""One real Kubernetes node beside the kwok GPU nodes: kubelet + containerd + runc.

Everything the node owns is named after its cluster, so teardown needs nothing
but the cluster's name and works after a crash (``reap_stale_clusters``):

- a network namespace pinned on the file ``<cluster dir>/node/netns`` (not in
  /run/netns: ``ip netns add`` would leave its own mount there), holding the
  node's address on a veth pair the node created (``100.66.x.y/30``; the
  kubelet refuses a loopback node IP, and the machine's own interfaces are
  never touched). Pods get a CNI bridge inside
  that namespace, so two pods of the node reach each other by pod IP;
- cluster DNS: CoreDNS (built by hack/toolchain.sh with the kubernetes plugin)
  runs inside that namespace on the node IP, and the kubelet's clusterDNS
  points at it, so pods find their peers by the headless Service names;
- a cgroup ``/rlix-node-<tag>`` in every hierarchy: containerd, the shims, the
  kubelet (its ``cgroupRoot``) and every container live under it, so teardown
  freezes it, kills what is inside and removes it;
- a private mount namespace (``unshare --mount``) in which containerd and the
  kubelet run, with tmpfs over /run, /var/lib and /var/log: every mount they make
  (overlay rootfs, projected volumes, pod netns pins, shim sockets, container
  logs) disappears with their last process, and nothing lands in the machine's
  /run or /var;
- state files under the cluster's directory (removed with it).

The kubelet reaches the API server (127.0.0.1 of the machine) through
``netns_forward``; the API server reaches the kubelet (logs, exec) at the node
IP over the veth pair, with the cluster's admin client certificate, and the
kubelet authenticates it against the cluster CA.

The node is tainted ``rlix.io/real-node=true:NoSchedule`` so the other tests'
pods never land on it by accident.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from rlix.devcluster import processes

Log = Callable[[str], None]

NODE_NAME = "rlix-real-0"
TAINT_KEY = "rlix.io/real-node"
NODE_LABEL = "rlix.io/real-node"
POD_SUBNET = "10.244.0.0/24"  # inside the node's network namespace only
CNI_BIN_DIR = Path("/usr/lib/cni")
CGROUP_ROOT = Path("/sys/fs/cgroup")
# Where the node's containerd reads CDI specs besides /etc/cdi (the kubelet plugin's).
CDI_DIR = "/var/run/cdi"
# The node's /30 is picked inside the shared address space (RFC 6598), away from
# the private ranges a machine or its VPN usually uses, and checked against every
# address and route the machine has before it is taken.
_NODE_NET = ipaddress.IPv4Network("100.66.0.0/16")
# Commands the node needs that come from Debian packages (hack/node-deps.sh).
HOST_TOOLS = ("runc", "ip", "nsenter", "unshare")
# Built by hack/toolchain.sh into the toolchain's bin directory.
TOOLCHAIN_TOOLS = ("kubelet", "containerd", "ctr", "containerd-shim-runc-v2", "coredns")
CLUSTER_DOMAIN = "cluster.local"


class RealNodeError(RuntimeError):
    """The real node could not start; the message says why and what to run."""


def tag_of(cluster_name: str) -> str:
    """A short, stable tag naming the node's kernel objects (interface names: 15 chars)."""
    return hashlib.sha256(cluster_name.encode()).hexdigest()[:8]


@dataclass(frozen=True)
class Names:
    """The names of everything one cluster's real node creates outside its directory."""

    host_veth: str
    node_veth: str
    cgroup: str

    @classmethod
    def of(cls, cluster_name: str) -> Names:
        t = tag_of(cluster_name)
        return cls(host_veth=f"rlxh{t}", node_veth="eth0", cgroup=f"rlix-node-{t}")


@dataclass
class _State:
    node_ip: str = ""
    host_ip: str = ""
    launcher_pid: int = 0
    forwarder_pid: int = 0
    pause_image: str = ""
    node_image: str = ""
    agent_image: str = ""
    service_ip: str = ""  # the ``kubernetes`` Service's ClusterIP, served in the namespace


def _stderr_log(message: str) -> None:
    print(f"[real-node] {message}", file=sys.stderr, flush=True)


def missing_prerequisites(bin_dir: Path) -> list[str]:
    """What this machine lacks for a real node, each with the command that fixes it."""
    missing = []
    for tool in TOOLCHAIN_TOOLS:
        if not (bin_dir / tool).is_file():
            missing.append(f"{tool} in {bin_dir} (run: hack/toolchain.sh)")
    for tool in HOST_TOOLS:
        if shutil.which(tool) is None:
            missing.append(f"{tool} (run: hack/node-deps.sh)")
    for plugin in ("bridge", "host-local", "loopback"):
        if not (CNI_BIN_DIR / plugin).is_file():
            missing.append(f"CNI plugin {CNI_BIN_DIR / plugin} (run: hack/node-deps.sh)")
    if os.geteuid() != 0:
        missing.append("root (network namespaces, cgroups and mounts need it)")
    return missing


def cgroup_hierarchies() -> list[Path]:
    """Every mounted cgroup hierarchy (v1 controllers, named ones, and the unified one)."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        fstype = fields[fields.index("-") + 1]
        mount_point = Path(fields[4])
        if fstype in ("cgroup", "cgroup2") and CGROUP_ROOT in mount_point.parents:
            out.append(mount_point)
    return sorted(set(out))


class RealNode:
    """The real node of one cluster. Construct freely; ``up`` starts it, ``down`` removes it."""

    def __init__(
        self,
        *,
        cluster_name: str,
        cluster_dir: Path,
        kubeconfig: Path,
        api_port: int,
        bin_dir: Path,
        repo_root: Path | None = None,
        timeout_s: float = 180.0,
        log: Log = _stderr_log,
    ) -> None:
        self.cluster_name = cluster_name
        self.names = Names.of(cluster_name)
        self.dir = cluster_dir / "node"
        self.cluster_dir = cluster_dir
        self.kubeconfig = kubeconfig
        self.api_port = api_port
        self.bin_dir = bin_dir
        self.repo_root = repo_root or Path(__file__).resolve().parents[2]
        self.timeout_s = timeout_s
        self._log = log

    # -- paths ------------------------------------------------------------
    @property
    def kubelet_dir(self) -> Path:
        """The kubelet's --root-dir (plugins_registry, plugins, pods), on the
        machine's filesystem: a DRA plugin's hostPath sees the same directory."""
        return self.dir / "kubelet"

    @property
    def socket(self) -> Path:
        return self.dir / "containerd.sock"

    @property
    def netns_path(self) -> Path:
        return self.dir / "netns"

    @property
    def _state_path(self) -> Path:
        return self.dir / "state.json"

    def state(self) -> _State:
        try:
            return _State(**json.loads(self._state_path.read_text()))
        except (OSError, ValueError, TypeError):
            return _State()

    def _write_state(self, state: _State) -> None:
        self._state_path.write_text(json.dumps(asdict(state), indent=2))

    @property
    def node_image(self) -> str:
        """The image with Debian, python3 and the project's wheel (imagePullPolicy: Never)."""
        return self.state().node_image

    @property
    def agent_image(self) -> str:
        """The node image with ``rlix-node-agent`` as its entrypoint (the chart's DaemonSet)."""
        return self.state().agent_image

    def ctr(self, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
        """``ctr`` on this node's containerd, in the ``k8s.io`` namespace the kubelet uses."""
        return subprocess.run(
            [str(self.bin_dir / "ctr"), "--address", str(self.socket), "-n", "k8s.io", *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )

    # -- lifecycle --------------------------------------------------------
    def up(self) -> None:
        """Start the node and wait until it is Ready; raise RealNodeError saying why not."""
        missing = missing_prerequisites(self.bin_dir)
        if missing:
            raise RealNodeError("the real node cannot start; missing: " + "; ".join(missing))
        start = time.monotonic()
        down(self.cluster_name, self.cluster_dir, log=self._log)  # leftovers of an earlier run
        self.dir.mkdir(parents=True)
        state = _State()
        try:
            images = self._images()
            state.pause_image = images["pause"][0]
            state.node_image, state.agent_image = images["node"][0], images["agent"][0]
            state.service_ip = self._kubernetes_service_ip()
            state.host_ip, state.node_ip = self._network(state.service_ip)
            self._write_state(state)
            self._cgroups()
            self._write_configs(state)
            state.forwarder_pid = self._start_forwarder(state.service_ip)
            state.launcher_pid = self._start_launcher()
            self._write_state(state)
            self._wait_socket(state)
            for archive in sorted({archive for _, archive in images.values()}):
                self._import([ref for ref, a in images.values() if a == archive], archive)
            (self.dir / "images-imported").touch()
            self._wait_ready(state)
        except BaseException:
            self._log(f"real node failed to start; logs in {self.dir}")
            raise
        self._log(
            f"real node {NODE_NAME} Ready at {state.node_ip} in {time.monotonic() - start:.1f}s"
        )

    def down(self) -> None:
        down(self.cluster_name, self.cluster_dir, log=self._log)

    # -- steps ------------------------------------------------------------
    def _images(self) -> dict[str, tuple[str, Path]]:
        script = self.repo_root / "hack" / "node-images.sh"
        if not script.is_file():
            raise RealNodeError(f"{script} not found: the real node's images build from a checkout")
        env = dict(os.environ, PYTHON=sys.executable)
        self._log("building or reusing the node images (hack/node-images.sh)")
        result = subprocess.run(
            [str(script)], capture_output=True, text=True, env=env, timeout=1200, check=False
        )
        if result.returncode != 0:
            raise RealNodeError(f"hack/node-images.sh failed:\n{result.stderr[-4000:]}")
        images: dict[str, tuple[str, Path]] = {}
        for line in result.stdout.splitlines():
            role, ref, archive = line.split()
            images[role] = (ref, Path(archive))
        missing = {"pause", "node", "agent"} - set(images)
        if missing:
            raise RealNodeError(f"hack/node-images.sh named no {sorted(missing)} image")
        return images

    def _kubernetes_service_ip(self) -> str:
        result = self._kubectl(
            "get", "service", "kubernetes", "-n", "default", "-o", "jsonpath={.spec.clusterIP}"
        )
        ip = result.stdout.strip()
        if result.returncode != 0 or not ip:
            raise RealNodeError(f"cannot read the kubernetes Service's ClusterIP: {result.stderr}")
        return ip

    def _network(self, service_ip: str) -> tuple[str, str]:
        n = self.names
        subnet = _free_subnet(tag_of(self.cluster_name))
        host_ip, node_ip = (str(h) for h in subnet.hosts())
        prefix = subnet.prefixlen
        ns = str(self.netns_path)
        self.netns_path.touch()
        _run("unshare", f"--net={ns}", "true")
        _run(
            "ip",
            "link",
            "add",
            n.host_veth,
            "type",
            "veth",
            "peer",
            "name",
            n.node_veth,
            "netns",
            ns,
        )
        _run("ip", "addr", "add", f"{host_ip}/{prefix}", "dev", n.host_veth)
        _run("ip", "link", "set", n.host_veth, "up")
        inside = ("nsenter", f"--net={ns}", "ip")
        _run(*inside, "addr", "add", f"{node_ip}/{prefix}", "dev", n.node_veth)
        _run(*inside, "link", "set", n.node_veth, "up")
        _run(*inside, "link", "set", "lo", "up")
        # The API server's Service address, local to the namespace: pods reach it
        # through their bridge's gateway and the forwarder answers (no kube-proxy).
        _run(*inside, "addr", "add", f"{service_ip}/32", "dev", "lo")
        _run(*inside, "route", "add", "default", "via", host_ip)
        return host_ip, node_ip

    def _cgroups(self) -> None:
        for hierarchy in cgroup_hierarchies():
            for sub in (self.names.cgroup, f"{self.names.cgroup}/node"):
                path = hierarchy / sub
                path.mkdir(exist_ok=True)
                # A v1 cpuset child starts with no CPUs and no memory nodes.
                for name in ("cpuset.cpus", "cpuset.mems"):
                    parent = path.parent / name
                    if (path / name).exists() and not (path / name).read_text().strip():
                        (path / name).write_text(parent.read_text())

    def _write_configs(self, state: _State) -> None:
        d = self.dir
        for sub in ("cni", "kubelet", "containerd", "logs"):
            (d / sub).mkdir(exist_ok=True)
        (d / "containerd.toml").write_text(_containerd_config(d, state.pause_image))
        (d / "cni" / "10-rlix.conflist").write_text(json.dumps(_cni_config(), indent=2))
        (d / "Corefile").write_text(_corefile(node_ip=state.node_ip, kubeconfig=self.kubeconfig))
        pki = self.cluster_dir / "pki"
        (d / "kubelet.yaml").write_text(
            yaml.safe_dump(
                _kubelet_config(
                    node_ip=state.node_ip,
                    socket=self.socket,
                    cgroup=self.names.cgroup,
                    client_ca=pki / "ca.crt",
                ),
                sort_keys=False,
            )
        )
        procs = " ".join(
            str(h / self.names.cgroup / "node" / "cgroup.procs") for h in cgroup_hierarchies()
        )
        kubelet = [
            str(self.bin_dir / "kubelet"),
            f"--config={d / 'kubelet.yaml'}",
            f"--kubeconfig={self.kubeconfig}",
            f"--root-dir={self.kubelet_dir}",
            f"--cert-dir={self.kubelet_dir / 'pki'}",
            f"--hostname-override={NODE_NAME}",
            f"--node-ip={state.node_ip}",
            f"--node-labels={NODE_LABEL}=true",
            f"--register-with-taints={TAINT_KEY}=true:NoSchedule",
            "--v=2",
        ]
        # Runs as: nsenter --net=<netns> unshare --mount --propagation slave bash launcher.sh
        path = f"{self.bin_dir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        logs = d / "logs"
        (d / "launcher.sh").write_text(
            "\n".join(
                [
                    "set -eu",
                    f"export PATH={path}",
                    f"for f in {procs}; do echo $$ > $f; done",
                    "mount -t tmpfs -o mode=755 rlix-node-run /run",
                    "mount -t tmpfs -o mode=755 rlix-node-var-lib /var/lib",
                    "mount -t tmpfs -o mode=755 rlix-node-var-log /var/log",
                    f"coredns -conf {d / 'Corefile'} >> {logs / 'coredns.log'} 2>&1 &",
                    f"containerd --config {d / 'containerd.toml'}"
                    f" >> {logs / 'containerd.log'} 2>&1 &",
                    f"until [ -e {d / 'images-imported'} ]; do sleep 0.2; done",
                    f"exec {' '.join(kubelet)} >> {logs / 'kubelet.log'} 2>&1",
                    "",
                ]
            )
        )

    def _start_forwarder(self, service_ip: str) -> int:
        argv = [
            sys.executable,
            "-m",
            "rlix.devcluster.netns_forward",
            str(self.netns_path),
            str(self.api_port),
            "--also",
            f"{service_ip}:443",
        ]
        pid = processes.spawn_detached(argv, log=self.dir / "logs" / "forwarder.log")
        self._join_cgroup(pid)
        return pid

    def _join_cgroup(self, pid: int) -> None:
        for hierarchy in cgroup_hierarchies():
            with contextlib.suppress(OSError):
                (hierarchy / self.names.cgroup / "node" / "cgroup.procs").write_text(str(pid))

    def _start_launcher(self) -> int:
        argv = [
            shutil.which("nsenter") or "nsenter",
            f"--net={self.netns_path}",
            "--",
            shutil.which("unshare") or "unshare",
            "--mount",
            "--propagation",
            "slave",
            "--",
            shutil.which("bash") or "bash",
            str(self.dir / "launcher.sh"),
        ]
        return processes.spawn_detached(argv, log=self.dir / "logs" / "launcher.log")

    def _wait_socket(self, state: _State) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.socket.exists() and self.ctr("version", timeout_s=10).returncode == 0:
                return
            if not processes.pid_alive(state.launcher_pid):
                break
            time.sleep(0.2)
        raise RealNodeError(f"containerd did not start:\n{self._tails()}")

    def _import(self, refs: list[str], archive: Path) -> None:
        """Import ``archive`` (one repository, a tag per ref) unless every ref is there."""
        if set(refs) <= set(self.ctr("images", "ls", "-q").stdout.split()):
            return
        base = refs[0].rsplit(":", 1)[0]
        result = self.ctr("images", "import", "--base-name", base, str(archive))
        missing = set(refs) - set(self.ctr("images", "ls", "-q").stdout.split())
        if result.returncode != 0 or missing:
            raise RealNodeError(
                f"ctr images import {archive} gave no {sorted(missing)}:\n"
                f"{result.stdout}{result.stderr}"
            )

    def _kubectl(self, *args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin_dir / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )

    def _wait_ready(self, state: _State) -> None:
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            if not processes.pid_alive(state.launcher_pid):
                raise RealNodeError(f"kubelet or containerd exited:\n{self._tails()}")
            ready = self._kubectl(
                "get",
                "node",
                NODE_NAME,
                "-o",
                "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
            )
            if ready.stdout.strip() == "True":
                return
            time.sleep(1)
        raise RealNodeError(
            f"node {NODE_NAME} not Ready after {self.timeout_s:.0f}s:\n{self._tails()}"
        )

    def _tails(self) -> str:
        out = []
        for name in ("launcher", "containerd", "kubelet", "coredns", "forwarder"):
            path = self.dir / "logs" / f"{name}.log"
            with contextlib.suppress(OSError):
                text = path.read_text(errors="replace")
                lines = [ln for ln in text.splitlines() if _is_error(ln)]
                out.append(f"--- {path} (errors, then tail)\n" + "\n".join(lines[-15:]))
                out.append("\n".join(text.splitlines()[-15:]))
        return "\n".join(out)


def _is_error(line: str) -> bool:
    """A klog error line ("E1130 23:10:52...") or a logrus one (containerd)."""
    return (line[:1] == "E" and line[1:5].isdigit()) or "level=error" in line


def down(cluster_name: str, cluster_dir: Path, *, log: Log = _stderr_log) -> bool:
    """Remove everything the real node of ``cluster_name`` created. Safe to repeat.

    Order matters: processes first (frozen, so nothing forks while it is being
    killed), then their cgroups, then the network namespace (its veth pair goes
    with it), then the files. Mounts need no step: they lived in the node's
    private mount namespace, which ends with its last process.
    Returns True when something was found and removed.
    """
    names = Names.of(cluster_name)
    found = False
    groups = [h / names.cgroup for h in cgroup_hierarchies() if (h / names.cgroup).is_dir()]
    if groups:
        found = True
        _kill_cgroup(groups)
        for group in groups:
            _remove_cgroup_tree(group)
    node_dir = cluster_dir / "node"
    netns = node_dir / "netns"
    if any(m == netns for m in _mount_points()):
        found = True
        subprocess.run(["umount", str(netns)], capture_output=True, check=False)
    if _link_exists(names.host_veth):
        found = True
        subprocess.run(["ip", "link", "delete", names.host_veth], capture_output=True, check=False)
    if node_dir.exists():
        found = True
        shutil.rmtree(node_dir, ignore_errors=True)
    if found:
        log(f"real node of {cluster_name!r} removed")
    return found


def leftovers(cluster_name: str, cluster_dir: Path) -> list[str]:
    """What of the real node still exists (for tests of teardown): empty when clean."""
    names = Names.of(cluster_name)
    node_dir = cluster_dir / "node"
    groups = [h / names.cgroup for h in cgroup_hierarchies() if (h / names.cgroup).exists()]
    out = [f"cgroup {g}" for g in groups]
    # Containers run commands that name nothing of ours: find them by cgroup.
    out.extend(f"process {pid} (in the node's cgroup)" for pid in sorted(_pids(groups)))
    if _link_exists(names.host_veth):
        out.append(f"interface {names.host_veth}")
    if node_dir.exists():
        out.append(str(node_dir))
    marker = str(node_dir)
    out.extend(f"mount {m}" for m in _mount_points() if marker in str(m))
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if marker in cmdline:
                out.append(f"process {proc.name}: {cmdline[:200]}")
    return out


def _kill_cgroup(groups: list[Path]) -> None:
    freezer = next((g for g in groups if (g / "freezer.state").exists()), None)
    if freezer is not None:
        with contextlib.suppress(OSError):
            (freezer / "freezer.state").write_text("FROZEN")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pids = _pids(groups)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if freezer is not None:
            # SIGKILL is delivered only once the task is thawed.
            with contextlib.suppress(OSError):
                (freezer / "freezer.state").write_text("THAWED")
        time.sleep(0.1)
        for pid in pids:
            processes.pid_alive(pid)  # reaps our own children (the launcher, the forwarder)
    else:
        raise RealNodeError(f"processes survive SIGKILL in {groups[0]}: {_pids(groups)}")


def _pids(groups: list[Path]) -> set[int]:
    pids: set[int] = set()
    for group in groups:
        for procs in group.rglob("cgroup.procs"):
            with contextlib.suppress(OSError):
                pids.update(int(p) for p in procs.read_text().split())
    return pids


def _remove_cgroup_tree(group: Path) -> None:
    dirs = sorted((p for p in group.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
    for path in [*dirs, group]:
        for _ in range(50):
            try:
                path.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)  # a killed task leaves its cgroup a moment after it is gone


def _link_exists(name: str) -> bool:
    result = subprocess.run(["ip", "link", "show", name], capture_output=True, check=False)
    return result.returncode == 0


def _mount_points() -> list[Path]:
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    return [Path(line.split()[4]) for line in lines]


def _run(*argv: str) -> None:
    result = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RealNodeError(f"{' '.join(argv)} failed: {result.stderr.strip()}")


def _free_subnet(tag: str) -> ipaddress.IPv4Network:
    """A /30 in 100.66.0.0/16 that overlaps no address or route of this machine."""
    used: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for cmd in (["ip", "-4", "-o", "addr", "show"], ["ip", "-4", "route", "show", "table", "all"]):
        out = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
        for word in out.split():
            with contextlib.suppress(ValueError):
                if "/" in word or word.count(".") == 3:
                    used.append(ipaddress.ip_network(word, strict=False))
    subnets: list[ipaddress.IPv4Network] = list(_NODE_NET.subnets(new_prefix=30))
    first = int(tag, 16) % len(subnets)
    for i in range(len(subnets)):
        candidate = subnets[(first + i) % len(subnets)]
        if not any(candidate.overlaps(u) for u in used if u.prefixlen > 0):
            return candidate
    raise RealNodeError(f"no free /30 left in {_NODE_NET} for the real node")


def _containerd_config(d: Path, pause_image: str) -> str:
    # containerd 2.4's own format (version 4, so nothing is migrated); ``imports`` points
    # at the node's own (empty) directory: an empty list would fall back to the
    # machine's /etc/containerd/conf.d.
    cri = "plugins.'io.containerd.cri.v1.runtime'"
    return f"""version = 4
root = '{d / "containerd" / "root"}'
state = '/run/rlix-containerd'
imports = ['{d / "containerd" / "conf.d" / "*.toml"}']
disabled_plugins = ['io.containerd.snapshotter.v1.btrfs', 'io.containerd.snapshotter.v1.zfs',
  'io.containerd.snapshotter.v1.devmapper', 'io.containerd.snapshotter.v1.aufs']

[plugins.'io.containerd.server.v1.grpc']
  address = '{d / "containerd.sock"}'

[plugins.'io.containerd.server.v1.ttrpc']
  address = '{d / "containerd.sock.ttrpc"}'

[plugins.'io.containerd.internal.v1.opt']
  path = '{d / "containerd" / "opt"}'

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '{pause_image}'

[{cri}]
  # No CAP_SYS_RESOURCE here: runc must not try to lower oom_score_adj.
  restrict_oom_score_adj = true
  # CDI is always on in containerd 2.x (no enable_cdi any more); its spec
  # directories, named here because the gpu.rlix.io kubelet plugin writes into the
  # second (the chart's nodeAgent.dra.cdiDir), a tmpfs in the node's mount namespace.
  # The kubelet's DRA support (GA since 1.34) needs no configuration.
  cdi_spec_dirs = ['/etc/cdi', '{CDI_DIR}']
  [{cri}.containerd]
    default_runtime_name = 'runc'
    [{cri}.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
  [{cri}.cni]
    bin_dirs = ['{CNI_BIN_DIR}']
    conf_dir = '{d / "cni"}'
"""


def _cni_config() -> dict[str, Any]:
    return {
        "cniVersion": "0.4.0",
        "name": "rlix-node",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                # The pod's default route via the bridge: its DNS server and the
                # API server's Service address live in the node's namespace,
                # off the pod subnet.
                "isDefaultGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_SUBNET}]]},
            }
        ],
    }


def _corefile(*, node_ip: str, kubeconfig: Path) -> str:
    """Cluster DNS for the node's pods: the kubernetes plugin answers Service and
    pod names (``<job>-<role>-<i>.<job>.<ns>.svc.cluster.local`` from the headless
    Service's EndpointSlices) from the API server, which it reaches like the
    kubelet does (the same kubeconfig, through ``netns_forward``). No cache: a
    peer asked for before its pod is published must not stay unknown for a TTL.
    Other names are refused (the namespace has no route to the machine's
    resolvers), so nothing leaves the node."""
    return f"""{CLUSTER_DOMAIN}:53 {{
    bind {node_ip}
    errors
    kubernetes {CLUSTER_DOMAIN} {{
        kubeconfig {kubeconfig}
        ttl 1
    }}
}}
"""


def _kubelet_config(*, node_ip: str, socket: Path, cgroup: str, client_ca: Path) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node_ip,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "containerRuntimeEndpoint": f"unix://{socket}",
        # PID 1 is not systemd here, and the machine mounts the cgroup v1 hierarchy.
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "cgroupRoot": f"/{cgroup}",
        "failSwapOn": False,
        "makeIPTablesUtilChains": False,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(client_ca)},
        },
        "authorization": {"mode": "Webhook"},
        # A shared development disk: never evict or garbage-collect over it.
        "evictionHard": {
            "memory.available": "50Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "resolvConf": "/etc/resolv.conf",
        # The node's own CoreDNS (``_corefile``), on the node IP: pods reach it
        # through their bridge's gateway, like any address of the node.
        "clusterDNS": [node_ip],
        "clusterDomain": CLUSTER_DOMAIN,
    }
