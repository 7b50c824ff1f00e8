"""Fuzz the endpoints: any body gets a protocol answer, never a 500 or a crash.

The app has a last-resort handler that turns an unexpected exception into the
verb's protocol answer with an ``Error`` (or log line) saying "could not
handle"; these tests fail on that too, so a bug the safety net hides is still
found.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlix.extender.app import create_app
from rlix.extender.cache import ADDED, ClusterCache
from tests.builders.objects import node_object, pod_object
from tests.builders.placement import cluster, node, pod

NODES = ["n0", "n1", "n2"]
SAFETY_NET = "could not handle"


def make_app() -> Any:
    snap = (
        cluster()
        .with_nodes(node("n0"), node("n1").gpus(2), node("n2").gpus(4).domain("d"))
        .with_pods(
            pod("a").job("j", gang=2).memory(20000).phase("rollout").on("n0", 0),
            pod("b").job("j", gang=2).memory(20000).phase("training").on("n0", 1),
            pod("c").memory(70000).phase("scoring").preemptible(False).on("n1"),
        )
        .build()
    )
    cache = ClusterCache()
    for n in snap.nodes.values():
        cache.apply_node(ADDED, node_object(n))
    for w in snap.workloads:
        cache.apply_pod(ADDED, pod_object(w))
    return create_app(cache)


APP = make_app()


def post(verb: str, body: bytes) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=APP)
        async with httpx.AsyncClient(transport=transport, base_url="http://x") as client:
            return await client.post(f"/{verb}", content=body)

    return asyncio.run(go())


def check(verb: str, r: httpx.Response, names: list[str] | None = None) -> Any:
    assert r.status_code == 200, r.text
    body = r.json()
    if isinstance(body, dict) and "Error" in body:
        assert SAFETY_NET not in body["Error"], body["Error"]
    if verb == "filter":
        assert r.status_code == 200
        assert isinstance(body["NodeNames"], list)
        if names is not None and not body["Error"]:
            answered = (
                set(body["NodeNames"])
                | set(body["FailedNodes"])
                | set(body["FailedAndUnresolvableNodes"])
            )
            assert answered <= set(names)
            # The filter passes on only the fitting nodes RLix scores best and
            # leaves the other fitting ones out (handlers.do_filter); when none
            # fits, every node gets its reason.
            if not body["NodeNames"]:
                assert answered == set(names)
    elif verb == "prioritize":
        assert all(0 <= h["Score"] <= 10 for h in body)
        if names is not None:
            assert [h["Host"] for h in body] == names
    elif verb == "preempt":
        for node_name, victims in body["NodeNameToMetaVictims"].items():
            assert victims["Pods"], f"{node_name} returned without victims"
    return body


VERBS = st.sampled_from(["filter", "prioritize", "preempt"])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(VERBS, st.binary(max_size=200))
def test_arbitrary_bytes(verb: str, body: bytes) -> None:
    check(verb, post(verb, body))


@FUZZ
@given(
    VERBS,
    st.fixed_dictionaries(
        {},
        optional={
            "Pod": json_values,
            "NodeNames": json_values,
            "Nodes": json_values,
            "NodeNameToMetaVictims": json_values,
            "NodeNameToVictims": json_values,
        },
    ),
)
def test_protocol_shaped_garbage(verb: str, doc: dict[str, Any]) -> None:
    check(verb, post(verb, json.dumps(doc).encode()))


annotation_values = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["+-5", "\u00b2", "1e3", " 7 ", "0x10", "-0", "99999999999999999999", "true"]),
    st.integers(-5, 200000).map(str),
    st.dictionaries(st.sampled_from(["rollout", "training", "x", ""]), st.integers(-1, 99999)).map(
        json.dumps
    ),
)


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    obj = pod_object(
        pod(draw(st.sampled_from(["p", "ns/q"]))).gpus(draw(st.integers(0, 9))).build()
    )
    keys = [
        "rlix.io/gpu-memory-mib", "rlix.io/priority", "rlix.io/gang-size", "rlix.io/suspended",
        "rlix.io/gpu-indices", "rlix.io/phase", "rlix.io/preemptible",
    ]  # fmt: skip
    notes = draw(st.dictionaries(st.sampled_from(keys), annotation_values, max_size=4))
    obj["metadata"]["annotations"].update(notes)
    if draw(st.booleans()):
        obj["spec"]["containers"][0]["resources"] = {
            "limits": {"nvidia.com/gpu": draw(annotation_values | st.integers(-2, 20))}
        }
    if draw(st.booleans()):
        obj["spec"].pop("priority")
    return obj


node_lists = st.lists(st.sampled_from([*NODES, "ghost", ""]), max_size=6)


@FUZZ
@given(VERBS, pods(), node_lists)
def test_real_looking_pods_with_garbage_annotations(
    verb: str, p: dict[str, Any], names: list[str]
) -> None:
    if verb == "preempt":
        victims = {n: {"Pods": [{"UID": "uid-default-a"}, {"UID": "uid-x"}]} for n in names}
        body = json.dumps({"Pod": p, "NodeNameToMetaVictims": victims}).encode()
        check(verb, post(verb, body))
    else:
        body = json.dumps({"Pod": p, "NodeNames": names}).encode()
        check(verb, post(verb, body), list(dict.fromkeys(names)))
