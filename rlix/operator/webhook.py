"""The validating admission webhook: the rules the CRD schema cannot state.

The schema and its CEL rules judge one object alone; whether a role asks for
more GPU memory than any GPU here has, or more GPUs per replica than any node
has, depends on the cluster, so this handler checks the manifest against the
operator's node cache with the same ``rlix.core.validation`` the operator uses.
It is registered with ``failurePolicy: Ignore``: while the operator is down the
schema still guards the API and the operator marks such jobs Failed when it
returns, instead of every RLJob write failing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import kopf

from rlix.core import names
from rlix.core.validation import Capacity, validate_manifest

WEBHOOK_CONFIGURATION = "rlix.io"
_MANIFEST_KEYS = ("apiVersion", "kind", "metadata", "spec")


def review(
    body: Mapping[str, Any], old: Mapping[str, Any] | None, capacity: Capacity | None
) -> list[str]:
    """The errors for a CREATE/UPDATE; the cluster is only consulted when spec changes."""
    manifest = {k: body[k] for k in _MANIFEST_KEYS if k in body}
    if old is not None and old.get("spec") == body.get("spec"):
        capacity = None  # metadata-only update: never refuse what was accepted before
    return [str(e) for e in validate_manifest(manifest, capacity)]


def register(registry: kopf.OperatorRegistry, capacity: Callable[[], Capacity | None]) -> None:
    @kopf.on.validate(
        names.GROUP,
        names.VERSION,
        names.PLURAL,
        id="validate",
        operations=["CREATE", "UPDATE"],
        ignore_failures=True,
        registry=registry,
    )
    async def validate_rljob(body: kopf.Body, old: kopf.Body | None = None, **_: Any) -> None:
        errors = review(body, old, capacity())
        if errors:
            raise kopf.AdmissionError("; ".join(errors), code=422)
