"""A local Kubernetes control plane with fake GPU nodes, for development and tests.

kwokctl (``--runtime binary``) runs etcd, kube-apiserver, kube-controller-manager,
the default kube-scheduler and the kwok controller from locally built binaries.
Beside them this module runs a second kube-scheduler with the ``rlix-scheduler``
profile, which calls the extender, and applies kwok GPU nodes. Everything binds
to 127.0.0.1. ``up()`` is idempotent: a healthy cluster is reused, a broken one
is recreated.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rlix.devcluster import manifests, processes, realnode, scheduler

Log = Callable[[str], None]

KWOKCTL_API = "config.kwok.x-k8s.io/v1alpha1"


def default_workdir() -> Path:
    """Where kwokctl keeps cluster state (KWOK_WORKDIR semantics), outside the checkout."""
    cache = Path(os.environ.get("RLIX_CACHE", Path.home() / ".cache" / "rlix"))
    return cache / "kwok"


def _stderr_log(message: str) -> None:
    print(f"[cluster] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class ClusterOptions:
    """How the local cluster should look. Field names match the CLI flags."""

    name: str = "rlix-dev"
    nodes: int = 4
    gpus: int = 8
    gpu_memory_mib: int = 81920
    node_prefix: str = "rlix-gpu"
    # The extender the rlix-scheduler calls. Nothing needs to listen there for the
    # cluster to come up: rlix-scheduler pods simply wait until it does.
    extender_port: int = 18787
    workdir: Path = field(default_factory=default_workdir)
    # Leader election only delays a restarted scheduler by a lease period here,
    # where exactly one rlix-scheduler runs; the Helm chart turns it on.
    leader_elect: bool = False
    timeout_s: float = 180.0
    # Real kubelet nodes beside the kwok ones (rlix.devcluster.realnode): 0 or 1.
    real_nodes: int = 0

    def __post_init__(self) -> None:
        if self.real_nodes not in (0, 1):
            raise ValueError(f"real_nodes must be 0 or 1, got {self.real_nodes}")

    @property
    def extender_url(self) -> str:
        return f"http://127.0.0.1:{self.extender_port}"


@dataclass
class _State:
    """What this module adds to kwokctl's state directory (rlix-state.json)."""

    scheduler_pid: int = 0
    scheduler_port: int = 0
    extender_url: str = ""
    owner_pid: int = 0


class KubectlError(subprocess.CalledProcessError):
    """A failed kubectl call whose message carries kubectl's own words."""

    def __str__(self) -> str:
        return f"{super().__str__()}\n{(self.stderr or '').strip()}"


class ExistingCluster:
    """A cluster someone else runs (kind, a real one), reached through its kubeconfig."""

    def __init__(self, kubeconfig: Path, bin_dir: Path) -> None:
        self.kubeconfig = kubeconfig
        self.bin_dir = bin_dir

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout_s: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return run_kubectl(
            self.bin_dir, self.kubeconfig, args, input=input, check=check, timeout_s=timeout_s
        )

    def apply(self, objects: Sequence[dict[str, Any]]) -> None:
        apply_objects(self.kubectl, objects)


def run_kubectl(
    bin_dir: Path,
    kubeconfig: Path,
    args: Sequence[str],
    *,
    input: str | None = None,
    check: bool = True,
    timeout_s: float = 120,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """The toolchain's kubectl on one kubeconfig; raises KubectlError when asked to check."""
    cmd = [str(bin_dir / "kubectl"), "--kubeconfig", str(kubeconfig), *args]
    result = subprocess.run(
        cmd, check=False, input=input, capture_output=True, text=True, timeout=timeout_s, env=env
    )
    if check and result.returncode != 0:
        raise KubectlError(result.returncode, cmd, output=result.stdout, stderr=result.stderr)
    return result


def apply_objects(
    kubectl: Callable[..., subprocess.CompletedProcess[str]], objects: Sequence[dict[str, Any]]
) -> None:
    """Server-side apply of manifests given as dicts."""
    body = yaml.safe_dump_all(list(objects), sort_keys=False)
    kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=body)


