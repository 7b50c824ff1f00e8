"""Turns at the phase gate on one node (``placement.turns``): who goes, who waits, and when."""

from __future__ import annotations

import pytest

from rlix.core.phases import Phase
from rlix.core.policy.placement.sharing import DEFAULT_RULES, SharingRules, takes_turns
from rlix.core.policy.placement.turns import Admitted, Cycle, Turns
from rlix.core.snapshot import load_profile_of

# SharingRules() decides with the measured H200 matrix: two busy kernels on one
# GPU make less than one GPU's progress, a copy beside a kernel more.
RULES = SharingRules()


def turns(gpus: dict[str, set[int]], max_wait_s: float = 60.0) -> Turns[str, str]:
    t: Turns[str, str] = Turns(RULES, max_wait_s)
    t.set_gpus({pod: frozenset(g) for pod, g in gpus.items()})
    return t


def tickets(admitted: list[Admitted[str]]) -> list[str]:
    return [a.ticket for a in admitted]


def test_a_busy_phase_waits_beside_a_working_pod_and_goes_when_it_idles() -> None:
    t = turns({"a": {0}, "b": {0}})
    assert t.enter("a", "a0", Phase.TRAINING, 0.0, "ta")
    assert not t.enter("b", "b0", Phase.ROLLOUT, 1.0, "tb")
    assert t.admit(2.0) == []
    assert t.waiting() == {"b": 1.0}
    assert t.enter("a", "a0", Phase.IDLE, 5.0, "ta2")  # idle: never waits
    [admitted] = t.admit(5.0)
    assert admitted == Admitted("tb", 4.0, expired=False)
    assert t.working() == {"b": ["memory"]}


def test_pods_on_different_gpus_never_wait_for_each_other() -> None:
    t = turns({"a": {0, 1}, "b": {2, 3}})
    assert t.enter("a", "a0", Phase.TRAINING, 0.0, "ta")
    assert t.enter("b", "b0", Phase.TRAINING, 0.0, "tb")


def test_a_copy_beside_a_kernel_goes_in_both_ways() -> None:
    t = turns({"a": {0}, "b": {0}})
    assert t.enter("a", "a0", Phase.TRAINING, 0.0, "ta")
    assert t.enter("b", "b0", Phase.WEIGHT_SYNC, 0.0, "tb")
    t2 = turns({"a": {0}, "b": {0}})
    assert t2.enter("a", "a0", Phase.WEIGHT_SYNC, 0.0, "ta")
    assert t2.enter("b", "b0", Phase.TRAINING, 0.0, "tb")


def test_one_shared_gpu_is_enough_to_wait() -> None:
    t = turns({"a": {0, 1}, "b": {1, 2}})
    assert t.enter("a", "a0", Phase.SCORING, 0.0, "ta")
    assert not t.enter("b", "b0", Phase.TRAINING, 0.0, "tb")


def test_a_pod_that_works_lets_its_other_processes_in() -> None:
    # The pod is the unit: ranks of one gang must not be split by the gate.
    t = turns({"a": {0, 1}, "b": {0, 1}})
    assert t.enter("a", "a0", Phase.TRAINING, 0.0, "ta0")
    assert not t.enter("b", "b0", Phase.TRAINING, 1.0, "tb0")
    assert t.enter("b", "b1", Phase.WEIGHT_SYNC, 2.0, "tb1")  # a copy gains: b works now
    assert tickets(t.admit(2.0)) == ["tb0"]
    assert t.enter("a", "a1", Phase.TRAINING, 3.0, "ta1")  # a works already


def test_the_longest_wait_goes_first_and_the_next_waits_for_it() -> None:
    t = turns({"a": {0}, "b": {0}, "c": {0}})
    assert t.enter("a", "a0", Phase.TRAINING, 0.0, "ta")
    assert not t.enter("c", "c0", Phase.TRAINING, 1.0, "tc")
    assert not t.enter("b", "b0", Phase.ROLLOUT, 2.0, "tb")
    t.enter("a", "a0", Phase.IDLE, 3.0, "ta2")
    assert tickets(t.admit(3.0)) == ["tc"]
    assert t.waiting() == {"b": 2.0}


