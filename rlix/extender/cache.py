"""The extender's in-memory picture of the cluster, fed by watch events.

kube-scheduler calls the extender on its hot path, so a request must answer
from memory and never call the API server. This store is plain Python fed by
``apply_node`` / ``apply_pod`` with the event type and the object exactly as a
watch delivers them; the watcher (``rlix.extender.watcher``) is a thin loop
around it, and every rule here is testable without a cluster.

Reads get an immutable ``PlacementView`` that is rebuilt only after an event
changed something. The rebuild is incremental: per-node GPU loads (and the
answers memoised on them) are kept, and only nodes an event touched get a new
load, because a busy RL cluster flips pod phases every few seconds and a full
rebuild per scheduling call would cost tens of ms at 5,000 nodes. A lock makes
events from watcher threads and reads from the event loop safe.

Which GPUs a pod holds: on nodes RLix drives by DRA the pod's ResourceClaim
allocation says it (``apply_claim``), and the cache believes nothing else: an
allocated pod counts on the allocated node and GPUs from the moment the
scheduler writes the allocation (before the pod is even bound), and a pod whose
claim is not allocated yet holds nothing. Elsewhere (whole nvidia.com/gpu) the
policy's spread rule stands in for the device plugin's choice.

Every object is read through the core reader (``rlix.core.objects``), which
bounds every value: a malformed label or annotation on one object becomes an
error recorded for that object (logged once, shown by ``object_errors``, a
gauge in /metrics) and that object's safe reading, never an exception that
would end the watch and empty the cache for everyone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Final

from rlix.core import dra
from rlix.core.objects import ObjectError, pod_name, read_node, read_pod
from rlix.core.policy.placement import NodeLoad, PlacementView, node_load
from rlix.core.policy.placement.sharing import DEFAULT_RULES, SharingRules
from rlix.core.snapshot import ClusterSnapshot, Node, Workload

log = logging.getLogger("rlix.extender.cache")

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"

# How long a pod this extender named as a preemption victim is awaited. The
# scheduler deletes the victims on the node it picks at once; a victim still
# held after this was on a node it did not pick, and is not waited for.
VICTIM_WAIT_S: Final = 30.0


class ClusterCache:
    """Nodes and bound pods, keyed the way the scheduler names them."""

    def __init__(
        self, rules: SharingRules = DEFAULT_RULES, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """``rules``: who may share a GPU with whom (``--interference`` adds rules 4-6);
        ``clock``: monotonic seconds (how long preemption victims are awaited)."""
        self.rules = rules
        self._lock = threading.Lock()
        self._nodes: dict[str, Node] = {}
        self._pods: dict[str, Workload] = {}  # "ns/name" -> workload
        self._by_node: dict[str, dict[str, Workload]] = {}
        self._job_pods: dict[str, dict[str, Workload]] = {}
        self._by_job: dict[str, tuple[Workload, ...]] = {}
        self._loads: dict[str, NodeLoad] = {}
        self._dirty: set[str] = set()
        self._uid_to_name: dict[str, str] = {}
        self._name_to_uid: dict[str, str] = {}
        self._view: PlacementView | None = None
        self._synced: set[str] = set()
        self.rejected_objects = 0  # objects we could not read at all (no name)
        self._errors: dict[str, tuple[str, ...]] = {}  # "Pod ns/name" -> its errors now
        # DRA: claim "ns/name" -> its allocation of RLix GPUs; pods that name
        # claims, as read (before the allocation is applied), and their claims.
        self._allocations: dict[str, dra.Allocation] = {}
        self._claimed: dict[str, tuple[Workload, str, tuple[str, ...]]] = {}
        self._claim_pods: dict[str, set[str]] = {}
        # Preemption victims this extender named: victim UID -> (the preemptor's
        # UID, until when it is awaited; entries go when they expire, and a
        # deleted victim no longer has a name here). See ``awaited_victims``.
        self._victims: dict[str, tuple[str, float]] = {}
        self._clock = clock

    # -- events -----------------------------------------------------------
    def apply_node(self, event_type: str, obj: Mapping[str, Any]) -> None:
        """Apply one node watch event (ADDED, MODIFIED or DELETED)."""
        try:
            facts = read_node(obj)
        except ObjectError as exc:
            self._reject(exc)
            return
        node = facts.node
        with self._lock:
            self._note(f"Node {node.name}", () if event_type == DELETED else facts.errors)
            if event_type == DELETED:
                self._nodes.pop(node.name, None)
            elif self._nodes.get(node.name) == node:
                return  # a heartbeat or status-only update: nothing we use changed
            else:
                self._nodes[node.name] = node
            self._touch(node.name)

    def apply_pod(self, event_type: str, obj: Mapping[str, Any]) -> None:
        """Apply one pod watch event; only bound, non-terminal pods hold GPUs."""
        try:
            name = pod_name(obj)
            facts = None if event_type == DELETED else read_pod(obj)
        except ObjectError as exc:
            self._reject(exc)
            return
        gone = facts is None or facts.finished
        # A resident with a malformed value keeps its place with the safe
        # reading (whole GPU, not preemptible): dropping it would make the
        # GPUs it holds look free.
        workload = None if facts is None or gone else facts.workload
        uid = facts.uid if facts is not None else ""
        ns = name.split("/", 1)[0]
        claims = tuple(f"{ns}/{c}" for c in dra.pod_claim_names(obj)) if workload else ()
        with self._lock:
            self._note(f"Pod {name}", () if gone or facts is None else facts.errors)
            self._set_claimed(name, workload, uid, claims)
            if workload is not None and claims:
                workload = self._allocated(workload, claims)
            self._place(name, workload, uid)

    def _set_claimed(
        self, name: str, workload: Workload | None, uid: str, claims: tuple[str, ...]
    ) -> None:
        old = self._claimed.pop(name, None)
        for claim in old[2] if old else ():
            pods = self._claim_pods.get(claim, set())
            pods.discard(name)
            if not pods:
                self._claim_pods.pop(claim, None)
        if workload is not None and claims:
            self._claimed[name] = (workload, uid, claims)
            for claim in claims:
                self._claim_pods.setdefault(claim, set()).add(name)

    def _allocated(self, workload: Workload, claims: tuple[str, ...]) -> Workload:
        """The pod as its claims' allocations place it (unplaced until allocated)."""
        found = [self._allocations[c] for c in claims if c in self._allocations]
        if not found:
            return replace(workload, node=None, gpu_indices=())
        gpus = tuple(i for a in found for i in a.gpus)
        return replace(workload, node=found[0].node, gpu_indices=gpus)

    def apply_claim(self, event_type: str, obj: Mapping[str, Any]) -> None:
        """Apply one ResourceClaim watch event: its allocation places its pods."""
        key = dra.claim_key(obj)
        allocation = None if event_type == DELETED else dra.read_allocation(obj)
        with self._lock:
            if self._allocations.get(key) == allocation:
                return
            if allocation is None:
                self._allocations.pop(key, None)
            else:
                self._allocations[key] = allocation
            for name in sorted(self._claim_pods.get(key, ())):
                base, uid, claims = self._claimed[name]
                self._place(name, self._allocated(base, claims), uid)

    def replace_claims(self, objs: Iterable[Mapping[str, Any]]) -> None:
        with self._lock:
            stale = list(self._allocations)
        for key in stale:
            namespace, _, name = key.partition("/")
            self.apply_claim(DELETED, {"metadata": {"namespace": namespace, "name": name}})
        for obj in objs:
            self.apply_claim(ADDED, obj)
        self.mark_synced("claims")

    def allocations(self) -> dict[str, dra.Allocation]:
        """Claim "ns/name" -> its allocation of RLix GPUs (for /debug/claims)."""
        with self._lock:
            return dict(self._allocations)

    def _place(self, name: str, workload: Workload | None, uid: str) -> None:
        """Hold ``workload`` where it is placed (under the lock); None forgets it."""
        keep = workload is not None and workload.node is not None
        if keep and self._pods.get(name) == workload and self._name_to_uid.get(name) == uid:
            return  # e.g. a status update: placement facts unchanged
        self._forget(name)
        if workload is not None and workload.node is not None:
            self._pods[name] = workload
            self._by_node.setdefault(workload.node, {})[name] = workload
            if workload.job:
                self._job_pods.setdefault(workload.job, {})[name] = workload
            self._set_job(workload.job)
            self._touch(workload.node)
            if uid:
                self._uid_to_name[uid] = name
                self._name_to_uid[name] = uid

    def _reject(self, exc: ObjectError) -> None:
        log.warning("ignoring an unreadable object: %s", exc)
        with self._lock:
            self.rejected_objects += 1

    def _note(self, key: str, errors: Sequence[ObjectError]) -> None:
        """Remember ``key``'s current errors; log only when they change."""
        messages = tuple(str(e) for e in errors)
        if self._errors.get(key, ()) == messages:
            return
        if messages:
            self._errors[key] = messages
            for message in messages:
                log.warning("read with safe values: %s", message)
        else:
            self._errors.pop(key, None)

    def _forget(self, name: str) -> None:
        old = self._pods.pop(name, None)
        if old is not None and old.node is not None:
            on_node = self._by_node.get(old.node, {})
            on_node.pop(name, None)
            if not on_node:
                self._by_node.pop(old.node, None)
            self._job_pods.get(old.job, {}).pop(name, None)
            self._set_job(old.job)
            self._touch(old.node)
        uid = self._name_to_uid.pop(name, None)
        if uid is not None:
            self._uid_to_name.pop(uid, None)

    def _set_job(self, job: str) -> None:
        # Per-job tuples are replaced, never mutated, so a view can share them.
        if not job:
            return
        members = self._job_pods.get(job)
        if members:
            self._by_job[job] = tuple(members.values())
        else:
            self._job_pods.pop(job, None)
            self._by_job.pop(job, None)

    def _touch(self, node: str) -> None:
        self._dirty.add(node)
        self._view = None

    def replace_nodes(self, objs: Iterable[Mapping[str, Any]]) -> None:
        """A fresh LIST: forget every node, then add these (a relist after a 410)."""
        with self._lock:
            self._dirty.update(self._nodes)
            self._nodes.clear()
            self._errors = {k: v for k, v in self._errors.items() if not k.startswith("Node ")}
            self._view = None
        for obj in objs:
            self.apply_node(ADDED, obj)
        self.mark_synced("nodes")

    def replace_pods(self, objs: Iterable[Mapping[str, Any]]) -> None:
        with self._lock:
            self._dirty.update(self._by_node)
            self._pods.clear()
            self._by_node.clear()
            self._job_pods.clear()
            self._by_job.clear()
            self._uid_to_name.clear()
            self._name_to_uid.clear()
            self._claimed.clear()
            self._claim_pods.clear()
            self._errors = {k: v for k, v in self._errors.items() if not k.startswith("Pod ")}
            self._view = None
        for obj in objs:
            self.apply_pod(ADDED, obj)
        self.mark_synced("pods")

    def mark_synced(self, kind: str) -> None:
        with self._lock:
            self._synced.add(kind)

    @property
    def ready(self) -> bool:
        """True once nodes and pods have each been listed once."""
        with self._lock:
            return {"nodes", "pods"} <= self._synced

    # -- reads --------------------------------------------------------------
    def view(self) -> PlacementView:
        """The current immutable view (rebuilt lazily after a change)."""
        with self._lock:
            if self._view is None:
                for name in self._dirty:
                    node = self._nodes.get(name)
                    if node is None:
                        self._loads.pop(name, None)
                    else:
                        self._loads[name] = node_load(node, self._by_node.get(name, {}).values())
                self._dirty.clear()
                snapshot = ClusterSnapshot(
                    nodes=dict(self._nodes), workloads=tuple(self._pods.values())
                )
                self._view = PlacementView(
                    snapshot, loads=self._loads, by_job=self._by_job, rules=self.rules
                )
            return self._view

    def expect_deleted(self, preemptor_uid: str, victim_uids: Iterable[str]) -> None:
        """Remember the victims a preempt answer named for ``preemptor_uid``:
        kube-scheduler deletes those of the node it picks."""
        until = self._clock() + VICTIM_WAIT_S
        with self._lock:
            for uid in victim_uids:
                self._victims[uid] = (preemptor_uid, until)

    def awaited_victims(self, preemptor_uid: str, nodes: Collection[str]) -> list[str]:
        """Victims named for ``preemptor_uid`` that this view still holds on ``nodes``.

        Why: kube-scheduler retries a preemptor as soon as its own informer sees
        the victims deleted, which can be before this cache's watch does. A
        filter that refused the pod then, for memory the victims no longer
        hold, would leave it unschedulable until some later cluster event
        (minutes on a quiet cluster); the filter answers an error instead, and
        kube-scheduler retries the pod after its backoff (docs/extender.md).
        """
        now = self._clock()
        with self._lock:
            for uid in [u for u, (_, until) in self._victims.items() if until <= now]:
                del self._victims[uid]
            found: list[str] = []
            for uid, (preemptor, _) in self._victims.items():
                name = self._uid_to_name.get(uid)
                if preemptor != preemptor_uid or name is None:
                    continue
                held = self._pods.get(name)
                if held is not None and held.node in nodes:
                    found.append(name)
            return sorted(found)

    def name_of_uid(self, uid: str) -> str | None:
        with self._lock:
            return self._uid_to_name.get(uid)

    def uid_of(self, name: str) -> str | None:
        with self._lock:
            return self._name_to_uid.get(name)

    def uids(self) -> dict[str, str]:
        """uid -> "ns/name", for /debug/snapshot."""
        with self._lock:
            return dict(self._uid_to_name)

    def object_errors(self) -> dict[str, tuple[str, ...]]:
        """Objects whose facts are read with safe values now, with each error."""
        with self._lock:
            return dict(self._errors)

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return len(self._nodes), len(self._pods)
