"""``rlix-node-agent``: the per-node DaemonSet process (see docs/node-agent.md)."""

from __future__ import annotations

import argparse
import faulthandler
import functools
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from rlix.agent.declared_cycles import DeclaredCycles
from rlix.agent.declared_gpus import DeclaredGpus
from rlix.agent.driver_checkpoint import Checkpointer, CudaDriverCheckpointer, NoCheckpointer
from rlix.agent.gate_parking import DeclaredPeaks, GateParking
from rlix.agent.gpus import GpuBackend
from rlix.agent.identities import CgroupResolver, PodDirectory, static_directory
from rlix.agent.metrics import AgentMetrics
from rlix.agent.park_space import ParkSpace
from rlix.agent.parking_state import StateStore
from rlix.agent.phase_gate import PhaseGate
from rlix.agent.preemption import Preemption
from rlix.agent.publication import BackgroundPublisher
from rlix.agent.publishing import FilePublisher, Publisher
from rlix.agent.relocation import CudaRelocator, DeviceRelocator, SimulatedHbm
from rlix.agent.rosters import Rosters
from rlix.agent.server import AgentServer
from rlix.agent.simulated_gpus import SimulatedBackend
from rlix.agent.slices import SlicePublisher, publish_slices
from rlix.core.mps import MPS_DIR
from rlix.core.names import ANNOTATION_PHASE_SECONDS
from rlix.core.policy.placement import rules_file
from rlix.core.policy.placement.sharing import SharingRules

if TYPE_CHECKING:
    from rlix.agent.conducting import Conducting, NodePod
    from rlix.agent.gate_promises import PromiseWatch
    from rlix.agent.gpus import GpuProcess
    from rlix.agent.kube_publishing import KubePodEvents
    from rlix.agent.kubelet_plugin import KubeletPlugin

DESCRIPTION = """\
RLix node agent. One per GPU node (a privileged DaemonSet with hostPID).

It does three things:
  1. watches the node's GPUs (NVML, or a simulated backend on kwok/CI nodes)
     and publishes them as the node annotation rlix.io/gpus;
  2. serves a unix socket, mounted into pods, where the rlix client library
     reports phases (published as pod annotations rlix.io/phase and
     rlix.io/phase-since). Each caller is identified by the kernel's peer
     credentials (SO_PEERCRED -> PID -> /proc/PID/cgroup -> pod UID), never by
     what it sends, so a pod can only speak for itself;
  3. suspends and resumes pods in place on request: the pod's client parks
     device memory in pinned host memory through its registered hooks (or the
     CUDA driver checkpoint API is used for processes without hooks), and the
     agent records what was parked, with checksums, under --state-dir so a
     restarted agent can still resume it. With a relocation target
     (suspend-pod "target": "host" or "gpu:<i>") the agent itself takes the
     pod's memory: into a park file under --park-dir (host memory on a tmpfs
     that outlives the agent), and for "gpu:<i>" also into spare HBM of that
     GPU, so the pod's process keeps nothing.
"""