def test_a_wait_past_its_bound_goes_in_and_says_so() -> None:
    t = turns({"a": {0}, "b": {0}}, max_wait_s=10.0)
    assert t.enter("a", "a0", Phase.TRAINING, 0.0, "ta")
    assert not t.enter("b", "b0", Phase.TRAINING, 1.0, "tb")
    assert t.next_deadline() == 11.0
    assert t.admit(10.9) == []
    assert t.admit(11.0) == [Admitted("tb", 10.0, expired=True)]
    assert t.next_deadline() is None
    assert t.working() == {"a": ["compute"], "b": ["compute"]}


def test_a_process_that_leaves_frees_its_gpu() -> None:
    t = turns({"a": {0}, "b": {0}})
    assert t.enter("a", "a0", Phase.TRAINING, 0.0, "ta")
    assert not t.enter("b", "b0", Phase.TRAINING, 0.0, "tb")
    t.leave("a0")
    assert tickets(t.admit(1.0)) == ["tb"]
    assert not t.enter("a", "a1", Phase.TRAINING, 2.0, "ta1")
    t.leave("a1")  # gone while waiting: nobody to answer
    assert t.admit(3.0) == [] and t.waiting() == {}


def test_a_parked_pod_holds_nothing_and_its_waiters_are_answered() -> None:
    t = turns({"a": {0}, "b": {0}})
    assert t.enter("a", "a0", Phase.TRAINING, 0.0, "ta")
    assert not t.enter("b", "b0", Phase.TRAINING, 1.0, "tb")
    assert t.forget_pod("b", 3.0) == [Admitted("tb", 2.0, expired=False)]
    assert t.waiting() == {}
    assert not t.enter("b", "b0", Phase.TRAINING, 4.0, "tb2")
    assert t.forget_pod("a", 5.0) == []
    assert tickets(t.admit(5.0)) == ["tb2"]


def test_a_restored_pod_works_again_in_the_phase_it_was_parked_in() -> None:
    """Parked mid-phase, ``a`` holds nothing and ``b`` goes in; restored, ``a``
    carries on in training without asking (it is mid-phase), so a third pod's
    busy phase waits for it, and ``a``'s next report ends it as usual."""
    t = turns({"a": {0}, "b": {0}, "c": {0}})
    assert t.enter("a", "a0", Phase.TRAINING, 0.0, "ta")
    assert t.forget_pod("a", 1.0) == []
    assert t.parked() == ["a"] and t.working() == {}
    assert t.enter("b", "b0", Phase.WEIGHT_SYNC, 2.0, "tb")  # a copy: goes beside anything
    t.restore_pod("a")
    assert t.parked() == [] and t.working() == {"a": ["compute"], "b": ["network"]}
    assert not t.enter("c", "c0", Phase.ROLLOUT, 3.0, "tc")
    assert t.enter("a", "a0", Phase.IDLE, 4.0, "ta2")
    assert tickets(t.admit(4.0)) == ["tc"]


def test_a_waiter_answered_by_its_pods_parking_works_once_restored() -> None:
    t = turns({"a": {0}, "b": {0}})
    assert t.enter("a", "a0", Phase.TRAINING, 0.0, "ta")
    assert not t.enter("b", "b0", Phase.ROLLOUT, 1.0, "tb")
    assert t.forget_pod("b", 2.0) == [Admitted("tb", 1.0, expired=False)]
    t.restore_pod("b")  # it went into rollout when answered; restored, it works there
    assert t.working() == {"a": ["compute"], "b": ["memory"]}


def test_a_parked_process_that_reports_or_leaves_is_not_restored() -> None:
    t = turns({"a": {0}, "b": {0}})
    assert t.enter("a", "a0", Phase.TRAINING, 0.0, "ta")
    assert t.enter("a", "a1", Phase.TRAINING, 0.0, "ta1")
    t.forget_pod("a", 1.0)
    t.leave("a0")  # gone while parked
    assert t.enter("a", "a1", Phase.IDLE, 2.0, "ta2")  # its rollout ended while parked
    assert t.parked() == []
    t.restore_pod("a")
    assert t.working() == {} and t.pods() == []


