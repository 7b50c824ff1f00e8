"""CDI spec files for prepared ``gpu.rlix.io`` claims.

The kubelet hands the container runtime the CDI device ids a DRA driver returns
from NodePrepareResources; the runtime (containerd 2.x, CRI-O) looks them up in
the spec files of its CDI directories (``/etc/cdi``, ``/var/run/cdi``) and
applies their container edits. RLix's edits are environment variables that name
the claim's GPUs and its memory budget, so a trainer (and the rlix client
library) can read which GPU RLix gave it and how much of it:

- ``RLIX_GPU_UUIDS``, ``RLIX_GPU_INDICES``: the allocated GPUs, in allocation order;
- ``RLIX_GPU_MEMORY_MIB``: the memory the claim consumed on each GPU (parallel);
- ``NVIDIA_VISIBLE_DEVICES``, ``CUDA_VISIBLE_DEVICES``: the GPUs by uuid (CUDA
  accepts uuids, which stay right whatever index the container sees them at).

One spec file per claim, named by the claim's uid, holding one CDI device (kind
``rlix.io/gpu``, name = the claim uid) whose edits cover every GPU of the claim:
per-GPU devices would each set the same variables and the last would win. The
file name alone says which claim it serves, so Unprepare needs no API call (the
claim may be gone by then) and a restarted agent finds what it prepared.
Files are written to a temporary name and renamed, so a runtime never reads half
a spec.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from rlix.core.objects.metadata import is_uid

VENDOR: Final = "rlix.io"
CLASS: Final = "gpu"
KIND: Final = f"{VENDOR}/{CLASS}"
# 0.6.0 covers env-only container edits; every runtime with CDI reads it.
CDI_VERSION: Final = "0.6.0"
_PREFIX: Final = f"{VENDOR}-{CLASS}_"


class CdiError(ValueError):
    """A claim uid that cannot name a spec file, or an unreadable spec."""


@dataclass(frozen=True, slots=True)
class PreparedGpu:
    """One allocated GPU of a claim, as the container should see it."""

    index: int
    uuid: str
    memory_mib: int  # consumed by the claim on this GPU


def vendor_device_ids(template: str, gpus: Sequence[PreparedGpu]) -> tuple[str, ...]:
    """The GPU vendor's own CDI device ids for ``gpus`` (``template`` with
    ``{uuid}`` or ``{index}``, e.g. ``nvidia.com/gpu={uuid}``): on a real GPU node
    the device nodes and driver libraries come from NVIDIA's CDI spec (NVIDIA
    Container Toolkit, ``nvidia-ctk cdi generate``), RLix's spec adds only the
    environment. Empty template: none (simulated GPUs)."""
    if not template:
        return ()
    check_vendor_template(template)
    return tuple(template.format(uuid=g.uuid, index=g.index) for g in gpus)


def check_vendor_template(template: str) -> None:
    """Raise :class:`CdiError` naming what is wrong with a vendor device template."""
    kind, sep, name = template.partition("=")
    if not sep or "/" not in kind or not name:
        raise CdiError(
            f"vendor CDI device {template!r} is not '<vendor>/<class>=<name>' "
            "(e.g. nvidia.com/gpu={uuid})"
        )
    try:
        name.format(uuid="u", index=0)
    except (KeyError, IndexError, ValueError) as exc:
        raise CdiError(
            f"vendor CDI device {template!r}: only {{uuid}} and {{index}} may be used ({exc!r})"
        ) from None
    if "{uuid}" not in name and "{index}" not in name:
        raise CdiError(f"vendor CDI device {template!r} names no GPU ({{uuid}} or {{index}})")


def device_id(claim_uid: str) -> str:
    """The fully qualified CDI device id the runtime is given for a claim."""
    return f"{KIND}={_checked(claim_uid)}"


def spec_path(cdi_dir: Path, claim_uid: str) -> Path:
    return cdi_dir / f"{_PREFIX}{_checked(claim_uid)}.json"


def container_env(gpus: Sequence[PreparedGpu]) -> list[str]:
    uuids = ",".join(g.uuid for g in gpus)
    return [
        f"RLIX_GPU_UUIDS={uuids}",
        f"RLIX_GPU_INDICES={','.join(str(g.index) for g in gpus)}",
        f"RLIX_GPU_MEMORY_MIB={','.join(str(g.memory_mib) for g in gpus)}",
        f"NVIDIA_VISIBLE_DEVICES={uuids}",
        f"CUDA_VISIBLE_DEVICES={uuids}",
    ]


def spec(claim_uid: str, gpus: Sequence[PreparedGpu]) -> dict[str, Any]:
    """The CDI spec of one claim."""
    if not gpus:
        raise CdiError(f"claim {claim_uid}: no {KIND} GPUs to prepare")
    return {
        "cdiVersion": CDI_VERSION,
        "kind": KIND,
        "devices": [{"name": _checked(claim_uid), "containerEdits": {"env": container_env(gpus)}}],
    }


def write_spec(cdi_dir: Path, claim_uid: str, gpus: Sequence[PreparedGpu]) -> str:
    """Write (or rewrite) the claim's spec file; return its CDI device id."""
    path = spec_path(cdi_dir, claim_uid)
    cdi_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(spec(claim_uid, gpus), indent=2) + "\n")
    os.replace(tmp, path)
    return device_id(claim_uid)


def remove_spec(cdi_dir: Path, claim_uid: str) -> bool:
    """Remove the claim's spec file; False when there was none (already removed)."""
    try:
        spec_path(cdi_dir, claim_uid).unlink()
    except FileNotFoundError:
        return False
    return True


def prepared_claims(cdi_dir: Path) -> list[str]:
    """Uids of the claims whose spec files are in ``cdi_dir`` (what survived a restart)."""
    if not cdi_dir.is_dir():
        return []
    return sorted(
        p.name[len(_PREFIX) : -len(".json")]
        for p in cdi_dir.glob(f"{_PREFIX}*.json")
        if is_uid(p.name[len(_PREFIX) : -len(".json")])
    )


def _checked(claim_uid: str) -> str:
    if not is_uid(claim_uid):
        raise CdiError(f"claim uid {claim_uid!r} is not a Kubernetes uid")
    return claim_uid
