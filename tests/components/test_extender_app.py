"""The extender through an ASGI client: the wire format kube-scheduler speaks."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from rlix.core.policy.placement.sharing import DEFAULT_RULES, SharingRules
from rlix.extender.app import create_app
from rlix.extender.cache import ADDED, DELETED, VICTIM_WAIT_S, ClusterCache
from rlix.extender.replay import replay
from tests.builders.objects import extender_args, node_object, pod_object, preemption_args, uid_for
from tests.builders.placement import ClusterBuilder, cluster, node, pod

GiB = 1024
UNRESOLVABLE = "FailedAndUnresolvableNodes"
FILTER_KEYS = {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}


def call(app: Any, method: str, path: str, body: bytes | None = None) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://extender") as client:
            return await client.request(method, path, content=body)

    return asyncio.run(go())


def fed(
    c: ClusterBuilder,
    *,
    ready: bool = True,
    rules: SharingRules = DEFAULT_RULES,
    clock: Callable[[], float] = time.monotonic,
) -> ClusterCache:
    snap = c.build()
    cache = ClusterCache(rules, clock)
    for n in snap.nodes.values():
        cache.apply_node(ADDED, node_object(n))
    for w in snap.workloads:
        cache.apply_pod(ADDED, pod_object(w))
    if ready:
        cache.mark_synced("nodes")
        cache.mark_synced("pods")
    return cache


CLUSTER = (
    cluster()
    .with_nodes(node("train-node"), node("roll-node"), node("tiny").gpus(2, mib=24 * GiB))
    .with_pods(
        *[pod(f"t{i}").job("a").memory(40 * GiB).phase("training").on("train-node", i)
          for i in range(8)],
        *[pod(f"r{i}").job("b").memory(40 * GiB).phase("rollout").on("roll-node", i)
          for i in range(8)],
    )
)  # fmt: skip
NEW_ROLLOUT = pod_object(pod("new").job("z").role("rollout").memory(30 * GiB).build())


@pytest.fixture
def app() -> Any:
    return create_app(fed(CLUSTER))


def test_filter_answers_with_go_field_names_and_readable_reasons(app: Any) -> None:
    names = ["train-node", "roll-node", "tiny", "ghost"]
    r = call(app, "POST", "/filter", extender_args(NEW_ROLLOUT, names))
    assert r.status_code == 200
    body = r.json()
    assert set(body) == FILTER_KEYS
    # Both big nodes fit; only the one RLix scores best goes on (beside the
    # training pod), and the other is left out, not failed.
    assert body["NodeNames"] == ["train-node"]
    assert body["FailedNodes"] == {}
    assert body["Error"] == ""
    assert "per GPU" in body["FailedAndUnresolvableNodes"]["tiny"]
    assert "not in the rlix extender's cache" in body["FailedAndUnresolvableNodes"]["ghost"]
    assert set(body["FailedAndUnresolvableNodes"]) == {"tiny", "ghost"}


def test_filter_keeps_every_node_tied_for_the_best_score_in_the_order_sent() -> None:
    c = cluster().with_nodes(node("a"), node("b"), node("c").gpus(2, mib=24 * GiB), node("d"))
    app = create_app(fed(c))
    names = ["d", "c", "b", "a"]
    body = call(app, "POST", "/filter", extender_args(NEW_ROLLOUT, names)).json()
    scores = {
        h["Host"]: h["Score"]
        for h in call(app, "POST", "/prioritize", extender_args(NEW_ROLLOUT, names)).json()
    }
    assert scores["a"] == scores["b"] == scores["d"] > scores["c"]
    assert body["NodeNames"] == ["d", "b", "a"]  # c is too small: failed, with why
    assert "per GPU" in body["FailedAndUnresolvableNodes"]["c"]


def test_filter_answer_is_the_best_of_what_prioritize_scores() -> None:
    """The node kube-scheduler can pick from the filter's answer alone is one
    prioritize would have ranked first among every fitting node."""
    c = CLUSTER.with_nodes(node("empty-1"), node("empty-2"))
    app = create_app(fed(c))
    names = ["empty-1", "roll-node", "train-node", "empty-2", "tiny"]
    for pending in (NEW_ROLLOUT, pod_object(pod("t").job("y").role("trainer").build())):
        body = call(app, "POST", "/filter", extender_args(pending, names)).json()
        kept, failed = body["NodeNames"], body["FailedNodes"]
        fitting = [n for n in names if n not in failed and n not in body[UNRESOLVABLE]]
        assert len(fitting) >= 3, fitting
        scored = call(app, "POST", "/prioritize", extender_args(pending, fitting)).json()
        top = max(h["Score"] for h in scored)
        assert kept == [h["Host"] for h in scored if h["Score"] == top]


def test_filter_always_returns_node_names_even_empty(app: Any) -> None:
    big = pod_object(pod("big").gpus(16).memory(1 * GiB).build())
    body = call(app, "POST", "/filter", extender_args(big, ["train-node"])).json()
    assert body["NodeNames"] == []
    assert "node has 8 GPUs, pod needs 16" in body["FailedAndUnresolvableNodes"]["train-node"]


def test_prioritize_prefers_the_complementary_node(app: Any) -> None:
    r = call(app, "POST", "/prioritize", extender_args(NEW_ROLLOUT, ["roll-node", "train-node"]))
    assert r.status_code == 200
    scores = {h["Host"]: h["Score"] for h in r.json()}
    assert set(r.json()[0]) == {"Host", "Score"}
    assert scores["train-node"] > scores["roll-node"]
    assert all(0 <= s <= 10 for s in scores.values())


def test_with_an_interference_matrix_a_pair_that_loses_progress_does_not_share() -> None:
    """Under the H200 matrix (``SharingRules()``, what ``--interference
    bench/results/gpu_interference.json`` loads) a rollout beside a training
    GPU delivers 0.95 of one GPU's progress and beside another rollout 0.90,
    both below rule 5's 4/3: the new rollout goes to the empty node, and the
    nodes it would have shared are failed saying which rules refused it. The
    captured snapshot carries the rules, so its replay refuses the same."""
    c = CLUSTER.with_nodes(node("empty"))
    names = ["train-node", "roll-node", "empty"]
    sharing = call(create_app(fed(c)), "POST", "/filter", extender_args(NEW_ROLLOUT, names))
    assert sharing.json()["NodeNames"] == ["train-node"]

    app = create_app(fed(c, rules=SharingRules()))
    body = call(app, "POST", "/filter", extender_args(NEW_ROLLOUT, names)).json()
    assert body["NodeNames"] == ["empty"]
    assert set(body["FailedNodes"]) == {"train-node", "roll-node"}
    for reason in body["FailedNodes"].values():
        assert "8 of 8 GPUs have room for the pod, but the sharing rules" in reason, reason
        assert "at most 0 of them together" in reason, reason

    snap = call(app, "GET", "/debug/snapshot").json()
    assert snap["sharingRules"]["interference"]["memory"]["compute"] == 2.17
    report = replay(snap, NEW_ROLLOUT, names)
    assert [r["node"] for r in report["ranking"]] == ["empty"]
    assert report["failed"] == body["FailedNodes"]
    # Asked with other rules, the same snapshot shares again.
    assert replay(snap, NEW_ROLLOUT, names, DEFAULT_RULES)["failed"] == {}


def test_with_the_matrix_disaggregated_pools_that_say_their_seconds_share() -> None:
    """grpo-trl.yaml's pools (docs/rljob.md): a rollout pod works 250 s of a
    360 s iteration and waits 110, a trainer pod works 120 and waits 240.
    Under the H200 matrix two busy kernels deliver 0.90-0.95 of a GPU, but
    pods that idle most of their cycle take turns at the phase gate, so the
    pair's expected progress passes rule 5 (``sharing``): a trainer of one job
    may go beside another job's rollout pod when both say their seconds
    (``rlix.io/phase-seconds``), and not when either leaves them out."""
    rollout = pod("r0").job("a").role("rollout").memory(rollout=30 * GiB, idle=30 * GiB)
    trainer = pod("t0").job("b").role("trainer").memory(training=30 * GiB, idle=30 * GiB)
    said_rollout = rollout.load(("rollout", 250 / 360, 1.0), ("idle", 110 / 360, 0.0)).iteration(
        360
    )
    said_trainer = trainer.load(("training", 120 / 360, 1.0), ("idle", 240 / 360, 0.0)).iteration(
        360
    )
    one_gpu = node("n").gpus(1)
    for resident, pending, shares in (
        (said_rollout, said_trainer, True),
        (rollout, said_trainer, False),
        (said_rollout, trainer, False),
    ):
        cache = fed(
            cluster().with_nodes(one_gpu).with_pods(resident.phase("rollout").on("n", 0)),
            rules=SharingRules(),
        )
        body = call(
            create_app(cache), "POST", "/filter", extender_args(pod_object(pending.build()), ["n"])
        ).json()
        if shares:
            assert body["NodeNames"] == ["n"], body
        else:
            assert body["NodeNames"] == [] and "sharing rules" in body["FailedNodes"]["n"], body


# One node, two GPUs: a training pod and a rollout pod of two jobs, 70 GiB each.
TRAIN_AND_ROLLOUT = (
    cluster()
    .with_nodes(node("n").gpus(2))
    .with_pods(
        pod("train").job("a").memory(70 * GiB).phase("training").on("n", 0),
        pod("roll").job("b").memory(70 * GiB).phase("rollout").on("n", 1),
    )
)


def test_preempt_rewrites_victims_to_the_least_harmful() -> None:
    app = create_app(fed(TRAIN_AND_ROLLOUT))
    # A plain pod (RLix does not manage it): only kube-scheduler can make room.
    vip = pod_object(pod("vip").memory(60 * GiB).priority(100).build())
    r = call(app, "POST", "/preempt", preemption_args(vip, {"n": [uid_for("default/train")]}))
    assert r.status_code == 200
    assert r.json() == {
        "NodeNameToMetaVictims": {
            "n": {"Pods": [{"UID": uid_for("default/roll")}], "NumPDBViolations": 0}
        }
    }
    # An RLix pod: the conductor parks RLix pods in place; kube-scheduler deletes none.
    rlix_vip = pod_object(pod("vip").job("v").memory(60 * GiB).priority(100).build())
    r = call(app, "POST", "/preempt", preemption_args(rlix_vip, {"n": [uid_for("default/train")]}))
    assert r.json() == {"NodeNameToMetaVictims": {}}


def test_preempt_drops_a_node_whose_only_victim_is_protected() -> None:
    c = (
        cluster()
        .with_nodes(node("n").gpus(1))
        .with_pods(
            pod("keep").job("a").memory(70 * GiB).phase("rollout").preemptible(False).on("n", 0)
        )
    )
    app = create_app(fed(c))
    vip = pod_object(pod("vip").memory(60 * GiB).priority(100).build())
    r = call(app, "POST", "/preempt", preemption_args(vip, {"n": [uid_for("default/keep")]}))
    assert r.json() == {"NodeNameToMetaVictims": {}}


def test_pod_with_garbage_annotation_is_told_why_on_every_node(app: Any) -> None:
    bad = pod_object(pod("bad").build())
    bad["metadata"]["annotations"]["rlix.io/gpu-memory-mib"] = "lots"
    body = call(app, "POST", "/filter", extender_args(bad, ["train-node", "roll-node"])).json()
    assert body["NodeNames"] == []
    reasons = body["FailedAndUnresolvableNodes"]
    assert set(reasons) == {"train-node", "roll-node"}
    assert "rlix.io/gpu-memory-mib: must be an integer MiB" in reasons["train-node"]
    scores = call(app, "POST", "/prioritize", extender_args(bad, ["train-node"])).json()
    assert scores == [{"Host": "train-node", "Score": 0}]


def test_pod_without_gpus_passes_filter_untouched(app: Any) -> None:
    cpu = pod_object(pod("cpu").gpus(0).build())
    body = call(app, "POST", "/filter", extender_args(cpu, ["tiny", "ghost"])).json()
    assert body["NodeNames"] == ["tiny", "ghost"]


def test_full_node_list_mode_is_answered_too(app: Any) -> None:
    nodes = {"items": [node_object(n) for n in CLUSTER.build().nodes.values()]}
    body = json.dumps({"Pod": NEW_ROLLOUT, "Nodes": nodes, "NodeNames": None}).encode()
    out = call(app, "POST", "/filter", body).json()
    assert out["NodeNames"] == ["train-node"]  # the best of the two that fit
    assert [i["metadata"]["name"] for i in out["Nodes"]["items"]] == ["train-node"]


@pytest.mark.parametrize(
    ("verb", "body", "words"),
    [
        ("filter", b"", "empty request body"),
        ("filter", b"{not json", "not JSON"),
        ("filter", b"[1]", "must be a JSON object"),
        ("filter", b'{"NodeNames": ["a"]}', "field Pod"),
        ("filter", b'{"Pod": {}, "NodeNames": "a"}', "NodeNames must be a list"),
        ("filter", b'{"Pod": {"metadata": {"name": "p"}}}', "neither NodeNames nor Nodes"),
        ("prioritize", b"{", "not JSON"),
        ("preempt", b'{"Pod": {}, "NodeNameToMetaVictims": []}', "must be an object"),
        ("preempt", b'{"Pod": {}, "NodeNameToMetaVictims": {"n": {"Pods": [{}]}}}', "no UID"),
    ],
)
def test_malformed_requests_get_a_clear_error(
    app: Any, verb: str, body: bytes, words: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="rlix.extender.app")
    r = call(app, "POST", f"/{verb}", body)
    assert r.status_code == 200
    payload = r.json()
    if verb == "filter":
        assert words in payload["Error"] and payload["NodeNames"] == []
    else:  # these formats have no Error field: the reason goes to the log
        assert payload == ([] if verb == "prioritize" else {"NodeNameToMetaVictims": {}})
        assert words in caplog.text


def test_health_readiness_metrics_and_snapshot() -> None:
    cache = fed(CLUSTER, ready=False)
    app = create_app(cache)
    assert call(app, "GET", "/healthz").status_code == 200
    assert call(app, "GET", "/readyz").status_code == 503
    cache.mark_synced("nodes")
    cache.mark_synced("pods")
    assert call(app, "GET", "/readyz").status_code == 200

    call(app, "POST", "/filter", extender_args(NEW_ROLLOUT, ["train-node"]))
    call(app, "POST", "/prioritize", b"{")
    text = call(app, "GET", "/metrics").text
    assert 'rlix_extender_request_seconds_count{verb="filter"} 1.0' in text
    assert 'rlix_extender_requests_total{outcome="bad_request",verb="prioritize"} 1.0' in text
    assert "rlix_extender_cache_nodes 3.0" in text

    snap = call(app, "GET", "/debug/snapshot").json()
    assert {n["name"] for n in snap["nodes"]} == {"train-node", "roll-node", "tiny"}
    assert snap["sharingRules"]["interference"] is None  # no --interference: rules 1-3
    assert snap["uids"][uid_for("default/t0")] == "default/t0"
    # The captured snapshot replays offline to the same verdict as the live app.
    report = replay(snap, NEW_ROLLOUT)
    live = call(app, "POST", "/prioritize", extender_args(NEW_ROLLOUT, ["train-node", "roll-node"]))
    live_scores = {h["Host"]: h["Score"] for h in live.json()}
    assert [r["node"] for r in report["ranking"]] == ["train-node", "roll-node"]
    assert {r["node"]: r["score"] for r in report["ranking"]} == live_scores
    assert "tiny" in report["unresolvable"]


def test_unknown_route_is_404_not_500(app: Any) -> None:
    assert call(app, "POST", "/bind", b"{}").status_code == 404
    assert call(app, "GET", "/filter").status_code == 405


def test_a_preemptor_refused_for_victims_the_view_still_holds_gets_an_error_to_retry() -> None:
    # kube-scheduler retries a preemptor once its own informer sees the victims
    # deleted; this cache's watch may not have them yet. A refusal then would
    # leave the pod unschedulable until some later event; an error makes
    # kube-scheduler retry it after its backoff.
    now = [0.0]
    cache = fed(TRAIN_AND_ROLLOUT, clock=lambda: now[0])
    app = create_app(cache)
    vip = pod_object(pod("vip").memory(60 * GiB).priority(100).build())
    other = pod_object(pod("other").memory(60 * GiB).priority(100).build())
    r = call(app, "POST", "/preempt", preemption_args(vip, {"n": [uid_for("default/train")]}))
    assert r.json()["NodeNameToMetaVictims"]["n"]["Pods"] == [{"UID": uid_for("default/roll")}]

    body = call(app, "POST", "/filter", extender_args(vip, ["n"])).json()
    assert body["NodeNames"] == [] and "default/roll" in body["Error"], body
    # Only the preemptor it was named for waits; any other pod is refused as before.
    body = call(app, "POST", "/filter", extender_args(other, ["n"])).json()
    assert body["Error"] == "" and "n" in body["FailedNodes"], body

    # The deletion reaches the view: the node fits.
    cache.apply_pod(DELETED, pod_object(pod("roll").job("b").memory(70 * GiB).on("n", 1).build()))
    body = call(app, "POST", "/filter", extender_args(vip, ["n"])).json()
    assert body["NodeNames"] == ["n"] and body["Error"] == "", body


def test_a_victim_never_deleted_is_awaited_only_for_a_while() -> None:
    now = [0.0]
    c = (
        cluster()
        .with_nodes(node("n").gpus(1))
        .with_pods(pod("roll").job("b").memory(70 * GiB).phase("rollout").on("n", 0))
    )
    cache = fed(c, clock=lambda: now[0])
    # The scheduler picked another node: this victim stays.
    cache.expect_deleted("uid-vip", [uid_for("default/roll")])
    assert cache.awaited_victims("uid-vip", {"n"}) == ["default/roll"]
    assert cache.awaited_victims("uid-vip", {"elsewhere"}) == []
    assert cache.awaited_victims("uid-other", {"n"}) == []
    now[0] = VICTIM_WAIT_S
    assert cache.awaited_victims("uid-vip", {"n"}) == []