def test_a_new_phase_of_a_waiting_process_replaces_its_wait_and_answers_it() -> None:
    # Two threads of one process may each enter a phase block: the first
    # one's answer must not be lost when the second asks.
    t = turns({"a": {0}, "b": {0}})
    assert t.enter("a", "a0", Phase.TRAINING, 0.0, "ta")
    assert not t.enter("b", "b0", Phase.TRAINING, 0.0, "tb")
    assert t.enter("b", "b0", Phase.IDLE, 1.0, "tb2")
    assert t.waiting() == {}
    assert t.admit(2.0) == [Admitted("tb", 1.0, expired=False)]
    assert t.admit(2.0) == []


def test_the_gate_keeps_nothing_of_pods_that_neither_work_nor_wait() -> None:
    # An agent runs for months: pods come and go.
    t = turns({"a": {0}, "b": {0}})
    assert t.enter("a", "a0", Phase.TRAINING, 0.0, "ta")
    assert not t.enter("b", "b0", Phase.TRAINING, 0.0, "tb")
    assert t.pods() == ["a", "b"]
    t.enter("a", "a0", Phase.IDLE, 1.0, "ta2")
    t.admit(1.0)
    t.leave("a0")
    t.enter("b", "b0", Phase.IDLE, 2.0, "tb2")
    t.leave("b0")
    assert t.pods() == [] and t.working() == {} and t.waiting() == {}


def test_a_pod_without_gpus_yet_goes_in() -> None:
    t = turns({"a": {0}})
    assert t.enter("a", "a0", Phase.TRAINING, 0.0, "ta")
    assert t.enter("b", "b0", Phase.TRAINING, 0.0, "tb")  # holds no memory anywhere yet


def test_the_gate_needs_a_matrix_and_a_positive_bound() -> None:
    with pytest.raises(ValueError, match="interference matrix"):
        Turns(DEFAULT_RULES, 10.0)
    with pytest.raises(ValueError, match="max_wait_s"):
        Turns(RULES, 0.0)


def cycle(**seconds: float) -> Cycle:
    """A declared cycle as the agent reads it from ``rlix.io/phase-seconds``."""
    return load_profile_of({Phase(k.replace("_", "-")): s for k, s in seconds.items()})


# The simulator's disaggregated pools: each idles while the other pool works.
ROLLOUT_POOL = cycle(rollout=60.0, weight_sync=5.0, idle=55.0)
TRAINER_POOL = cycle(training=55.0, weight_sync=5.0, idle=60.0)
COLOCATED = cycle(rollout=60.0, training=55.0, weight_sync=5.0)  # never idles


def test_pods_that_both_idle_take_turns_as_in_the_simulator() -> None:
    assert takes_turns(RULES, *ROLLOUT_POOL, *ROLLOUT_POOL)
    t = turns({"a": {0}, "b": {0}})
    t.set_cycles({"a": ROLLOUT_POOL, "b": ROLLOUT_POOL})
    assert t.enter("a", "a0", Phase.ROLLOUT, 0.0, "ta")
    assert not t.enter("b", "b0", Phase.ROLLOUT, 0.0, "tb")


def test_declared_pairs_that_do_not_take_turns_co_run() -> None:
    # Neither idles: rule 5 judged them drifting side by side, and the simulator
    # gates them nowhere; so neither does the node.
    assert not takes_turns(RULES, *COLOCATED, *COLOCATED)
    t = turns({"a": {0}, "b": {0}})
    t.set_cycles({"a": COLOCATED, "b": COLOCATED})
    assert t.enter("a", "a0", Phase.TRAINING, 0.0, "ta")
    assert t.enter("b", "b0", Phase.TRAINING, 0.0, "tb")
    # One that idles beside one that never does: no turns either.
    assert not takes_turns(RULES, *ROLLOUT_POOL, *COLOCATED)
    t.set_cycles({"a": COLOCATED, "b": ROLLOUT_POOL})
    assert t.enter("b", "b0", Phase.ROLLOUT, 1.0, "tb2")