EPILOG = """\
examples:
  # on a real GPU node (in the DaemonSet; NODE_NAME from the downward API)
  rlix-node-agent --backend nvml --proc-root /host/proc

  # a local, API-server-free agent for tests and experiments
  rlix-node-agent --no-kube --backend simulated --sim-gpus 8 \\
      --socket /tmp/rlix/agent.sock --state-dir /tmp/rlix/state \\
      --pod-map pods.json --node-name dev-node

  # ask it for its state (any host process running as the agent's user)
  printf '{"v":1,"id":1,"op":"status"}\\n' | socat - UNIX-CONNECT:/tmp/rlix/agent.sock

  # relocate a pod's memory into spare HBM of GPU 3, then bring it back
  printf '{"v":1,"id":1,"op":"suspend-pod","pod_uid":"<uid>","target":"gpu:3"}\\n' \\
      | socat - UNIX-CONNECT:/tmp/rlix/agent.sock
  printf '{"v":1,"id":2,"op":"resume-pod","pod_uid":"<uid>"}\\n' \\
      | socat - UNIX-CONNECT:/tmp/rlix/agent.sock
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rlix-node-agent",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--socket",
        type=Path,
        default=Path("/run/rlix/agent.sock"),
        help="unix socket to serve; mount its directory into pods and point "
        "RLIX_AGENT_SOCKET at it (default: %(default)s)",
    )
    p.add_argument(
        "--state-dir",
        type=Path,
        default=Path("/var/lib/rlix-agent"),
        help="where suspended-pod records live; use a hostPath so they outlive "
        "the agent's pod (default: %(default)s)",
    )
    p.add_argument(
        "--park-dir",
        type=Path,
        default=Path("/dev/shm/rlix-agent/parked"),
        help="where relocated pods' memory is parked (one file per process); a "
        "tmpfs hostPath, so the parked bytes are host memory that outlives the "
        "agent (default: %(default)s)",
    )
    p.add_argument(
        "--backend",
        choices=("nvml", "simulated"),
        default="nvml",
        help="nvml: real GPUs; simulated: GPUs whose memory follows what "
        "processes report (kwok nodes, CI) (default: %(default)s)",
    )
    p.add_argument(
        "--node-name",
        default=os.environ.get("NODE_NAME", ""),
        help="this node's name (default: $NODE_NAME)",
    )
    kube = p.add_mutually_exclusive_group()
    kube.add_argument("--kubeconfig", help="kubeconfig file; in-cluster config when omitted")
    kube.add_argument(
        "--no-kube",
        action="store_true",
        help="no API server: publish to <state-dir>/published.jsonl instead",
    )
    p.add_argument(
        "--pod-map",
        type=Path,
        help="with --no-kube: JSON file {pod-uid: 'namespace/name'} naming pods",
    )
    p.add_argument(
        "--proc-root",
        type=Path,
        default=Path("/proc"),
        help="where to read PID/cgroup from (host /proc with hostPID; a fake tree "
        "in tests) (default: %(default)s)",
    )
    p.add_argument(
        "--control-pod-uid",
        default=os.environ.get("POD_UID", ""),
        help="UID of the agent's own pod, whose processes may suspend, resume and "
        "query like a host administrator (`kubectl exec` into the agent pod and "
        "run `rlix agent ...`) (default: $POD_UID)",
    )
    p.add_argument("--sim-gpus", type=int, default=8, help="simulated backend: GPU count")
    p.add_argument(
        "--sim-gpu-memory-mib",
        type=int,
        default=143_771,
        help="simulated backend: MiB per GPU (default: an H200's)",
    )
    p.add_argument(
        "--publish-interval",
        type=float,
        default=10.0,
        help="seconds between GPU state publications (default: %(default)s)",
    )
    p.add_argument(
        "--suspend-timeout",
        type=float,
        default=300.0,
        help="seconds a suspend/resume request waits for the pod's processes; a "
        "suspend takes effect at the process's next phase boundary "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=0,
        help="serve Prometheus metrics (GPU memory, parked bytes, phases, suspensions) "
        "on this port (0: off; the chart sets nodeAgent.metricsPort)",
    )
    p.add_argument(
        "--metrics-host",
        default="0.0.0.0" if "KUBERNETES_SERVICE_HOST" in os.environ else "127.0.0.1",
        help="address the metrics server listens on (default: 0.0.0.0 in a pod, "
        "127.0.0.1 elsewhere)",
    )
    p.add_argument(
        "--conduct-interval",
        type=float,
        default=1.0,
        help="seconds between looks at this node's pods for desired suspensions "
        "(rlix.io/desired-suspension, docs/conductor.md); kube mode only (default: %(default)s)",
    )
    p.add_argument(
        "--memory-overcommit",
        type=float,
        default=1.0,
        help="the memory capacity each GPU is published with as a gpu.rlix.io DRA "
        "device is its physical memory times this factor (>= 1). Above 1 a waiting "
        "higher-priority job is admitted beside memory the conductor parks for it, "
        "and parking keeps what is resident within physical memory; at 1 a parked "
        "pod's claim still counts in full, so nobody is parked for a waiting job "
        "(docs/conductor.md, 'What parking frees') (default: %(default)s)",
    )
    p.add_argument(
        "--no-dra",
        action="store_true",
        help="do not publish the GPUs as gpu.rlix.io DRA devices: the node keeps "
        "whole GPUs from another driver or device plugin (NVIDIA's)",
    )
    p.add_argument(
        "--overrun-interval",
        type=float,
        default=5.0,
        help="seconds between comparisons of what each pod holds on each GPU with its "
        "budget (rlix.io/gpu-memory-mib at its peak phase); an overrun is reported "
        "as a GPUMemoryOverrun event on the pod and in rlix_agent_memory_overruns. "
        "With --park-at-gate, as often: whether a pod whose role sets loadsThroughGate "
        "allocated before it asked the gate (a LoadedOutsideGate event, "
        "rlix_agent_loads_outside_gate). 0: off; kube mode only (default: %(default)s)",
    )
    p.add_argument(
        "--mps",
        action="store_true",
        help="run and watch the node's CUDA MPS control daemon (in its own mount "
        "namespace, /dev/shm shared with its clients through <mps-dir>/shm) and label "
        "the node rlix.io/mps=true while it runs; roles with `mps:` are placed only "
        "on such nodes (docs/dra.md, 'Kernels side by side')",
    )
    p.add_argument(
        "--mps-dir",
        type=Path,
        default=Path(MPS_DIR),
        help="the node's MPS directory (pipe/, log/, shm/), the same path the "
        "operator mounts into MPS clients (default: %(default)s)",
    )
    p.add_argument(
        "--kubelet-plugin",
        action="store_true",
        help="also serve the kubelet's DRA plugin API for gpu.rlix.io (registration "
        "under <kubelet-dir>/plugins_registry, NodePrepareResources writing CDI specs "
        "into --cdi-dir), so a real kubelet starts pods whose claims name these GPUs; "
        "kube mode with DRA only (the chart sets it with nodeAgent.dra.enabled)",
    )
    p.add_argument(
        "--kubelet-dir",
        type=Path,
        default=Path("/var/lib/kubelet"),
        help="the kubelet's root directory, at the same path the kubelet sees it "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--cdi-dir",
        type=Path,
        default=Path("/var/run/cdi"),
        help="a CDI spec directory the container runtime reads (default: %(default)s)",
    )
    p.add_argument(
        "--vendor-cdi-device",
        default="",
        help="with --kubelet-plugin on real GPU nodes: the GPU vendor's CDI device "
        "each prepared GPU also gets, {uuid} or {index} filled in, e.g. "
        "'nvidia.com/gpu={uuid}' or 'nvidia.com/gpu={index}', whichever names the "
        "node's NVIDIA Container Toolkit CDI spec uses (`nvidia-ctk cdi list`); that "
        "spec injects the device nodes and driver libraries (default: none, as for "
        "simulated GPUs)",
    )
    p.add_argument(
        "--phase-gate",
        action="store_true",
        help="take turns on shared GPUs: a trainer process about to enter a busy phase "
        "(rollout, scoring, training; the client library asks at each phase boundary) "
        "waits while entering would make a GPU its pod shares with a working pod "
        "deliver less than that pod alone, by the interference matrix; a copy "
        "(weight-sync) beside a kernel goes in. Two pods that both declare their cycle "
        "(annotation rlix.io/phase-seconds) take turns only where the simulator's would: "
        "both idle part of it and turns beat running side by side "
        "(docs/node-agent.md, 'The phase gate')",
    )
    rules_file.add_arguments(
        p,
        "with --phase-gate, the gate decides with it (default: the H200 matrix the "
        "simulator ships, measured with time-slicing)",
        park_at_gate=False,
    )
    p.add_argument(
        "--phase-gate-max-wait",
        type=float,
        default=600.0,
        help="seconds a process waits at the gate at most; then it goes in beside "
        "whoever works (default: %(default)s), where its memory fits",
    )
    p.add_argument(
        "--park-at-gate",
        action="store_true",
        help="with --phase-gate: a pod goes into a busy phase only where its memory fits "
        "beside the pods resident on its GPUs; partners that do not work (waiting at the "
        "gate, or outside every phase block) are parked in place first, bit for bit, "
        "largest first, and a pod the gate parked is brought back before it goes in. So "
        "two pods that take turns need the larger of their peaks, not both. A gate park "
        "is a turn, not a suspension: it is not published as rlix.io/suspended and "
        "`rlix agent status` shows it 'parked at the phase gate'. A weight sync may also "
        "park a pod that works, at its next safe point, where its processes said they stop "
        "at safe points (rlix.phase(..., safe_points=True)) and its declared cycle leaves "
        "more of its phase than the stop costs; the gate brings it back once the sync has "
        "left. A resume the conductor wants is handed to the gate, which brings the pod's "
        "memory back at its turn, where it fits, and a first allocation inside "
        "rlix.loading() waits for room on the GPUs its pod declares (rlix.io/gpu-indices). "
        "Experimental: the extender and the operator put pairs on a GPU that only fit "
        "this way when given --park-at-gate too, and only pods whose role sets "
        "loadsThroughGate (its first allocations inside rlix.loading()); a pod so "
        "marked seen allocating before it asked the gate gets a LoadedOutsideGate "
        "event (docs/node-agent.md, 'Parking at the gate')",
    )
    p.add_argument("--log-level", default="INFO", help="(default: %(default)s)")
    return p


def _pod_directory(args: argparse.Namespace, api: object | None) -> PodDirectory:
    if api is not None:
        from rlix.agent.kube_publishing import KubePodDirectory

        return KubePodDirectory(api, node=args.node_name)
    pods: dict[str, tuple[str, str]] = {}
    if args.pod_map is not None:
        raw = json.loads(args.pod_map.read_text())
        for uid, key in raw.items():
            namespace, sep, name = str(key).partition("/")
            if not sep or not namespace or not name:
                raise SystemExit(f"--pod-map: {uid!r} must map to 'namespace/name', got {key!r}")
            pods[uid] = (namespace, name)
    return static_directory(pods)


def _start_conducting(
    args: argparse.Namespace,
    api: object,
    preemption: Preemption,
    publisher: BackgroundPublisher,
    now: Callable[[], datetime],
    *,
    rosters: Rosters,
) -> Conducting:
    """Carry out the conductor's desired suspensions for this node's pods (and
    keep their elastic rosters for the socket's ``active-replicas``)."""
    from rlix.agent.conducting import Conducting
    from rlix.agent.kube_publishing import KubeNodePods
    from rlix.agent.preemption import rfc3339

    conducting = Conducting(
        node=args.node_name,
        pods=KubeNodePods(api, node=args.node_name),
        executor=preemption,
        publisher=publisher,
        now=now,
        rfc3339=rfc3339,
        rosters=rosters,
        hand_over=preemption.hand_to_gate if args.park_at_gate else None,
    )
    stop = threading.Event()
    threading.Thread(target=conducting.run, args=(stop, args.conduct_interval), daemon=True).start()
    return conducting


def _start_memory_watches(
    args: argparse.Namespace,
    api: object,
    backend: GpuBackend,
    metrics: AgentMetrics,
    stop: threading.Event,
    *,
    pods: Callable[[], Sequence[NodePod]],
    gate: PhaseGate | None,
    preemption: Preemption,
) -> None:
    """Compare what each pod holds on each GPU with its declared budget
    (docs/dra.md), and, where the gate parks, with whether it asked the gate
    before it loaded (``_promise_watch``), every ``--overrun-interval``.

    ``pods``: the conducting loop's last listing of the node's pods, which it
    makes every ``--conduct-interval`` anyway; the watches make no list call.
    """
    from rlix.agent.kube_publishing import KubePodEvents
    from rlix.agent.overruns import OverrunReports, OverrunWatch
    from rlix.agent.pod_watches import run_every

    # One thread and one reading of the GPUs' processes per pass, for both.
    held: list[Sequence[GpuProcess]] = [()]
    events = KubePodEvents(api, node=args.node_name)
    watches: list[OverrunWatch | PromiseWatch] = [
        OverrunWatch(
            processes=lambda: held[0],
            pod_of_pid=functools.partial(_pod_of_pid, args.proc_root),
            pods=pods,
            reporter=OverrunReports(node=args.node_name, events=events, metrics=metrics),
        )
    ]
    if gate is not None and gate.parks:
        watches.append(
            _promise_watch(
                args,
                events,
                metrics,
                gate=gate,
                preemption=preemption,
                pods=pods,
                processes=lambda: held[0],
            )
        )

    def one_pass() -> None:
        held[0] = list(backend.processes())
        for watch in watches:
            watch.check()

    threading.Thread(
        target=run_every,
        args=(one_pass, stop, args.overrun_interval),
        name="rlix-memory-watches",
        daemon=True,
    ).start()


def _promise_watch(
    args: argparse.Namespace,
    events: KubePodEvents,
    metrics: AgentMetrics,
    *,
    gate: PhaseGate,
    preemption: Preemption,
    pods: Callable[[], Sequence[NodePod]],
    processes: Callable[[], Iterable[GpuProcess]],
) -> PromiseWatch:
    """Where the gate parks: the watch for pods whose role promised to load
    through the gate (``loadsThroughGate``) seen allocating before they asked
    it (``gate_promises``), run every ``--overrun-interval`` as the overrun
    watch is, on the conducting loop's listing."""
    from rlix.agent.gate_promises import OutsideLoadReports, PromiseWatch

    return PromiseWatch(
        processes=processes,
        pod_of_pid=functools.partial(_pod_of_pid, args.proc_root),
        pods=pods,
        asked=gate.asked,
        parked=lambda uid: preemption.parked_bytes(uid) is not None,
        report=OutsideLoadReports(node=args.node_name, events=events, metrics=metrics),
        keep_asked=gate.keep_asked,
    )


def _pod_of_pid(proc_root: Path, pid: int) -> str | None:
    """The pod uid of process ``pid`` (cgroups), None where it has exited
    since NVML listed it."""
    from rlix.agent.cgroups import CgroupError, pod_uid_of_pid

    try:
        return pod_uid_of_pid(pid, proc_root=proc_root)
    except CgroupError:
        return None


def _start_mps(args: argparse.Namespace, api: object | None, stop: threading.Event) -> None:
    """Run the MPS control daemon and label the node while it runs (docs/dra.md)."""
    from rlix.agent.mps import MpsSupervisor, MpsUnavailableError
    from rlix.core import mps

    def label(on: bool) -> None:
        if api is None:
            logging.info("MPS control daemon %s (no API server: no node label)", on)
            return
        from rlix.agent.kube_publishing import KubePublisher

        value = "true" if on else None
        try:
            KubePublisher(api).patch_node_labels(
                node=args.node_name, labels={mps.NODE_LABEL_MPS: value}
            )
        except Exception as exc:  # retried at the next change; the daemon still runs
            logging.warning("could not set node label %s: %s", mps.NODE_LABEL_MPS, exc)

    supervisor = MpsSupervisor(mps.MpsPaths(str(args.mps_dir)), label=label)
    try:
        supervisor.prepare()
    except MpsUnavailableError as exc:
        logging.error(
            "--mps: %s; running without MPS (the node is not labelled %s)", exc, mps.NODE_LABEL_MPS
        )
        label(False)
        return
    threading.Thread(target=supervisor.run, args=(stop,), name="rlix-mps", daemon=True).start()


def _phase_gate(
    args: argparse.Namespace,
    backend: GpuBackend,
    resolver: CgroupResolver,
    preemption: Preemption,
    metrics: AgentMetrics,
    *,
    cycles: DeclaredCycles,
    peaks: DeclaredPeaks,
    gpus: DeclaredGpus,
) -> PhaseGate | None:
    """The phase gate for --phase-gate (None without it); ValueError for a bad matrix.
    ``cycles``, ``peaks`` and ``gpus`` read what pods declare once the conducting
    loop lists them."""
    if not args.phase_gate:
        return None
    rules = rules_file.rules_from(
        args.interference,
        args.interference_mode,
        default=SharingRules(parks_at_gate=args.park_at_gate),
    )

    def pod_memory() -> dict[str, dict[int, int]]:
        held: dict[str, dict[int, int]] = {}
        for proc in backend.processes():
            uid = resolver.pod_uid(proc.pid)
            if uid is not None:
                on_gpus = held.setdefault(uid, {})
                on_gpus[proc.gpu_index] = on_gpus.get(proc.gpu_index, 0) + proc.used_mib
        return held

    def pod_gpus() -> dict[str, frozenset[int]]:
        return {uid: frozenset(gpus) for uid, gpus in pod_memory().items()}

    def memory() -> tuple[dict[str, dict[int, int]], dict[int, int], dict[str, int], set[str]]:
        # What the pods may use of a GPU: its memory less what no pod holds
        # there (the agent's own parked copies in HBM, processes of no pod).
        held = pod_memory()
        room = {}
        for g in backend.gpus():
            pods_mib = sum(on_gpus.get(g.index, 0) for on_gpus in held.values())
            room[g.index] = g.memory_mib - max(0, g.used_mib - pods_mib)
        return held, room, peaks(), preemption.parkable_at_gate()

    parking = GateParking(preemption) if args.park_at_gate else None

    def waited(seconds: float, at_bound: bool) -> None:
        outcome = "bound" if at_bound else "turn"
        metrics.phase_gate_waits.labels(args.node_name, outcome).observe(seconds)

    return PhaseGate(
        rules,
        args.phase_gate_max_wait,
        gpus=pod_gpus,
        parked=lambda uid: preemption.parked_bytes(uid) is not None,
        cycles=cycles,
        on_wait=waited,
        memory=memory if parking is not None else None,
        moves=parking,
        declared_gpus=gpus,
    )


def _start_phase_gate(
    args: argparse.Namespace,
    gate: PhaseGate,
    server: AgentServer,
    preemption: Preemption,
    *,
    reads_cycles: bool,
) -> None:
    """Decide again whenever memory moves (a parked pod holds nothing; a restored
    one may be waited for), and wake waiters at their bound."""

    def memory_moved() -> None:
        server.publish_gpus()
        gate.poke()

    preemption.on_memory_moved = memory_moved
    threading.Thread(
        target=gate.run, args=(server.stopped,), name="rlix-phase-gate", daemon=True
    ).start()
    logging.info(
        "phase gate on (waits at most %.0f s; matrix: %s; %s)",
        args.phase_gate_max_wait,
        rules_file.origin(args.interference, args.interference_mode),
        f"pairs that both declare {ANNOTATION_PHASE_SECONDS} take turns where the "
        "simulator's would, the others at every meeting that loses progress"
        if reads_cycles
        else "no API server to read pods' cycles from: pairs take turns at every meeting "
        "that loses progress",
    )


def _gpu_backend(args: argparse.Namespace) -> tuple[GpuBackend, Checkpointer, DeviceRelocator]:
    """The GPUs, the driver checkpointer and the relocator for --backend."""
    if args.backend == "simulated":
        simulated = SimulatedBackend(gpu_count=args.sim_gpus, memory_mib=args.sim_gpu_memory_mib)
        return (
            simulated,
            NoCheckpointer("simulated GPUs have no driver to checkpoint"),
            SimulatedHbm(simulated),
        )
    from rlix.agent.nvml_gpus import NvmlBackend

    return NvmlBackend(), CudaDriverCheckpointer(), CudaRelocator()


def _publishers(args: argparse.Namespace) -> tuple[object | None, Publisher, SlicePublisher | None]:
    """(API client or None, the annotation publisher, the DRA slice publisher or None)."""
    if args.no_kube:
        return None, FilePublisher(args.state_dir / "published.jsonl"), None
    from rlix.agent.kube_publishing import KubePublisher, KubeSliceApi, core_v1_api

    api = core_v1_api(args.kubeconfig)
    slices = None
    if not args.no_dra:
        slices = SlicePublisher(
            KubeSliceApi(api), node=args.node_name, overcommit=args.memory_overcommit
        )
    return api, KubePublisher(api), slices


def _start_slices(
    slices: SlicePublisher, backend: GpuBackend, interval_s: float, stop: threading.Event
) -> None:
    threading.Thread(
        target=publish_slices,
        args=(slices, backend, interval_s, stop),
        name="rlix-slices",
        daemon=True,
    ).start()


def _kubelet_plugin(args: argparse.Namespace, api: object, backend: GpuBackend) -> KubeletPlugin:
    from rlix.agent.claim_preparing import ClaimPreparer
    from rlix.agent.kube_publishing import KubeSliceApi
    from rlix.agent.kubelet_plugin import KubeletPlugin

    preparer = ClaimPreparer(
        KubeSliceApi(api),
        backend.gpus,
        node=args.node_name,
        cdi_dir=args.cdi_dir,
        vendor_cdi_device=args.vendor_cdi_device,
    )
    plugin = KubeletPlugin(preparer, kubelet_dir=args.kubelet_dir)
    plugin.start()
    return plugin


def _argument_error(args: argparse.Namespace) -> str | None:
    """What is wrong with the flags together (argparse checks each alone), or None."""
    if not args.node_name:
        return "--node-name (or $NODE_NAME) is required"
    if args.memory_overcommit < 1:
        return f"--memory-overcommit must be >= 1, got {args.memory_overcommit}"
    if args.kubelet_plugin and (args.no_kube or args.no_dra):
        return "--kubelet-plugin needs the API server and DRA (not with --no-kube or --no-dra)"
    if args.vendor_cdi_device:
        from rlix.agent.cdi import CdiError, check_vendor_template

        try:
            check_vendor_template(args.vendor_cdi_device)
        except CdiError as exc:
            return f"--vendor-cdi-device: {exc}"
    if args.pod_map is not None and not args.no_kube:
        return "--pod-map only applies with --no-kube"
    if not args.phase_gate and args.interference is not None:
        return "--interference is the phase gate's matrix: give --phase-gate too"
    if args.phase_gate_max_wait <= 0:
        return f"--phase-gate-max-wait must be > 0 seconds, got {args.phase_gate_max_wait}"
    if args.park_at_gate and not args.phase_gate:
        return "--park-at-gate parks for the phase gate's turns: give --phase-gate too"
    return None


def _recover(preemption: Preemption) -> None:
    """What a (re)started agent finds of its last run, settled before it serves."""
    preemption.reap()  # processes that exited while this agent was down
    preemption.reconcile_parks()  # copies a killed agent left half-done or unowned
    for problem in preemption.load_problems:
        logging.error("unreadable suspended-pod record (kept for inspection): %s", problem)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    error = _argument_error(args)
    if error is not None:
        print(f"rlix-node-agent: {error}", file=sys.stderr)
        return 2

    backend, checkpointer, relocator = _gpu_backend(args)
    api, port, slices = _publishers(args)

    def now() -> datetime:
        return datetime.now(UTC)

    publisher = BackgroundPublisher(port)
    preemption = Preemption(
        store=StateStore(args.state_dir),
        backend=backend,
        checkpointer=checkpointer,
        publisher=publisher,
        now=now,
        timeout_s=args.suspend_timeout,
        parks=ParkSpace(args.park_dir),
        relocator=relocator,
    )
    _recover(preemption)
    metrics = AgentMetrics(args.node_name)
    metrics.watch(backend.gpus, lambda: list(preemption.suspended.values()))
    resolver = CgroupResolver(proc_root=args.proc_root, directory=_pod_directory(args, api))
    cycles, peaks, gpus = DeclaredCycles(), DeclaredPeaks(), DeclaredGpus()
    try:
        gate = _phase_gate(
            args, backend, resolver, preemption, metrics, cycles=cycles, peaks=peaks, gpus=gpus
        )
    except ValueError as exc:
        print(f"rlix-node-agent: {exc}", file=sys.stderr)
        return 2
    server = AgentServer(
        socket_path=args.socket,
        node_name=args.node_name,
        resolver=resolver,
        backend=backend,
        publisher=publisher,
        preemption=preemption,
        now=now,
        control_pod_uid=args.control_pod_uid,
        metrics=metrics,
        gate=gate,
    )
    preemption.on_memory_moved = server.publish_gpus
    server.bind()
    if args.metrics_port:
        metrics.serve(args.metrics_port, args.metrics_host)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        server.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # `kill -USR1` prints every thread's stack to the log: what an agent that
    # does not stop, or stops answering, is doing (the tests' harness asks it).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    server.publish_gpus()
    threading.Thread(target=server.publish_loop, args=(args.publish_interval,), daemon=True).start()
    if slices is not None:
        _start_slices(slices, backend, args.publish_interval, server.stopped)
    reason = checkpointer.unsupported_reason()
    logging.info(
        "listening on %s (backend %s, node %s); transparent suspend: %s; "
        "CUDA IPC relocation: %s; park dir %s",
        args.socket,
        backend.name,
        args.node_name,
        reason or "available",
        relocator.unsupported_reason() or "available",
        args.park_dir,
    )
    if gate is not None:
        _start_phase_gate(args, gate, server, preemption, reads_cycles=api is not None)
    if args.mps:
        _start_mps(args, api, server.stopped)
    if api is not None:
        conducting = _start_conducting(
            args, api, preemption, publisher, now, rosters=server.rosters
        )
        # The phase gate's view of which pairs take turns, of the memory a pod
        # going in may grow to, and of the GPUs a pod loads onto.
        for declared in (cycles, peaks, gpus):
            declared.follow(conducting.listed)
        if args.overrun_interval > 0:
            _start_memory_watches(
                args, api, backend, metrics, server.stopped,
                pods=conducting.listed, gate=gate, preemption=preemption,
            )  # fmt: skip
    plugin = _kubelet_plugin(args, api, backend) if args.kubelet_plugin else None
    server.serve_forever()
    if plugin is not None:
        plugin.stop()
    publisher.flush(timeout=5)
    publisher.stop()
    return 0
