"""What the agent's watches over pods' device memory share.

The overrun watch (``overruns``) and the check of loads made outside the
phase gate (``gate_promises``) both read the conducting loop's listing of
the node's pods as the extender reads pods, sum what each pod's processes
hold per GPU, run every ``--overrun-interval``, and post events on pods.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Protocol

from rlix.agent.conducting import NodePod
from rlix.agent.gpus import GpuProcess
from rlix.core.objects.pods import PodFacts, read_pod

log = logging.getLogger(__name__)


def pod_facts(pod: NodePod) -> PodFacts:
    """What the extender reads of a listed pod's annotations (``read_pod``)."""
    body = {
        "metadata": {
            "name": pod.name,
            "namespace": pod.namespace,
            "uid": pod.uid,
            "annotations": dict(pod.annotations),
        }
    }
    return read_pod(body)


def held_mib(
    processes: Iterable[GpuProcess], pod_of_pid: Callable[[int], str | None], uids: Iterable[str]
) -> dict[tuple[str, int], int]:
    """(pod uid, GPU) -> what the pod's processes hold there together, for the
    pods named (host processes and exited ones left out)."""
    wanted = set(uids)
    held: dict[tuple[str, int], int] = {}
    for proc in processes:
        uid = pod_of_pid(proc.pid)
        if uid is not None and uid in wanted:
            held[(uid, proc.gpu_index)] = held.get((uid, proc.gpu_index), 0) + proc.used_mib
    return held


def run_every(check: Callable[[], object], stop: threading.Event, interval_s: float) -> None:
    """Call ``check`` every ``interval_s`` until ``stop``; a failed pass is
    logged and retried (an API server outage must not end a watch)."""
    while not stop.wait(interval_s):
        try:
            check()
        except Exception:
            log.exception("%s failed; retrying", getattr(check, "__qualname__", "a check"))


class OnPod(Protocol):
    """What an event is about: a pod (an ``Overrun``, a ``gate_promises.OutsideLoad``)."""

    @property
    def uid(self) -> str: ...

    @property
    def namespace(self) -> str: ...

    @property
    def name(self) -> str: ...


class EventSink(Protocol):
    def post(self, about: OnPod, *, kind: str, reason: str, message: str) -> None: ...
