"""The kube-scheduler extender wire format (k8s.io/kube-scheduler/extender/v1).

The Go structs carry no json tags, so the keys are the Go field names:
``ExtenderArgs{Pod, Nodes, NodeNames}``,
``ExtenderFilterResult{Nodes, NodeNames, FailedNodes, FailedAndUnresolvableNodes, Error}``,
``HostPriorityList [{Host, Score}]``,
``ExtenderPreemptionArgs{Pod, NodeNameToVictims, NodeNameToMetaVictims}``,
``ExtenderPreemptionResult{NodeNameToMetaVictims}`` with
``MetaVictims{Pods [{UID}], NumPDBViolations}``. The Pod inside is a ``v1.Pod``,
which *does* have json tags (``metadata``, ``spec``).

Parsing is hand-written rather than pydantic because the scheduler sends up to
thousands of names per call and the answer must take milliseconds; every
malformed shape raises ``WireError`` with a sentence that says what was wrong.
Every value is bounded the way ``rlix.core.objects`` bounds annotations: the
body's size (checked before parsing), JSON nesting (the C parser's recursion
limit, caught), integers (a JSON number above 4,300 digits is refused by the
parser; counts are range-checked) and names, so a hostile body gets a
``WireError``, which the handlers turn into a protocol answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii as _json_str
from typing import Any, TypeGuard

# A nodeCacheCapable=false call carries full Node objects: ~5 KiB each, so
# 5,000 nodes are ~25 MiB. Anything above this is not a scheduler's message.
MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_NODES = 100_000
NAME_MAX_CHARS = 253
INT32_MAX = 2**31 - 1


class WireError(ValueError):
    """A request body is not a valid extender message."""


def _name(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and len(value) <= NAME_MAX_CHARS


def _names(values: list[Any]) -> bool:
    """Whether every item is a name: ``_name`` for a whole list at C speed (a
    scheduler sends thousands per call, and this runs on every call)."""
    return set(map(type, values)) <= {str} and max(map(len, values), default=0) <= NAME_MAX_CHARS


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    pod: Mapping[str, Any]
    node_names: list[str]
    # The NodeList items when the scheduler is not nodeCacheCapable (else None).
    node_items: list[Mapping[str, Any]] | None


@dataclass(frozen=True, slots=True)
class PreemptionArgs:
    pod: Mapping[str, Any]
    # node -> (victim UIDs, NumPDBViolations)
    victims: dict[str, tuple[list[str], int]]


def decode(body: bytes) -> Mapping[str, Any]:
    if not body:
        raise WireError("empty request body; expected a JSON object")
    if len(body) > MAX_BODY_BYTES:
        raise WireError(f"request body is larger than {MAX_BODY_BYTES} bytes")
    try:
        value = json.loads(body)
    except RecursionError:
        raise WireError("request body is JSON nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise WireError(f"request body is not JSON: {str(exc)[:200]}") from None
    if not isinstance(value, dict):
        raise WireError(f"request body must be a JSON object, got {type(value).__name__}")
    return value


def _pod(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    pod = doc.get("Pod")
    if not isinstance(pod, dict):
        raise WireError("field Pod is missing or not an object")
    return pod


def parse_args(body: bytes) -> ExtenderArgs:
    """Read ExtenderArgs (filter and prioritize)."""
    doc = decode(body)
    pod = _pod(doc)
    raw_names = doc.get("NodeNames")
    raw_nodes = doc.get("Nodes")
    items: list[Mapping[str, Any]] | None = None
    if raw_names is not None:
        if not isinstance(raw_names, list) or len(raw_names) > MAX_NODES or not _names(raw_names):
            raise WireError(
                f"field NodeNames must be a list of at most {MAX_NODES} node names "
                f"(strings of at most {NAME_MAX_CHARS} characters)"
            )
        names: list[str] = raw_names
    elif raw_nodes is not None:
        if not isinstance(raw_nodes, dict):
            raise WireError("field Nodes must be a NodeList object")
        raw_items = raw_nodes.get("items") or []
        if (
            not isinstance(raw_items, list)
            or len(raw_items) > MAX_NODES
            or not all(isinstance(i, dict) for i in raw_items)
        ):
            raise WireError(f"field Nodes.items must be a list of at most {MAX_NODES} Node objects")
        items = raw_items
        names = []
        for i, item in enumerate(items):
            meta = item.get("metadata")
            name = meta.get("name") if isinstance(meta, dict) else None
            if not _name(name):
                raise WireError(f"Nodes.items[{i}] has no usable metadata.name")
            names.append(name)
    else:
        raise WireError("neither NodeNames nor Nodes is set")
    return ExtenderArgs(pod=pod, node_names=names, node_items=items)


def parse_preemption(body: bytes) -> PreemptionArgs:
    """Read ExtenderPreemptionArgs (NodeNameToMetaVictims, or full Victims)."""
    doc = decode(body)
    pod = _pod(doc)
    meta = doc.get("NodeNameToMetaVictims")
    full = doc.get("NodeNameToVictims")
    source, key = (
        (meta, "NodeNameToMetaVictims") if meta is not None else (full, "NodeNameToVictims")
    )
    if source is None:
        source = {}
    if not isinstance(source, dict) or len(source) > MAX_NODES:
        raise WireError(f"field {key} must be an object of node name -> victims")
    out: dict[str, tuple[list[str], int]] = {}
    for node, victims in source.items():
        if not _name(node):
            raise WireError(f"field {key} has a key that is not a node name")
        if victims is None:
            continue
        if not isinstance(victims, dict):
            raise WireError(f"{key}[{node!r}] must be an object")
        pods = victims.get("Pods") or []
        if not isinstance(pods, list):
            raise WireError(f"{key}[{node!r}].Pods must be a list")
        uids = []
        for i, p in enumerate(pods):
            uid = p.get("UID") if isinstance(p, dict) else None
            if uid is None and isinstance(p, dict):  # full v1.Pod
                m = p.get("metadata")
                uid = m.get("uid") if isinstance(m, dict) else None
            if not _name(uid):
                raise WireError(f"{key}[{node!r}].Pods[{i}] has no UID")
            uids.append(uid)
        pdb = victims.get("NumPDBViolations", 0)
        if isinstance(pdb, bool) or not isinstance(pdb, int) or not 0 <= pdb <= INT32_MAX:
            pdb = 0  # informational only; passed back unchanged when it is sane
        out[node] = (uids, pdb)
    return PreemptionArgs(pod=pod, victims=out)


def filter_result(
    node_names: Sequence[str],
    failed: Mapping[str, str],
    unresolvable: Mapping[str, str],
    *,
    node_items: Sequence[Mapping[str, Any]] | None = None,
    error: str = "",
) -> dict[str, Any]:
    """ExtenderFilterResult; NodeNames is always a list (never null), as advised."""
    nodes = None
    if node_items is not None:
        keep = set(node_names)
        nodes = {"items": [i for i in node_items if i.get("metadata", {}).get("name") in keep]}
    return {
        "Nodes": nodes,
        "NodeNames": list(node_names),
        "FailedNodes": dict(failed),
        "FailedAndUnresolvableNodes": dict(unresolvable),
        "Error": error,
    }


def empty_preemption() -> dict[str, Any]:
    """ExtenderPreemptionResult with no candidate node (the scheduler tries none)."""
    return {"NodeNameToMetaVictims": {}}


def priority_list(scores: Mapping[str, int]) -> list[dict[str, Any]]:
    return [{"Host": host, "Score": int(score)} for host, score in scores.items()]


def encode_priority_list(items: Sequence[Mapping[str, Any]]) -> bytes:
    """``priority_list``'s answer as compact JSON, a third of ``json.dumps``'s CPU
    for a thousand hosts (the encoder's per-dict work is the bulk of a prioritize
    call's framing). Hosts are JSON-escaped by the json module's own C routine."""
    return (
        "["
        + ",".join([f'{{"Host":{_json_str(i["Host"])},"Score":{int(i["Score"])}}}' for i in items])
        + "]"
    ).encode()


def preemption_result(victims: Mapping[str, tuple[Sequence[str], int]]) -> dict[str, Any]:
    return {
        "NodeNameToMetaVictims": {
            node: {"Pods": [{"UID": uid} for uid in uids], "NumPDBViolations": pdb}
            for node, (uids, pdb) in victims.items()
        }
    }
