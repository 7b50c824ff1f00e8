"""The GPUs each pod declares it holds, for the phase gate: where a pod that
holds nothing yet will load.

The gate learns which GPUs a pod uses from where its processes hold memory.
Before its first allocation (model load, an engine's preallocated KV cache) a
pod holds none, so a load would go in anywhere, into memory a partner working
beside it holds. The operator writes ``rlix.io/gpu-indices`` on a pod whose
GPUs a ResourceClaim pins (the plan the allocation follows): read from the
conducting loop's listing (``rlix.agent.declared``), those GPUs are the pod's
in the gate's eyes too, so a load it reports (``rlix.loading()``) waits for
room there. A pod with no such annotation (whole GPUs from the device plugin)
is known by its memory alone, as before.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from rlix.agent.declared import Declared
from rlix.core import names
from rlix.core.objects import facts as f

if TYPE_CHECKING:
    from rlix.agent.conducting import NodePod

log = logging.getLogger(__name__)


class DeclaredGpus(Declared[frozenset[int]]):
    """Pod uid -> the GPU indices it declares (``rlix.io/gpu-indices``)."""

    def __init__(self) -> None:
        super().__init__(lambda pod: pod.annotations.get(names.ANNOTATION_GPU_INDICES), _parse)


def _parse(pod: NodePod) -> frozenset[int] | None:
    reading = f.Reading("Pod", f"{pod.namespace}/{pod.name}")
    indices = reading.get(f.POD_GPU_INDICES, pod.annotations[names.ANNOTATION_GPU_INDICES])
    for error in reading.errors:  # once per value: the gate knows its GPUs by its memory
        log.warning("phase gate: %s; its GPUs are those it holds memory on", error)
    if reading.errors or not indices:
        return None
    return frozenset(indices)
