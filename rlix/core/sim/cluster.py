"""The simulated cluster: which job sits on which GPU, and cheap indexes over it.

The policy scans the nodes it is shown, so showing it all 1,000 nodes for every
pod would make a large run quadratic. kube-scheduler has the same problem and
scores only a sample of feasible nodes (percentageOfNodesToScore). We keep two
incremental indexes -- nodes by number of untouched GPUs, and (for policies
that share GPUs) nodes by how many GPUs have a given level of memory left --
and show the policy a bounded sample of nodes that *could* fit. The indexes are
supersets of what the policy would accept, so they never hide a fitting node
from a cluster smaller than the sample; at scale they bound the work.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from rlix.core.sim.runs import Run, State
from rlix.core.sim.workload import COLOCATED_ROLE
from rlix.core.snapshot import ClusterSnapshot, Node, Workload

LEVELS = 16  # memory levels of the sharing index (1/16 of a GPU each)
ROLE = COLOCATED_ROLE  # verl's colocated worker role: one pod per node


def pod_name(run: Run, k: int) -> str:
    return f"{run.spec.name}/p{k}"


class Cluster:
    def __init__(self, nodes: int, gpus_per_node: int, memory_mib: int, shares: bool) -> None:
        self.gpus_per_node = gpus_per_node
        self.memory_mib = memory_mib
        self.shares = shares
        self.names = [f"node-{i:04d}" for i in range(nodes)]
        self.index = {n: i for i, n in enumerate(self.names)}
        self.nodes = [
            Node(name, gpus_per_node, memory_mib, product="NVIDIA-H200") for name in self.names
        ]
        self.res: list[list[list[int]]] = [[[] for _ in range(gpus_per_node)] for _ in self.names]
        self.minmem: list[list[int]] = [[0] * gpus_per_node for _ in self.names]
        self.free = [gpus_per_node] * nodes
        self.by_free: list[dict[int, None]] = [{} for _ in range(gpus_per_node + 1)]
        self.by_free[gpus_per_node] = dict.fromkeys(range(nodes))
        self.occupied: dict[int, None] = {}
        self.held = 0  # GPUs holding at least one pod (what capacity divides by)
        # Per node, bumps whenever a pod leaves: room can only have appeared
        # on a node whose counter moved (what parked jobs wait for).
        self.released = [0] * nodes
        self._share: dict[tuple[int, int], dict[int, None]] = {}
        self._share_keys: list[set[tuple[int, int]]] = [set() for _ in self.names]
        if shares:
            for i in range(nodes):
                self._reindex_share(i)

    @property
    def total_gpus(self) -> int:
        return len(self.names) * self.gpus_per_node

    def _level(self, free_mib: int) -> int:
        return max(0, min(LEVELS, free_mib * LEVELS // self.memory_mib))

    def _reindex_share(self, node: int) -> None:
        levels = sorted((self._level(self.memory_mib - m) for m in self.minmem[node]), reverse=True)
        keys = {(lvl, g) for g in range(1, len(levels) + 1) for lvl in range(levels[g - 1] + 1)}
        old = self._share_keys[node]
        for key in old - keys:
            del self._share[key][node]
        for key in keys - old:
            self._share.setdefault(key, {})[node] = None
        self._share_keys[node] = keys

    def _set_free(self, node: int) -> None:
        before = self.free[node]
        after = sum(1 for holders in self.res[node] if not holders)
        if after != before:
            self.held += before - after
            del self.by_free[before][node]
            self.by_free[after][node] = None
            self.free[node] = after
        if after == self.gpus_per_node:
            self.occupied.pop(node, None)
        else:
            self.occupied[node] = None

    def attach(self, run: Run) -> None:
        """Put ``run``'s pods on their GPUs (memory resident)."""
        low = run.profile.min_mib
        for node, gpus in run.placements:
            for g in gpus:
                self.res[node][g].append(run.id)
                self.minmem[node][g] += low
            self._set_free(node)
            if self.shares:
                self._reindex_share(node)

    def detach(self, run: Run) -> None:
        low = run.profile.min_mib
        for node, gpus in run.placements:
            self.released[node] += 1
            for g in gpus:
                self.res[node][g].remove(run.id)
                self.minmem[node][g] -= low
            self._set_free(node)
            if self.shares:
                self._reindex_share(node)

    def candidates(self, gpus: int, min_mib: int, limit: int) -> list[int]:
        """Up to ``limit`` nodes with ``gpus`` untouched GPUs, spread over fill levels,
        plus (sharing policies) up to ``limit`` nodes with ``gpus`` GPUs that have
        ``min_mib`` left after their residents' smallest phase."""
        pools = [
            self.by_free[k] for k in range(self.gpus_per_node, gpus - 1, -1) if self.by_free[k]
        ]
        chosen: dict[int, None] = {}
        iters = [iter(p) for p in pools]
        while iters and len(chosen) < limit:
            for it in list(iters):
                node = next(it, None)
                if node is None:
                    iters.remove(it)
                elif len(chosen) < limit:
                    chosen[node] = None
        if self.shares:
            extra = 0
            for node in self._share.get((self._level(min_mib), gpus), {}):
                if extra >= limit:
                    break
                if node not in chosen:
                    chosen[node] = None
                    extra += 1
        return list(chosen)

    def residents(self, node: int) -> set[int]:
        return {j for holders in self.res[node] for j in holders}

    def snapshot(self, nodes: Iterable[int], runs: Sequence[Run], t: float) -> ClusterSnapshot:
        """What the policy sees: the given nodes and every pod of the jobs on them."""
        picked = list(dict.fromkeys(nodes))
        jobs: dict[int, None] = {}
        for node in picked:
            jobs.update(dict.fromkeys(sorted(self.residents(node))))
        workloads = [w for j in jobs for w in pods_of(runs[j], t, self)]
        return ClusterSnapshot.of((self.nodes[n] for n in picked), workloads)


