"""The admission ledger: every admitted job's placements in one fenced ConfigMap.

Why one object: admission promises capacity across *many* RLJobs, and a
precondition on one RLJob's resourceVersion cannot stop two admitters (a second
operator replica, or a restarted one whose watches have not caught up) from each
promising the same GPUs to different jobs. So every admission pass reads the
ledger, decides against it, and writes it back with a ``resourceVersion``
precondition (optimistic concurrency, no Lease): of two interleaved passes the
second gets 409 Conflict and decides again from what the first wrote. The
ledger is written *before* any job's ``Admitted`` status, so a crash between
the two leaves a ledger entry that the next pass turns into the status, never
a status without a reservation.

An entry lives from admission until the job finishes or is gone from the API
server. Pods carry their admitted node as an annotation too, but an entry is
kept while the job runs because another admitter's pod watch may lag behind
the pods the entry stands for. Size: about 40 bytes per pod, so a ConfigMap
(1 MiB) holds the placements of some 25,000 admitted pods.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rlix.core.policy.admission import PodPlacement

NAME = "rlix-admission-ledger"
DATA_KEY = "admitted.json"


@dataclass(frozen=True, slots=True)
class Entry:
    """One admitted job: its uid (a re-created job of the same name is another job)."""

    uid: str
    placements: dict[str, PodPlacement]  # pod "namespace/name" -> where admission put it


@dataclass
class Ledger:
    """The ledger as read: entries and the resourceVersion the next write is fenced on."""

    resource_version: str | None  # None: the ConfigMap does not exist yet
    entries: dict[str, Entry] = field(default_factory=dict)  # job key -> entry


def encode(entries: Mapping[str, Entry]) -> str:
    return json.dumps(
        {
            job: {
                "uid": entry.uid,
                "pods": {
                    pod: [p.node, list(p.gpus)] for pod, p in sorted(entry.placements.items())
                },
            }
            for job, entry in sorted(entries.items())
        },
        separators=(",", ":"),
    )


def decode(raw: str | None) -> dict[str, Entry]:
    """The entries; a ConfigMap edited into garbage is an error, never an empty ledger.

    Reading garbage as "nothing admitted" would over-admit everything at once.
    """
    if not raw:
        return {}
    try:
        data = json.loads(raw)
        return {
            str(job): Entry(
                uid=str(value["uid"]),
                placements={
                    str(pod): PodPlacement(str(pod), str(node), tuple(int(g) for g in gpus), 0)
                    for pod, (node, gpus) in value["pods"].items()
                },
            )
            for job, value in data.items()
        }
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ValueError(f"ConfigMap {NAME} key {DATA_KEY} is not a ledger: {exc}") from exc


def configmap(namespace: str, entries: Mapping[str, Entry], resource_version: str | None) -> Any:
    metadata: dict[str, Any] = {"name": NAME, "namespace": namespace}
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata,
        "data": {DATA_KEY: encode(entries)},
    }
