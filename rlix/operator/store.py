"""The operator's in-memory view of the cluster, fed by kopf watch events
(and by the responses to its own writes, which are newer than the events).

Reconciliation reads this, never the API server, so a pass over a thousand
jobs costs no requests; writes go through ``rlix.operator.kube``. After a
restart the initial watch listing refills it, which is all restart safety
needs: nothing here is the only copy of anything.

A watch that misses a DELETED event (a relist after a watch error reports
what it finds, not what vanished meanwhile) would leave the object here for
good: a job that keeps its admission, a pod that keeps its GPUs. So the
operator lists now and then (``Admitter.relist``) and ``forget_unlisted``
drops what a consistent list no longer shows.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from pydantic import ValidationError

from rlix.core import names
from rlix.core.rljob import RLJob, RLJobStatus
from rlix.core.validation import FieldError, parse, spec_errors
from rlix.operator.snapshots import log_gpu_mode, node_offer

Body = dict[str, Any]
# Deleted objects remembered, so that a write's response arriving after the
# watch's DELETED event cannot bring them back (``Store.put_job``).
TOMBSTONES = 65536


def job_key(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata", {})
    return f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"


def uid_of(body: Mapping[str, Any]) -> str:
    """The object's metadata.uid ('' when it has none)."""
    return str((body.get("metadata") or {}).get("uid") or "")


