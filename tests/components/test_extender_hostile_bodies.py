"""Hostile request bodies get the protocol's answer, never the last-resort handler.

Issue 18, item 1: 5,000-digit integers and 100k-deep JSON nesting in a body got
HTTP 400 from the app's last-resort handler. Each verb now answers status 200
in its own wire format (ARCHITECTURE.md): filter an ``ExtenderFilterResult``
with ``Error`` (or the reason on every node when the pod itself is bad),
prioritize an empty ``HostPriorityList``, preempt no candidate node.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from rlix.extender.app import create_app
from rlix.extender.cache import ClusterCache
from rlix.extender.metrics import ExtenderMetrics
from rlix.extender.wire import MAX_BODY_BYTES

HUGE = "9" * 5000
DEEP = "[" * 100_000 + "]" * 100_000
POD = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": {"containers": []}}


def args(pod: Any = POD, **extra: Any) -> bytes:
    return json.dumps({"Pod": pod, "NodeNames": ["n0"], **extra}).encode()


def annotated(value: str) -> dict[str, Any]:
    return {**POD, "metadata": {**POD["metadata"], "annotations": {"rlix.io/gang-size": value}}}


BODIES = {
    "5,000-digit number": b'{"Pod": {}, "NodeNames": ["n0"], "X": ' + HUGE.encode() + b"}",
    "5,000-digit victim count": (
        b'{"Pod": {}, "NodeNameToMetaVictims": {"n0": {"Pods": [], "NumPDBViolations": '
        + HUGE.encode()
        + b"}}}"
    ),
    "100k-deep nesting": b'{"Pod": ' + DEEP.encode() + b"}",
    "100k-deep nesting at the top": DEEP.encode(),
    "oversized": b'{"Pod": {}, "NodeNames": ["' + b"n" * MAX_BODY_BYTES + b'"]}',
    "node name too long": args(NodeNames=["n" * 300]),
    "5,000-digit gang size on the pod": args(annotated(HUGE)),
    "deep JSON in the memory annotation": args(
        {**POD, "metadata": {**POD["metadata"], "annotations": {"rlix.io/gpu-memory-mib": DEEP}}}
    ),
}


def post(app: Any, verb: str, body: bytes) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://x") as client:
            return await client.post(f"/{verb}", content=body)

    return asyncio.run(go())


@pytest.fixture(scope="module")
def served() -> tuple[Any, ExtenderMetrics]:
    metrics = ExtenderMetrics()
    return create_app(ClusterCache(), metrics), metrics


@pytest.mark.parametrize("what", list(BODIES))
@pytest.mark.parametrize("verb", ["filter", "prioritize", "preempt"])
def test_hostile_bodies_get_a_protocol_answer(
    served: tuple[Any, ExtenderMetrics], verb: str, what: str
) -> None:
    app, metrics = served
    r = post(app, verb, BODIES[what])
    assert r.status_code == 200, r.text[:300]
    body = r.json()
    if verb == "filter":
        assert body["NodeNames"] == []
        why = body["Error"] or " ".join(body["FailedAndUnresolvableNodes"].values())
        assert why and "could not handle" not in why
        assert HUGE not in why
    elif verb == "prioritize":
        assert body in ([], [{"Host": "n0", "Score": 0}])
    else:
        assert body == {"NodeNameToMetaVictims": {}}
    internal = metrics.requests.labels(verb, "internal")._value.get()
    assert internal == 0, "the last-resort handler answered"


def test_a_bad_pod_in_a_filter_names_the_pod_and_the_annotation(
    served: tuple[Any, ExtenderMetrics],
) -> None:
    app, _ = served
    body = post(app, "filter", args(annotated(HUGE))).json()
    reason = body["FailedAndUnresolvableNodes"]["n0"]
    assert "Pod ns/p" in reason and "rlix.io/gang-size" in reason
    assert "a string of 5000 characters" in reason