def wait_established(
    kubectl: Callable[..., subprocess.CompletedProcess[str]], crd: str, timeout_s: float = 60
) -> None:
    """Wait until the CustomResourceDefinition ``crd`` (``rljobs.rlix.io``) serves.

    Not ``kubectl wait --for=condition=Established``: given a CRD the API server
    has not yet written conditions for (just created), kubectl 1.37 fails at
    once with ".status.conditions accessor error: <nil> is of the type <nil>"
    instead of waiting (a CI run of 2026-12-06 lost an e2e module's setup to it).
    """
    established = '{.status.conditions[?(@.type=="Established")].status}'
    deadline = time.monotonic() + timeout_s
    while True:
        got = kubectl("get", f"crd/{crd}", "-o", f"jsonpath={established}", check=False)
        if got.returncode == 0 and got.stdout.strip() == "True":
            return
        if time.monotonic() >= deadline:
            said = got.stderr.strip() or f"Established is {got.stdout.strip() or 'not set yet'}"
            raise TimeoutError(f"CRD {crd} does not serve after {timeout_s:.0f} s: {said}")
        time.sleep(0.2)


class DevCluster:
    """One named local cluster. Safe to construct without starting anything."""

    def __init__(self, options: ClusterOptions, bin_dir: Path, *, log: Log = _stderr_log) -> None:
        self.options = options
        self.bin_dir = bin_dir
        self._log = log

    # -- paths -------------------------------------------------------------
    @property
    def dir(self) -> Path:
        return self.options.workdir / "clusters" / self.options.name

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig.yaml"

    @property
    def extender_port(self) -> int:
        return self.options.extender_port

    @property
    def _state_path(self) -> Path:
        return self.dir / "rlix-state.json"

    @property
    def _kwokctl_config_path(self) -> Path:
        return self.options.workdir / f"{self.options.name}.kwokctl.yaml"

    @property
    def _merged_kubeconfig_path(self) -> Path:
        return self.options.workdir / f"{self.options.name}.merged-kubeconfig.yaml"

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["KWOK_WORKDIR"] = str(self.options.workdir)
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        env.pop("KUBECONFIG", None)
        return env

    # -- commands ----------------------------------------------------------
    def kwokctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin_dir / "kwokctl"), *args],
            env=self._env(),
            check=check,
            capture_output=True,
            text=True,
        )

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout_s: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run the toolchain's kubectl (same minor version as the server) on this cluster."""
        return run_kubectl(
            self.bin_dir,
            self.kubeconfig,
            args,
            input=input,
            check=check,
            timeout_s=timeout_s,
            env=self._env(),
        )

    def apply(self, objects: Sequence[dict[str, Any]]) -> None:
        apply_objects(self.kubectl, objects)

    # -- state -------------------------------------------------------------
    def exists(self) -> bool:
        return self.dir.is_dir()

    def _read_state(self) -> _State:
        try:
            return _State(**json.loads(self._state_path.read_text()))
        except (OSError, ValueError, TypeError):
            return _State()

    def _write_state(self, state: _State) -> None:
        self._state_path.write_text(json.dumps(asdict(state), indent=2))

    def api_healthy(self) -> bool:
        if not self.kubeconfig.is_file():
            return False
        try:
            result = self.kubectl("get", "--raw", "/readyz", check=False, timeout_s=10)
            return result.returncode == 0
        except subprocess.TimeoutExpired:
            return False

    def scheduler_healthy(self) -> bool:
        state = self._read_state()
        return (
            state.scheduler_pid > 0
            and processes.pid_alive(state.scheduler_pid)
            and state.extender_url == self.options.extender_url
            and processes.url_ok(f"https://127.0.0.1:{state.scheduler_port}/healthz")
        )

    # -- lifecycle ---------------------------------------------------------
    def up(self) -> None:
        """Create the cluster, or bring an existing one back to the requested shape."""
        start = time.monotonic()
        if self.api_healthy():
            self._log(f"cluster {self.options.name!r} already running; reconciling nodes")
        else:
            if self.exists():
                self._log(f"cluster {self.options.name!r} has stale state; recreating it")
                self.down()
            self._create()
        state = self._read_state()
        state.owner_pid = os.getpid()
        self._write_state(state)
        self.apply(manifests.bootstrap_objects())
        self._apply_nodes()
        if not self.scheduler_healthy():
            self._start_scheduler()
        self._wait_nodes_ready()
        if self.options.real_nodes:
            self._check_kwok_spares_real_nodes()
            self.real_node().up()
        self._log(f"cluster {self.options.name!r} ready in {time.monotonic() - start:.1f}s")

    def _check_kwok_spares_real_nodes(self) -> None:
        """A cluster created before kwok was limited to annotated nodes would let
        kwok take over the real node's status: refuse it with the fix."""
        flag = "--manage-nodes-with-annotation-selector="
        try:
            spares = flag in (self.dir / "kwok.yaml").read_text()
        except OSError:
            spares = False
        if not spares:
            raise RuntimeError(
                f"cluster {self.options.name!r} runs kwok with --manage-all-nodes, which would "
                f"take over a real node; recreate it: rlix cluster down --name {self.options.name}"
            )

    def real_node(self) -> realnode.RealNode:
        """This cluster's real kubelet node (whether or not it runs)."""
        return realnode.RealNode(
            cluster_name=self.options.name,
            cluster_dir=self.dir,
            kubeconfig=self.kubeconfig,
            api_port=self.api_port(),
            bin_dir=self.bin_dir,
            timeout_s=self.options.timeout_s,
            log=self._log,
        )

    def api_port(self) -> int:
        """The API server's port on 127.0.0.1, from the cluster's kubeconfig."""
        config = yaml.safe_load(self.kubeconfig.read_text())
        server = str(config["clusters"][0]["cluster"]["server"])
        return int(server.rsplit(":", 1)[1].rstrip("/"))

    def down(self) -> None:
        """Stop every process of the cluster and remove its state. Safe to repeat."""
        state = self._read_state()
        if state.scheduler_pid > 0:
            processes.stop_process_group(state.scheduler_pid)
        # Named after the cluster, so this works with no state left at all.
        realnode.down(self.options.name, self.dir, log=self._log)
        if self.exists():
            self._log(f"deleting cluster {self.options.name!r}")
            result = self.kwokctl("delete", "cluster", "--name", self.options.name, check=False)
            if result.returncode != 0:
                self._log(f"kwokctl delete failed ({result.stderr.strip()}); removing state")
        shutil.rmtree(self.dir, ignore_errors=True)
        # _create writes these beside the clusters directory; every e2e session
        # has its own name, so they would pile up (two files per session).
        for leftover in (self._kwokctl_config_path, self._merged_kubeconfig_path):
            leftover.unlink(missing_ok=True)

    def _kwokctl_config(self) -> dict[str, Any]:
        b = self.bin_dir
        # Our own ports, not kwokctl's: it counts down from 32767 and checks each
        # port once, so two clusters created side by side (an e2e probe session
        # beside the main one, parallel developers' runs) pick the same numbers
        # and one etcd dies with "address already in use". free_ports() picks at
        # random below the ephemeral range and holds all six until chosen.
        api, etcd, etcd_peer, kcm, sched, kwok = processes.free_ports(6)
        return {
            "apiVersion": KWOKCTL_API,
            "kind": "KwokctlConfiguration",
            "options": {
                "runtime": "binary",
                "bindAddress": "127.0.0.1",
                "securePort": True,
                "kubeAuthorization": True,
                "kubeAdmission": True,
                "kubeApiserverBinary": str(b / "kube-apiserver"),
                "kubeControllerManagerBinary": str(b / "kube-controller-manager"),
                "kubeSchedulerBinary": str(b / "kube-scheduler"),
                "kubectlBinary": str(b / "kubectl"),
                "etcdBinary": str(b / "etcd"),
                "kwokControllerBinary": str(b / "kwok"),
                "kubeApiserverPort": api,
                "etcdPort": etcd,
                "etcdPeerPort": etcd_peer,
                "kubeControllerManagerPort": kcm,
                "kubeSchedulerPort": sched,
                "kwokControllerPort": kwok,
                "kubeFeatureGates": manifests.FEATURE_GATES,
            },
            "componentsPatches": self._component_patches(),
        }

    def _component_patches(self) -> list[dict[str, Any]]:
        """Flags kwokctl's binary runtime does not set, needed once a real node joins.

        kwokctl starts kwok with --manage-all-nodes=true, which would take over a
        real kubelet's node; our fake nodes carry the annotation kwok selects by.
        The API server reaches a kubelet (logs, exec) at its InternalIP (its
        Hostname does not resolve here) with the admin client certificate.
        """
        pki = self.dir / "pki"
        selector = f"{manifests.KWOK_NODE_ANNOTATION}=fake"
        return [
            {
                "name": "kwok-controller",
                "extraArgs": [
                    {"key": "manage-all-nodes", "value": "false", "override": True},
                    {"key": "manage-nodes-with-annotation-selector", "value": selector},
                ],
            },
            {
                "name": "kube-apiserver",
                "extraArgs": [
                    {"key": "kubelet-preferred-address-types", "value": "InternalIP"},
                    {"key": "kubelet-client-certificate", "value": str(pki / "admin.crt")},
                    {"key": "kubelet-client-key", "value": str(pki / "admin.key")},
                ],
            },
        ]

    def _create(self) -> None:
        self._log(f"creating cluster {self.options.name!r} (kwokctl, binary runtime)")
        self.options.workdir.mkdir(parents=True, exist_ok=True)
        config = self._kwokctl_config_path
        config.write_text(yaml.safe_dump(self._kwokctl_config(), sort_keys=False))
        result = self.kwokctl(
            "create",
            "cluster",
            "--name",
            self.options.name,
            "--config",
            str(config),
            "--runtime",
            "binary",
            "--kubeconfig",
            str(self._merged_kubeconfig_path),
            "--wait",
            f"{int(self.options.timeout_s)}s",
            check=False,
        )
        if result.returncode != 0 or not self.api_healthy():
            detail = (result.stderr or result.stdout).strip()[-4000:]
            self.down()
            raise RuntimeError(f"kwokctl could not create cluster {self.options.name!r}:\n{detail}")

    def _apply_nodes(self) -> None:
        o = self.options
        nodes = manifests.gpu_nodes(
            o.nodes, prefix=o.node_prefix, gpus=o.gpus, gpu_memory_mib=o.gpu_memory_mib
        )
        if nodes:
            self._log(
                f"applying {len(nodes)} kwok GPU nodes ({o.gpus} x {o.gpu_memory_mib} MiB GPUs)"
            )
            self.apply(nodes)

    def _start_scheduler(self) -> None:
        old = self._read_state()
        if old.scheduler_pid > 0:
            processes.stop_process_group(old.scheduler_pid)
        self._log(f"starting rlix-scheduler (extender {self.options.extender_url})")
        pid, port = scheduler.start(
            bin_dir=self.bin_dir,
            kubeconfig=self.kubeconfig,
            extender_url=self.options.extender_url,
            workdir=self.dir,
            leader_elect=self.options.leader_elect,
        )
        state = self._read_state()
        state.scheduler_pid, state.scheduler_port = pid, port
        state.extender_url = self.options.extender_url
        self._write_state(state)

    def _wait_nodes_ready(self) -> None:
        if self.options.nodes == 0:
            return
        self.kubectl(
            "wait",
            "--for=condition=Ready",
            "node",
            "-l",
            "type=kwok",
            f"--timeout={int(self.options.timeout_s)}s",
            timeout_s=self.options.timeout_s + 10,
        )