def test_a_long_busy_phase_beside_a_short_cycle_drifts_on_the_node_too() -> None:
    short = cycle(rollout=30.0, idle=70.0)
    long = cycle(training=2_400.0, idle=600.0)
    assert not takes_turns(RULES, *short, *long)
    t = turns({"a": {0}, "b": {0}})
    t.set_cycles({"a": long, "b": short})
    assert t.enter("a", "a0", Phase.TRAINING, 0.0, "ta")
    assert t.enter("b", "b0", Phase.ROLLOUT, 0.0, "tb")


def test_a_pod_that_declares_no_cycle_is_gated_at_every_meeting() -> None:
    for cycles in ({"a": COLOCATED}, {"b": COLOCATED}, {}):
        t = turns({"a": {0}, "b": {0}})
        t.set_cycles(cycles)
        assert t.enter("a", "a0", Phase.TRAINING, 0.0, "ta")
        assert not t.enter("b", "b0", Phase.TRAINING, 0.0, "tb"), cycles
    # An empty profile or a zero-length iteration declares nothing either.
    t = turns({"a": {0}, "b": {0}})
    t.set_cycles({"a": ((), 0.0), "b": (COLOCATED[0], 0.0)})
    assert t.enter("a", "a0", Phase.TRAINING, 0.0, "ta")
    assert not t.enter("b", "b0", Phase.TRAINING, 0.0, "tb")


def test_cycles_declared_later_decide_the_waiters_next_admission() -> None:
    t = turns({"a": {0}, "b": {0}})
    assert t.enter("a", "a0", Phase.TRAINING, 0.0, "ta")
    assert not t.enter("b", "b0", Phase.TRAINING, 0.0, "tb")
    t.set_cycles({"a": COLOCATED, "b": COLOCATED})
    assert tickets(t.admit(1.0)) == ["tb"]


def test_a_process_back_in_an_enclosing_phase_works_in_it_without_asking() -> None:
    t = turns({"a": {0}, "b": {0}})
    assert t.enter("a", "a0", Phase.TRAINING, 0.0, "ta")
    assert t.enter("a", "a0", Phase.WEIGHT_SYNC, 1.0, "ta2")  # a nested copy block
    assert t.enter("b", "b0", Phase.TRAINING, 2.0, "tb")  # a kernel beside a copy goes in
    assert t.enter("b", "b0", Phase.IDLE, 3.0, "tb2")
    # a's copy block ends inside its training block: it trains again at once,
    # and b, asking again, waits for it.
    assert t.returned("a", "a0", Phase.TRAINING, 4.0, adopt=False)
    assert t.working() == {"a": ["compute"]}
    assert not t.enter("b", "b0", Phase.TRAINING, 5.0, "tb3")
    # Back in an idle phase: it holds nothing, and b goes.
    assert t.returned("a", "a0", Phase.IDLE, 6.0, adopt=False)
    assert tickets(t.admit(6.0)) == ["tb3"]


def test_a_process_that_never_took_part_is_not_followed_back() -> None:
    t = turns({"a": {0}, "b": {0}})
    # An older client's report: it neither waits nor is waited for.
    assert not t.returned("a", "a0", Phase.TRAINING, 0.0, adopt=False)
    assert t.working() == {} and t.pods() == []
    assert t.enter("b", "b0", Phase.TRAINING, 1.0, "tb")


def test_a_process_that_says_its_phase_now_is_followed_from_its_first_report() -> None:
    # It reconnected mid-block to a restarted agent: it trains, and b waits for it.
    t = turns({"a": {0}, "b": {0}})
    assert t.returned("a", "a0", Phase.TRAINING, 0.0, adopt=True)
    assert t.working() == {"a": ["compute"]}
    assert not t.enter("b", "b0", Phase.TRAINING, 1.0, "tb")
