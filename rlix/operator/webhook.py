"""The validating admission webhook: the rules the CRD schema cannot state.

The schema and its CEL rules judge one object alone; whether a role asks for
more GPU memory than any GPU here has, or more GPUs per replica than any node
has, depends on the cluster, so this handler checks the manifest against the
operator's node cache with the same ``rlix.core.validation`` the operator uses.
The operator writes its own ValidatingWebhookConfiguration (``configuration``)
rather than letting kopf manage one, because kopf fixes ``timeoutSeconds`` at
30: with the operator stopped (SIGSTOP, a stuck event loop, a paused node) the
API server would hold every RLJob write for that long. Ours says
``failurePolicy: Ignore`` with a short timeout, so a write waits at most a few
seconds on an unresponsive operator and then goes through on the CRD's schema
and CEL rules alone. What is lost while the webhook is skipped are only the
checks that need the cluster (``rlix.core.validation.capacity_errors``: more
GPUs per replica than any node has, more memory than any GPU, more GPUs than
the cluster): the operator runs the same checks at admission, so such a job is
accepted but then held with ``Admitted=False``, reason ``NeverFits``, and a
Warning event, instead of being refused at apply time. The same holds for
the dry run of each role's pod template (``rlix.operator.dry_runs``): skipped,
an invalid template is refused when the operator creates the pods instead, and
the job fails with ``PodRejected``.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import kopf

from rlix.core import names
from rlix.core.validation import Capacity, validate_manifest

WEBHOOK_CONFIGURATION = "rlix.io"
HANDLER_ID = "validate"  # kopf serves each handler at /<id>
# The webhook answers from memory in milliseconds; 2 s is generous for a live
# operator and bounds what a stopped one costs every RLJob write.
DEFAULT_TIMEOUT_S = 2
_MANIFEST_KEYS = ("apiVersion", "kind", "metadata", "spec")


def configuration(base_url: str, ca_pem: bytes, *, timeout_s: int) -> dict[str, Any]:
    """The ValidatingWebhookConfiguration pointing the API server at this operator."""
    if not 1 <= timeout_s <= 30:
        raise ValueError(f"webhook timeoutSeconds must be 1..30 (the API's range), got {timeout_s}")
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK_CONFIGURATION},
        "webhooks": [
            {
                "name": f"{HANDLER_ID}.{WEBHOOK_CONFIGURATION}",
                "clientConfig": {
                    "url": f"{base_url.rstrip('/')}/{HANDLER_ID}",
                    "caBundle": base64.b64encode(ca_pem).decode(),
                },
                "rules": [
                    {
                        "apiGroups": [names.GROUP],
                        "apiVersions": [names.VERSION],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": [names.PLURAL],
                        "scope": "Namespaced",
                    }
                ],
                "failurePolicy": "Ignore",
                "timeoutSeconds": timeout_s,
                "sideEffects": "None",
                "matchPolicy": "Equivalent",
                "admissionReviewVersions": ["v1"],
            }
        ],
    }


def review(
    body: Mapping[str, Any], old: Mapping[str, Any] | None, capacity: Capacity | None
) -> list[str]:
    """The errors for a CREATE/UPDATE; the cluster is only consulted when spec changes."""
    manifest = {k: body[k] for k in _MANIFEST_KEYS if k in body}
    if old is not None and old.get("spec") == body.get("spec"):
        capacity = None  # metadata-only update: never refuse what was accepted before
    return [str(e) for e in validate_manifest(manifest, capacity)]


DryRun = Callable[[Mapping[str, Any]], Awaitable[list[str]]]


def register(
    registry: kopf.OperatorRegistry,
    capacity: Callable[[], Capacity | None],
    dry_run: DryRun | None = None,
) -> None:
    @kopf.on.validate(
        names.GROUP,
        names.VERSION,
        names.PLURAL,
        id=HANDLER_ID,
        operations=["CREATE", "UPDATE"],
        ignore_failures=True,
        registry=registry,
    )
    async def validate_rljob(body: kopf.Body, old: kopf.Body | None = None, **_: Any) -> None:
        errors = review(body, old, capacity())
        if (
            not errors
            and dry_run is not None
            and (old is None or old.get("spec") != body.get("spec"))
        ):
            errors = await dry_run({k: body[k] for k in _MANIFEST_KEYS if k in body})
        if errors:
            raise kopf.AdmissionError("; ".join(errors), code=422)
