"""An immutable picture of the cluster, the one input every policy reads.

The extender builds it from its watch-fed cache, the operator from its informers
and the simulator from its own state; the policy code cannot tell them apart, so
a benchmark of the simulator measures the code that ships. Nothing here does
I/O, reads a clock or the environment.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property

from rlix.core.phases import Phase


@dataclass(frozen=True, slots=True)
class GPU:
    """One physical GPU as the node agent last reported it."""

    index: int
    memory_mib: int
    used_mib: int = 0
    utilization: float = 0.0  # SM utilisation, 0..1


@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint that keeps pods off (effects NoSchedule and NoExecute)."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod toleration, matched as kube-scheduler matches it."""

    key: str = ""  # "" with operator Exists tolerates every taint
    operator: str = "Equal"  # or "Exists"
    value: str = ""
    effect: str = ""  # "" tolerates every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


@dataclass(frozen=True, slots=True)
class Node:
    """A GPU node. ``gpus`` is empty until a node agent publishes live state."""

    name: str
    gpu_count: int
    gpu_memory_mib: int
    product: str = ""
    # Nodes that share a domain are joined by NVLink (e.g. one NVL72 rack); None
    # means NVLink stops at the node boundary.
    nvlink_domain: str | None = None
    schedulable: bool = True
    gpus: tuple[GPU, ...] = ()
    # RLix's agent publishes the GPUs as gpu.rlix.io DRA devices with consumable
    # memory: pods get pinned ResourceClaims and may share a GPU. False: whole
    # nvidia.com/gpu (a device plugin or another driver hands them out).
    claims: bool = False
    # On a claims node: published memory / physical memory per GPU (>= 1). The
    # part above physical takes only parked memory: a waiting job is admitted
    # into what lower-priority pods parked, while what is resident stays
    # within physical memory (the conductor parks to keep it so).
    memory_overcommit: float = 1.0
    # What kube-scheduler matches a pod's nodeSelector and tolerations against.
    # Admission plans a gang onto one node and pins it there, so it must not
    # pick a node the scheduler would refuse for these reasons.
    labels: tuple[tuple[str, str], ...] = ()
    taints: tuple[Taint, ...] = ()


@dataclass(frozen=True, slots=True)
class PhaseLoad:
    """One segment of a job's iteration, as the sharing rules weigh it.

    ``share``: its fraction of the iteration's time when the job runs alone;
    ``pressure``: the fraction of the GPU's kernels it keeps running, what
    slows a co-runner (a rollout waiting on tools presses less than 1).
    """

    phase: Phase
    share: float
    pressure: float = 1.0

    def __post_init__(self) -> None:
        if not (0.0 <= self.share <= 1.0 and 0.0 <= self.pressure <= 1.0):
            raise ValueError(f"PhaseLoad share/pressure must lie in [0, 1]: {self}")


def load_profile_of(seconds: Mapping[Phase, float]) -> tuple[tuple[PhaseLoad, ...], float]:
    """A pod's segments and its iteration's seconds from the seconds it spends in
    each phase of one iteration (``rlix.io/phase-seconds``): each phase's share
    of the total, busy phases at full pressure (a cluster measures none lower),
    idle at none. ``((), 0.0)`` when nothing is declared."""
    total = float(sum(seconds.values()))
    if total <= 0:
        return (), 0.0
    profile = tuple(
        PhaseLoad(phase, s / total, 0.0 if phase is Phase.IDLE else 1.0)
        for phase, s in seconds.items()
        if s > 0
    )
    return profile, total


@dataclass(frozen=True, slots=True)
class Workload:
    """One pod of an RL job, reduced to what placement and preemption need.

    ``memory_mib`` is the per-GPU memory the pod needs in each phase; a phase it
    does not list costs its peak, the safe assumption for a phase it may enter.
    """

    name: str  # "namespace/pod"
    job: str  # "namespace/rljob"
    role: str
    gpus: int
    memory_mib: Mapping[Phase, int] = field(default_factory=dict)
    priority: int = 0
    preemptible: bool = False  # may be suspended in place
    phase: Phase | None = None
    node: str | None = None
    gpu_indices: tuple[int, ...] = ()
    suspended: bool = False  # memory parked off the GPU; it must be able to return
    # Its processes allocate GPU memory first inside ``rlix.loading()``, so
    # their loads wait at the phase gate like its phases (the role's
    # ``loadsThroughGate``). Only such pods take turns over memory where the
    # gate parks (``sharing.needed_mib``): one that allocates outside the
    # gate would land in memory a working partner holds.
    loads_through_gate: bool = False
    gang_size: int = 1  # pods of the job that must run together
    # The pod's nodeSelector and tolerations (planned pods: from the role's
    # template plus RLix's GPU toleration); what a node must match to be planned.
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    # The segments of one iteration with their time shares and pressures
    # (``PhaseLoad``); empty when unknown, and then the sharing rules assume
    # every declared phase at full pressure. The simulator fills it from its
    # job model; in a cluster each pod says it (``rlix.io/phase-seconds``, from
    # the RLJob's phaseProfile: busy phases at full pressure, ``load_profile_of``).
    load_profile: tuple[PhaseLoad, ...] = ()
    # Alone seconds of one iteration of its job (what the profile's shares
    # divide); 0 when unknown. The phase gate's pair estimate needs it
    # (``placement.gating``): turns only pay between cycles of similar length.
    iteration_s: float = 0.0
    # Expected GPU-seconds of work its job has left; 0 when unknown (or, for a
    # running job that would set the finish, withheld so its class never parks
    # it). Orders and displaces jobs inside a priority (``policy.ordering``).
    work_left: float = 0.0

    @property
    def peak_memory_mib(self) -> int:
        return max(self.memory_mib.values(), default=0)

    def memory_in(self, phase: Phase | None) -> int:
        """Per-GPU memory in ``phase`` (peak when the phase is unknown or unlisted)."""
        if phase is None:
            return self.peak_memory_mib
        return self.memory_mib.get(phase, self.peak_memory_mib)

    def refused_by(self, node: Node) -> str | None:
        """Why kube-scheduler would keep this pod off ``node`` for its selector or
        taints, or None (required node affinity beyond nodeSelector is not read)."""
        if not self.node_selector and not node.taints:
            return None  # the common case, asked for every node of every filter call
        labels = dict(node.labels)
        for key, value in self.node_selector:
            if labels.get(key) != value:
                return f"node does not match the pod's nodeSelector {key}={value}"
        for taint in node.taints:
            if not any(t.tolerates(taint) for t in self.tolerations):
                shown = f"{taint.key}={taint.value}" if taint.value else taint.key
                return f"node has taint {shown}:{taint.effect} the pod does not tolerate"
        return None


