"""Scenario tables that pin the phase-complementarity score's preferences.

Each row: a cluster (nodes x GPUs, residents in their phases), a pod, and the
order of nodes best-first that the score must produce. Ties are written as
nested tuples, so a row also states where the score must *not* discriminate.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlix.core.phases import Phase
from rlix.core.policy.placement import PlacementView, likely_phase, score_nodes, score_values
from rlix.core.policy.placement.scoring import NodeScore, complement, interleave
from rlix.core.policy.placement.sharing import ASSUMED_CELLS, SharingRules
from rlix.core.snapshot import ClusterSnapshot
from tests.builders.placement import ClusterBuilder, PodBuilder, cluster, node, pod

GiB = 1024


def residents(node_name: str, phase: str, *, job: str, gpus: int = 8, mib: int = 40 * GiB):
    """One single-GPU pod of ``job`` per GPU of ``node_name``, all in ``phase``."""
    return [
        pod(f"{job}-{node_name}-{i}").job(job).memory(mib).phase(phase).on(node_name, i)
        for i in range(gpus)
    ]


def ranking(c: ClusterBuilder, p: PodBuilder) -> list[str]:
    snap = c.build()
    scores = score_nodes(PlacementView(snap), p.build(), list(snap.nodes))
    return [s.node for s in sorted(scores.values(), key=lambda s: (-s.score, s.node))]


def scores_of(c: ClusterBuilder, p: PodBuilder) -> dict[str, NodeScore]:
    snap = c.build()
    return dict(score_nodes(PlacementView(snap), p.build(), snap.nodes))


def check_order(
    scores: dict[str, NodeScore], expected: Sequence[str | tuple[str, ...]], *, wire: bool
) -> None:
    """Raw totals must follow ``expected`` strictly; the 0..10 wire scores never
    invert it, and (``wire``) must separate the groups too."""
    groups = [(g,) if isinstance(g, str) else g for g in expected]
    for better, worse in itertools.pairwise(groups):
        for b in better:
            for w in worse:
                sb, sw = scores[b], scores[w]
                assert sb.raw > sw.raw, f"{b} should beat {w}: {scores}"
                assert sb.score >= sw.score, f"rounding inverted {b} and {w}: {scores}"
                if wire:
                    assert sb.score > sw.score, f"{b} should beat {w} on the wire: {scores}"
    for g in groups:
        assert len({scores[n].score for n in g}) == 1, f"{g} should tie: {scores}"
        assert len({round(scores[n].raw, 9) for n in g}) == 1, f"{g} should tie: {scores}"


ROLLOUT_POD = pod("new").job("z").role("rollout").memory(30 * GiB)
TRAIN_POD = pod("new").job("z").role("trainer").memory(30 * GiB)

SCENARIOS = [
    pytest.param(
        cluster()
        .with_nodes(node("train"), node("roll"))
        .with_pods(
            *residents("train", "training", job="a"), *residents("roll", "rollout", job="b")
        ),
        ROLLOUT_POD,
        ["train", "roll"],
        True,
        id="memory-bound-rollout-joins-compute-bound-training",
    ),
    pytest.param(
        cluster()
        .with_nodes(node("train"), node("roll"))
        .with_pods(
            *residents("train", "training", job="a"), *residents("roll", "rollout", job="b")
        ),
        TRAIN_POD,
        ["roll", "train"],
        True,
        id="compute-bound-training-joins-memory-bound-rollout",
    ),
    pytest.param(
        cluster()
        .with_nodes(node("offset"), node("lockstep"))
        .with_pods(
            *residents("offset", "training", job="a"), *residents("lockstep", "scoring", job="b")
        ),
        pod("new").job("z").memory(30 * GiB).phase("scoring"),
        ["offset", "lockstep"],
        True,
        id="same-shape-prefers-an-offset-cycle",
    ),
    pytest.param(
        cluster()
        .with_nodes(node("empty"), node("partner"))
        .with_pods(*residents("partner", "training", job="a")),
        ROLLOUT_POD,
        ["partner", "empty"],
        True,
        id="a-complementary-partner-beats-an-idle-gpu",
    ),
    pytest.param(
        cluster()
        .with_nodes(node("empty"), node("clash"))
        .with_pods(*residents("clash", "rollout", job="a")),
        ROLLOUT_POD,
        ["empty", "clash"],
        True,
        id="an-idle-gpu-beats-a-clashing-partner",
    ),
    pytest.param(
        cluster()
        .with_nodes(
            node("far").domain("rack-2"),
            node("rackmate").domain("rack-1"),
            node("home").domain("rack-1"),
        )
        .with_pods(
            pod("z-train-0")
            .job("z")
            .gpus(4)
            .memory(40 * GiB)
            .phase("training")
            .on("home", 0, 1, 2, 3)
        ),
        pod("new").job("z").gpus(4).memory(40 * GiB).phase("training"),
        ["home", "rackmate", "far"],
        True,
        id="gang-same-node-then-nvlink-domain-then-network",
    ),
    pytest.param(
        cluster()
        .with_nodes(node("whole"), node("nearly-full"))
        .with_pods(*[pod(f"x{i}").on("nearly-full", i) for i in range(7)]),
        pod("new").gpus(1),
        ["nearly-full", "whole"],
        True,
        id="pack-small-pods-keep-whole-nodes-for-gangs",
    ),
    pytest.param(
        cluster().with_nodes(node("a"), node("b"), node("c").gpus(8, mib=40 * GiB)),
        pod("new").gpus(8).memory(60 * GiB).phase("training"),
        [("a", "b"), "c"],
        True,
        id="identical-nodes-tie-infeasible-node-scores-zero",
    ),
    pytest.param(
        cluster()
        .with_nodes(node("tight"), node("loose"))
        .with_pods(
            pod("t").job("a").memory(45 * GiB).phase("training").on("tight", 0),
            *[pod(f"t{i}").on("tight", i) for i in range(1, 8)],
            pod("l").job("b").memory(5 * GiB).phase("training").on("loose", 0),
            *[pod(f"l{i}").on("loose", i) for i in range(1, 8)],
        ),
        pod("new").memory(30 * GiB).phase("rollout"),
        ["tight", "loose"],
        False,  # a fine preference: the 0..10 wire score may round it to a tie
        id="best-fit-memory-on-shared-gpus",
    ),
]


@pytest.mark.parametrize(("c", "p", "expected", "wire"), SCENARIOS)
def test_score_order(
    c: ClusterBuilder, p: PodBuilder, expected: Sequence[str | tuple[str, ...]], wire: bool
) -> None:
    check_order(scores_of(c, p), expected, wire=wire)


def test_infeasible_node_scores_zero_and_says_so() -> None:
    snap = cluster().with_nodes(node("small").gpus(2)).build()
    s = score_nodes(PlacementView(snap), pod("p").gpus(4).build(), ["small", "ghost"])
    assert s["small"].score == 0 and not s["small"].feasible
    assert s["ghost"].score == 0 and not s["ghost"].feasible


def test_chosen_gpus_are_the_complementary_ones() -> None:
    c = (
        cluster()
        .with_nodes(node("n").gpus(3))
        .with_pods(
            pod("r").job("a").memory(20 * GiB).phase("rollout").on("n", 0),
            pod("t").job("b").memory(20 * GiB).phase("training").on("n", 2),
        )
    )
    snap = c.build()
    s = score_nodes(PlacementView(snap), ROLLOUT_POD.build(), ["n"])["n"]
    assert s.gpus == (2,)
    assert s.complement == 1.0


@pytest.mark.parametrize(
    ("role", "phase"),
    [
        ("rollout", Phase.ROLLOUT),
        ("vllm-generator", Phase.ROLLOUT),
        ("reward-model", Phase.SCORING),
        ("reference", Phase.SCORING),
        ("policy-trainer", Phase.TRAINING),
        ("critic", Phase.TRAINING),
        ("sidecar", None),
    ],
)
def test_role_names_suggest_a_first_phase(role: str, phase: Phase | None) -> None:
    assert likely_phase(pod("p").role(role).build()) == phase


def test_reported_phase_wins_over_role_name() -> None:
    assert likely_phase(pod("p").role("rollout").phase("training").build()) == Phase.TRAINING


def test_pair_terms_are_symmetric_and_bounded() -> None:
    phases: list[Phase | None] = [*Phase, None]
    for a in phases:
        for b in phases:
            assert complement(a, b) == complement(b, a)
            assert interleave(a, b) == interleave(b, a)
            assert 0.0 <= complement(a, b) <= 1.0
            assert 0.0 <= interleave(a, b) <= 1.0
    assert interleave(Phase.ROLLOUT, Phase.TRAINING) == 1.0
    assert interleave(Phase.ROLLOUT, Phase.ROLLOUT) == 0.0
    assert complement(Phase.ROLLOUT, Phase.TRAINING) == 1.0
    assert complement(Phase.TRAINING, Phase.SCORING) == 0.0


phase_names = st.sampled_from([p.value for p in Phase])


@st.composite
def random_clusters(draw: st.DrawFn) -> tuple[ClusterBuilder, PodBuilder]:
    n_nodes = draw(st.integers(1, 4))
    c = cluster()
    for i in range(n_nodes):
        n = node(f"n{i}").gpus(
            draw(st.integers(0, 8)), mib=draw(st.sampled_from([0, 40 * GiB, 80 * GiB]))
        )
        if draw(st.booleans()):
            n = n.domain(draw(st.sampled_from(["d1", "d2"])))
        if draw(st.integers(0, 5)) == 0:
            n = n.cordoned()
        c = c.with_nodes(n)
    for j in range(draw(st.integers(0, 12))):
        b = pod(f"r{j}").job(draw(st.sampled_from(["a", "b", "c"]))).gpus(draw(st.integers(0, 3)))
        if draw(st.booleans()):
            b = b.memory(draw(st.integers(1, 90 * GiB)))
        b = b.phase(draw(phase_names)).on(f"n{draw(st.integers(0, n_nodes - 1))}")
        if draw(st.booleans()):
            b = b.suspended()
        c = c.with_pods(b)
    p = pod("new").job(draw(st.sampled_from(["a", "z"]))).gpus(draw(st.integers(0, 9)))
    if draw(st.booleans()):
        p = p.memory(draw(st.integers(1, 90 * GiB)))
    p = p.phase(draw(st.none() | phase_names))
    return c, p


RULES = st.sampled_from(
    [SharingRules(), SharingRules(interference=ASSUMED_CELLS), SharingRules(phase_gate=False)]
)
CYCLES = st.sampled_from(
    [
        (),
        (("rollout", 0.7, 1.0), ("idle", 0.3, 0.0)),
        (("training", 0.4, 1.0), ("idle", 0.6, 0.0)),
        (("rollout", 0.6, 0.6), ("training", 0.4, 1.0)),
    ]
)


@st.composite
def full_clusters(draw: st.DrawFn) -> tuple[ClusterSnapshot, PodBuilder]:
    """Nodes whose every GPU holds one pod of another job (so rule 5 must pick a
    partner, not an empty GPU), pods with and without cycles, some of the
    pending pod's own job (gang alignment), and a pending pod."""
    c = cluster()
    pods = []
    for i in range(draw(st.integers(1, 4))):
        name = f"n{i}"
        gpus = draw(st.integers(1, 4))
        c = c.with_nodes(node(name).gpus(gpus, mib=80 * GiB).domain(f"d{i % 2}"))
        for g in range(gpus):
            job = draw(st.sampled_from(["a", "b", "c", "z"]))
            b = pod(f"{name}-{g}").job(job).gpus(1)
            b = b.memory(**{draw(st.sampled_from(["rollout", "training"])): 30 * GiB})
            b = b.phase(draw(st.sampled_from(["rollout", "training", "idle"]))).on(name, g)
            cycle = draw(CYCLES)
            if cycle:
                b = b.load(*cycle).iteration(300)
            pods.append(b)
    p = pod("new").job("z").gpus(draw(st.integers(1, 2)))
    p = p.memory(**{draw(st.sampled_from(["rollout", "training"])): 30 * GiB})
    cycle = draw(CYCLES)
    if cycle:
        p = p.load(*cycle).iteration(300)
    return c.with_pods(*pods).build(), p