def pods_of(run: Run, t: float, cluster: Cluster) -> tuple[Workload, ...]:
    """The job's pods as Workloads: bound ones where they sit, else unbound.

    Memoised on the run until its phase or placement changes: a busy node's
    residents are rebuilt for every decision otherwise, and Workloads are
    immutable, so sharing them between snapshots is safe.
    """
    spec, phase = run.spec, None
    if run.state is State.RUNNING:
        phase = run.phase_at(t)
    # Work left changes with every step: keyed by its power of sqrt(2), which
    # is all the same-class displacement test (a factor of 2) can tell apart.
    left = run.reported_left()
    key = (phase, run.state, tuple(run.placements), round(2 * math.log2(left)) if left else None)
    cached = run.pod_cache
    if cached is not None and cached[0] == key:
        return cached[1]
    pods, profile = spec.pods, run.profile
    out = []
    for k, (role, per_pod) in enumerate(zip(spec.pod_roles, spec.pod_gpus, strict=True)):
        node, gpus = run.placements[k] if k < len(run.placements) else (None, ())
        out.append(
            Workload(
                name=pod_name(run, k),
                job=spec.name,
                role=role,
                gpus=per_pod,
                memory_mib=profile.pod_memory_mib(role),
                priority=spec.priority,
                preemptible=spec.preemptible,
                phase=run.pod_phase(k, phase) if phase is not None else None,
                node=cluster.names[node] if node is not None else None,
                gpu_indices=gpus,
                gang_size=pods,
                # The simulator's pods load through the gate where it parks
                # (``Simulation._start_loads``); elsewhere the flag is unread.
                loads_through_gate=True,
                load_profile=profile.pod_load_profile(role),
                iteration_s=profile.iteration_s,
                work_left=left,
            )
        )
    built = tuple(out)
    run.pod_cache = (key, built)
    return built