@dataclass(frozen=True)
class ClusterSnapshot:
    """Nodes and the workloads placed on (or waiting for) them."""

    nodes: Mapping[str, Node]
    workloads: tuple[Workload, ...] = ()

    @classmethod
    def of(cls, nodes: Iterable[Node], workloads: Iterable[Workload] = ()) -> ClusterSnapshot:
        return cls(nodes={n.name: n for n in nodes}, workloads=tuple(workloads))

    @cached_property
    def _by_node(self) -> Mapping[str, tuple[Workload, ...]]:
        index: dict[str, list[Workload]] = {}
        for w in self.workloads:
            if w.node is not None:
                index.setdefault(w.node, []).append(w)
        return {k: tuple(v) for k, v in index.items()}

    def on_node(self, node: str) -> tuple[Workload, ...]:
        """Workloads bound to ``node`` (suspended ones included)."""
        return self._by_node.get(node, ())

    def with_workload(self, workload: Workload) -> ClusterSnapshot:
        """A what-if copy with ``workload`` added or replaced (matched by name)."""
        kept = tuple(w for w in self.workloads if w.name != workload.name)
        return replace(self, workloads=(*kept, workload))

    def without(self, names: Iterable[str]) -> ClusterSnapshot:
        """A what-if copy with the named workloads removed (preemption trials).

        What they run on their GPUs comes off the agents' measurements too
        (``_unmeasured``).
        """
        drop = set(names)
        leaving = [w for w in self.workloads if w.name in drop]
        return replace(
            self,
            nodes=_unmeasured(self.nodes, leaving),
            workloads=tuple(w for w in self.workloads if w.name not in drop),
        )

    def parking(self, names: Iterable[str]) -> ClusterSnapshot:
        """A what-if copy with the named workloads suspended: their memory parked
        off their GPUs (and off the agents' measurements, ``_unmeasured``)."""
        park = set(names)
        going = [w for w in self.workloads if w.name in park and not w.suspended]
        return replace(
            self,
            nodes=_unmeasured(self.nodes, going),
            workloads=tuple(
                replace(w, suspended=True) if w.name in park else w for w in self.workloads
            ),
        )


def _unmeasured(nodes: Mapping[str, Node], leaving: Iterable[Workload]) -> Mapping[str, Node]:
    """``nodes`` as their agents would measure them once ``leaving`` is off its GPUs.

    What an agent measured in use (``GPU.used_mib``) is a floor for what a GPU
    owes, because memory used outside any known pod is still taken. The
    measurement includes the running workloads themselves, so a trial that
    removes or parks one must take its memory off the measurement as well:
    otherwise the floor keeps a victim's memory taken after the victim is gone,
    and no trial could ever free a GPU a live agent reports on. A suspended
    workload's memory is already off the GPU, and a workload whose GPUs are not
    known cannot be taken off any.
    """
    less: dict[tuple[str, int], int] = {}
    for w in leaving:
        if w.suspended or w.node is None or w.node not in nodes:
            continue
        for index in w.gpu_indices:
            key = (w.node, index)
            less[key] = less.get(key, 0) + w.memory_in(w.phase)
    if not less:
        return nodes
    out = dict(nodes)
    for name in {node for node, _ in less}:
        node = nodes[name]
        if not any(g.used_mib for g in node.gpus):
            continue
        gpus = tuple(
            replace(g, used_mib=max(g.used_mib - less.get((name, g.index), 0), 0))
            for g in node.gpus
        )
        out[name] = replace(node, gpus=gpus)
    return out