# Longer than any cluster takes to create (kwokctl waits at most 180 s).
UNOWNED_GRACE_S = 900.0


def reap_stale_clusters(
    workdir: Path, bin_dir: Path, *, prefix: str, log: Log = _stderr_log
) -> int:
    """Delete clusters named ``prefix*`` whose owning process is gone.

    A test session killed with SIGKILL cannot clean up after itself; the next
    session does it here, so processes and ports never pile up.
    """
    reaped = 0
    clusters = workdir / "clusters"
    if not clusters.is_dir():
        return 0
    for entry in sorted(clusters.iterdir()):
        if not entry.name.startswith(prefix):
            continue
        cluster = DevCluster(ClusterOptions(name=entry.name, workdir=workdir), bin_dir, log=log)
        owner = cluster._read_state().owner_pid
        if owner > 0 and processes.pid_alive(owner):
            continue
        # No owner yet: a session writes it only once kwokctl has created the
        # cluster, so a young directory may be another live session's cluster
        # being created (reaping it killed that session's etcd and API server).
        age = time.time() - entry.stat().st_mtime
        if owner <= 0 and age < UNOWNED_GRACE_S:
            log(f"leaving cluster {entry.name!r}: no owner recorded yet, changed {age:.0f}s ago")
            continue
        log(f"reaping stale cluster {entry.name!r} (owner pid {owner or 'unknown'} is gone)")
        cluster.down()
        reaped += 1
    return reaped
