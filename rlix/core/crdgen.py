"""Turn the RLJob pydantic models into the CustomResourceDefinition.

Pydantic emits JSON Schema; Kubernetes wants a *structural* OpenAPI v3 schema:
no ``$ref``, no ``anyOf`` carrying types, no ``additionalProperties: false``
next to ``properties``, no ``title``. This module rewrites the one into the
other, so the models stay the single source of truth and ``make verify`` can
regenerate the YAML and diff it. Pure: returns dicts, writes nothing.
"""

from __future__ import annotations

from typing import Any

from rlix.core import names
from rlix.core.rljob import DNS_LABEL, JOB_NAME_MAX_LENGTH, RLJobSpec, RLJobStatus

JSON = dict[str, Any]

# Keys a structural schema accepts; anything else pydantic emits is dropped.
_KEPT = {
    "type",
    "description",
    "default",
    "enum",
    "format",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "minProperties",
    "required",
    "properties",
    "items",
    "additionalProperties",
    "nullable",
}


def _resolve(node: JSON, defs: JSON) -> JSON:
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        # A field's own description/default beat the referenced model's.
        return {**target, **siblings}
    return node


def _optional_inner(node: JSON) -> JSON | None:
    """``X | None`` arrives as ``anyOf: [X, {type: null}]``; return X."""
    options = node.get("anyOf")
    if not isinstance(options, list):
        return None
    rest = [o for o in options if o.get("type") != "null"]
    if len(rest) != 1 or len(rest) == len(options):
        raise ValueError(f"only `X | None` unions are supported, got {options!r}")
    inner: JSON = rest[0]
    return inner


def structural(node: JSON, defs: JSON) -> JSON:
    """Rewrite one pydantic JSON-schema node into a structural OpenAPI node."""
    node = _resolve(node, defs)
    inner = _optional_inner(node)
    if inner is not None:
        merged = {k: v for k, v in node.items() if k not in ("anyOf", "default")}
        if node.get("default") is not None:
            merged["default"] = node["default"]
        node = {**_resolve(inner, defs), **merged}
    out: JSON = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-"):
            out[key] = value
        elif key not in _KEPT:
            continue
        elif key == "properties":
            out[key] = {name: structural(child, defs) for name, child in value.items()}
        elif key == "items":
            out[key] = structural(value, defs)
        elif key == "additionalProperties":
            if isinstance(value, dict):
                out[key] = structural(value, defs)
            # `false` (extra="forbid") is implied: structural schemas prune unknown
            # fields, and kubectl's strict field validation rejects them.
        elif key == "default" and value in ([], {}):
            continue  # empty collections would only clutter every object
        else:
            out[key] = value
    return out


def _model_schema(model: type[RLJobSpec] | type[RLJobStatus]) -> JSON:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return structural(raw, raw.get("$defs", {}))


def _printer_columns() -> list[JSON]:
    return [
        {"name": "State", "type": "string", "jsonPath": ".status.state"},
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "GPUs", "type": "integer", "jsonPath": ".status.gpus"},
        {"name": "Iterations", "type": "integer", "jsonPath": ".status.iterations"},
        {"name": "Reason", "type": "string", "jsonPath": ".status.reason"},
        {"name": "Priority", "type": "integer", "jsonPath": ".spec.priority", "priority": 1},
        # Why a trainer reads idle while its partner works: its pods wait at the gate.
        {
            "name": "Waiting",
            "type": "integer",
            "jsonPath": ".status.waitingForTurn",
            "priority": 1,
        },
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]


def openapi_schema() -> JSON:
    """The ``openAPIV3Schema`` of the RLJob kind."""
    return {
        "type": "object",
        "description": "An RL post-training job (PPO, GRPO, ...) scheduled phase-aware by RLix.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": _model_schema(RLJobSpec),
            "status": _model_schema(RLJobStatus),
        },
        "x-kubernetes-validations": [
            {
                "rule": f"size(self.metadata.name) <= {JOB_NAME_MAX_LENGTH}",
                "message": (
                    f"metadata.name must be at most {JOB_NAME_MAX_LENGTH} characters "
                    "(pod names are <job>-<role>-<index>)"
                ),
            },
            {
                # A valid object name may hold dots; a pod hostname may not.
                "rule": f"self.metadata.name.matches('{DNS_LABEL}')",
                "message": (
                    "metadata.name must be a DNS label (lowercase letters, digits and '-', "
                    "no '.'): it names the job's pods and their hostnames"
                ),
            },
        ],
    }


def rljob_crd() -> JSON:
    """The whole CustomResourceDefinition object for RLJob."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{names.PLURAL}.{names.GROUP}"},
        "spec": {
            "group": names.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": names.KIND,
                "listKind": f"{names.KIND}List",
                "plural": names.PLURAL,
                "singular": names.SINGULAR,
                "shortNames": [names.SHORT_NAME],
                "categories": ["rlix"],
            },
            "versions": [
                {
                    "name": names.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": _printer_columns(),
                    "schema": {"openAPIV3Schema": openapi_schema()},
                }
            ],
        },
    }