@settings(max_examples=200, deadline=None)
@given(full_clusters(), RULES)
def test_with_an_interference_matrix_the_fast_path_scores_as_score_nodes(
    case: tuple[ClusterSnapshot, PodBuilder], rules: SharingRules
) -> None:
    """Rule 5 on (the extender given --interference): a shared placement scores
    in its own band; the extender's fast path must give the same numbers."""
    snap, p = case
    view = PlacementView(snap, rules=rules)
    names = [*snap.nodes, "ghost"]
    scores = score_nodes(view, p.build(), names)
    assert score_values(view, p.build(), names) == {n: s.score for n, s in scores.items()}


@settings(max_examples=150, deadline=None)
@given(random_clusters())
def test_scores_stay_in_protocol_range_and_match_the_filter(
    case: tuple[ClusterBuilder, PodBuilder],
) -> None:
    from rlix.core.policy.placement import filter_nodes

    c, p = case
    snap = c.build()
    view = PlacementView(snap)
    names = [*snap.nodes, "ghost"]
    scores = score_nodes(view, p.build(), names)
    feasible = set(filter_nodes(view, p.build(), names).feasible)
    # The extender's fast path gives exactly the same numbers.
    assert score_values(view, p.build(), names) == {n: s.score for n, s in scores.items()}
    for name, s in scores.items():
        assert 0 <= s.score <= 10
        if p.build().gpus > 0:
            assert s.feasible == (name in feasible)
            assert len(s.gpus) == (p.build().gpus if s.feasible else 0)


@settings(max_examples=150, deadline=None)
@given(random_clusters(), random_clusters(), RULES)
def test_the_filter_answers_alike_from_its_memo_and_from_a_fresh_view(
    case: tuple[ClusterBuilder, PodBuilder],
    other: tuple[ClusterBuilder, PodBuilder],
    rules: SharingRules,
) -> None:
    """The filter keeps each node's verdict for a pod shape (a refusal's sentence
    included) on the node's load: asked again, after another pod's question,
    it must say exactly what a view that never asked says."""
    from rlix.core.policy.placement import filter_nodes

    c, p = case
    snap = c.build()
    names = [*snap.nodes, "ghost"]
    view = PlacementView(snap, rules=rules)
    first = filter_nodes(view, p.build(), names)
    filter_nodes(view, other[1].build(), names)
    again = filter_nodes(view, p.build(), names)
    fresh = filter_nodes(PlacementView(snap, rules=rules), p.build(), names)
    assert first == again == fresh