def _newer(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """Whether ``new`` is not older than ``old`` (etcd revisions are integers)."""
    if old is None:
        return True
    try:
        return int(new["metadata"]["resourceVersion"]) >= int(old["metadata"]["resourceVersion"])
    except (KeyError, ValueError):
        return True


def _listed_at(body: Mapping[str, Any], list_version: str) -> bool:
    """Whether a list served at ``list_version`` would show ``body``, were it
    still there: its version is not newer than the list's. A version that is not
    an integer says nothing, so the object stays."""
    try:
        return int(body["metadata"]["resourceVersion"]) <= int(list_version)
    except (KeyError, TypeError, ValueError):
        return False


def _in_scope(body: Mapping[str, Any], namespace: str | None) -> bool:
    return namespace is None or (body.get("metadata") or {}).get("namespace") == namespace


class Store:
    def __init__(self) -> None:
        self.jobs: dict[str, Body] = {}
        self.nodes: dict[str, Body] = {}
        self.pods: dict[str, dict[str, Body]] = {}  # job key -> pod name -> pod
        self.dirty: set[str] = set()  # jobs whose status or pods need a look
        self.queue_changed = True  # capacity or the queue changed: run admission
        self.wakeup = asyncio.Event()
        self._parsed: dict[str, tuple[object, RLJob | None, list[FieldError]]] = {}
        # uids of deleted jobs, pods and nodes, oldest first. A status or annotation
        # patch in flight when its object is deleted returns the object as it
        # was; stored after the DELETED event, it would stay for good (no
        # later event removes it): a job that holds its admission and a pod
        # that holds its GPUs, so nothing waiting fits again. A uid never comes
        # back (a job re-created under the same name has a new one).
        self._gone: OrderedDict[str, None] = OrderedDict()

    def _bury(self, uid: str) -> None:
        if uid:
            self._gone[uid] = None
            while len(self._gone) > TOMBSTONES:
                self._gone.popitem(last=False)

    def is_gone(self, body: Mapping[str, Any]) -> bool:
        """Whether ``body`` is an object a DELETED event has already removed."""
        uid = uid_of(body)
        return bool(uid) and uid in self._gone

    def _touch(self, key: str, *, queue: bool = False) -> None:
        self.dirty.add(key)
        self.queue_changed = self.queue_changed or queue
        self.wakeup.set()

    # -- jobs ---------------------------------------------------------------
    def put_job(self, body: Body) -> None:
        if self.is_gone(body):
            return  # a write's late response: the job was deleted meanwhile
        key = job_key(body)
        old = self.jobs.get(key)
        if not _newer(old, body):
            return  # a watch event older than a patch response we already hold
        self.jobs[key] = body
        self._touch(key, queue=old is None)

    def drop_job(self, key: str, uid: str = "") -> None:
        """Forget the job; ``uid`` (the DELETED event's) keeps it forgotten."""
        self._bury(uid)
        self.jobs.pop(key, None)
        self._parsed.pop(key, None)
        self.dirty.discard(key)
        self.queue_changed = True
        self.wakeup.set()

    def job(self, key: str) -> tuple[RLJob | None, list[FieldError]]:
        """The typed job (spec parsed once per generation) or why it is invalid."""
        body = self.jobs[key]
        meta = body.get("metadata", {})
        stamp = (meta.get("uid"), meta.get("generation"))
        cached = self._parsed.get(key)
        if cached is None or cached[0] != stamp:
            manifest = {k: v for k, v in body.items() if k != "status"}
            job, errors = parse(manifest)
            if job is not None:
                errors = errors + spec_errors(job.spec)
            cached = (stamp, job, errors)
            self._parsed[key] = cached
        _, job, errors = cached
        if job is None:
            return None, errors
        try:
            status = RLJobStatus.model_validate(body.get("status") or {})
        except ValidationError:
            status = RLJobStatus()  # hand-edited garbage: rebuild from observation
        return job.model_copy(update={"status": status, "metadata": meta}), errors

    # -- pods ---------------------------------------------------------------
    def put_pod(self, body: Body) -> None:
        if self.is_gone(body):
            return  # a patch's late response: the pod was deleted meanwhile
        meta = body.get("metadata", {})
        job = (meta.get("labels") or {}).get(names.LABEL_JOB)
        if not job:
            return
        key = f"{meta.get('namespace', 'default')}/{job}"
        pods = self.pods.setdefault(key, {})
        old = pods.get(meta.get("name", ""))
        if not _newer(old, body):
            return
        pods[meta["name"]] = body
        phase = (body.get("status") or {}).get("phase")
        old_phase = ((old or {}).get("status") or {}).get("phase")
        # Finished pods free GPUs; bindings move reservations onto real nodes.
        freed = phase != old_phase and phase in ("Succeeded", "Failed")
        bound = old is not None and old.get("spec", {}).get("nodeName") != body.get("spec", {}).get(
            "nodeName"
        )
        self._touch(key, queue=freed or bound)

    def drop_pod(self, body: Mapping[str, Any]) -> None:
        self._bury(uid_of(body))
        meta = body.get("metadata", {})
        job = (meta.get("labels") or {}).get(names.LABEL_JOB)
        key = f"{meta.get('namespace', 'default')}/{job}"
        pods = self.pods.get(key, {})
        pods.pop(meta.get("name", ""), None)
        if not pods:
            self.pods.pop(key, None)
        if key in self.jobs:
            self._touch(key, queue=True)
        else:
            self.queue_changed = True
            self.wakeup.set()

    def pods_of(self, key: str) -> dict[str, Body]:
        return self.pods.get(key, {})

    def all_pods(self) -> Iterator[Body]:
        for pods in self.pods.values():
            yield from pods.values()

    # -- nodes --------------------------------------------------------------
    def put_node(self, body: Body) -> None:
        if self.is_gone(body):
            return  # listed just before the node was deleted
        name = body["metadata"]["name"]
        old = self.nodes.get(name)
        if not _newer(old, body):
            return
        self.nodes[name] = body
        log_gpu_mode(old, body)
        # Node heartbeats arrive every few seconds; only a change in what the
        # node offers is worth an admission pass.
        if old is None or node_offer(old) != node_offer(body):
            self.queue_changed = True
            self.wakeup.set()

    def claims_node(self, name: str) -> bool:
        """Whether RLix's agent drives this node's GPUs as gpu.rlix.io DRA devices."""
        body = self.nodes.get(name)
        node = node_offer(body) if body is not None else None
        return node is not None and node.claims

    def drop_node(self, name: str, uid: str = "") -> None:
        self._bury(uid)
        self.nodes.pop(name, None)
        self.queue_changed = True
        self.wakeup.set()

    # -- relists ------------------------------------------------------------
    def forget_unlisted(
        self,
        kind: str,
        listed: Iterable[Mapping[str, Any]],
        list_version: str,
        namespace: str | None = None,
    ) -> list[str]:
        """Drop the ``kind`` ("jobs", "pods" or "nodes") objects of ``namespace``
        (None: every namespace) that a list served at ``list_version`` does not
        show, and return them ("namespace/name"; a node's name). An object newer
        than the list (created, or changed, after it was served) stays: the list
        cannot know it. One the list shows stays too, even under another uid (a
        re-created job; ``Admitter.relist`` puts the listed version first)."""
        seen = {(b["metadata"].get("namespace", ""), b["metadata"]["name"]) for b in listed}
        dropped: list[str] = []

        def unlisted(body: Mapping[str, Any]) -> bool:
            meta = body.get("metadata") or {}
            return (
                _in_scope(body, namespace)
                and (meta.get("namespace", ""), meta.get("name", "")) not in seen
                and _listed_at(body, list_version)
            )

        if kind == "jobs":
            for key, body in list(self.jobs.items()):
                if unlisted(body):
                    self.drop_job(key, uid=uid_of(body))
                    dropped.append(key)
        elif kind == "pods":
            for body in list(self.all_pods()):
                if unlisted(body):
                    self.drop_pod(body)
                    meta = body["metadata"]
                    dropped.append(f"{meta.get('namespace', 'default')}/{meta['name']}")
        elif kind == "nodes":
            for name, body in list(self.nodes.items()):
                if unlisted(body):
                    self.drop_node(name, uid=uid_of(body))
                    dropped.append(name)
        else:
            raise ValueError(f"unknown kind {kind!r}: jobs, pods or nodes")
        return dropped
