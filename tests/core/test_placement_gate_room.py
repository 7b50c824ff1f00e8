"""Room at the phase gate (``placement.gate_room``, ``Turns.set_memory``): a pod
goes in where its memory fits, after the partners that do not work are parked."""

from __future__ import annotations

import pytest

from rlix.core.phases import Phase
from rlix.core.policy.placement import gate_room
from rlix.core.policy.placement.gate_room import Room, room_for
from rlix.core.policy.placement.sharing import SharingRules
from rlix.core.policy.placement.turns import Admitted, Turns
from rlix.core.sim import hardware as hw
from rlix.core.snapshot import load_profile_of

# The simulator's disaggregated pods on one H200 (docs/simulator.md, "Memory,
# not order"): together 148,670 MiB, over the GPU; either alone fits.
H200_MIB = 143_771
TRAINER_32B = 82_016
ROLLOUT_7B = 66_654


def test_nothing_is_parked_where_the_entrant_fits() -> None:
    fp = {"a": {0: 60_000}, "b": {0: 60_000}}
    assert room_for("a", fp, {"a", "b"}, set(), {0: H200_MIB}) == Room()


def test_the_idle_partner_is_parked_where_both_do_not_fit() -> None:
    fp = {"t": {0: TRAINER_32B}, "r": {0: ROLLOUT_7B}}
    assert room_for("t", fp, {"t", "r"}, set(), {0: H200_MIB}) == Room(("r",))
    # The entrant counts even while it is parked itself (it comes back).
    assert room_for("t", fp, {"r"}, set(), {0: H200_MIB}) == Room(("r",))


def test_a_working_partner_is_never_parked() -> None:
    fp = {"t": {0: TRAINER_32B}, "r": {0: ROLLOUT_7B}}
    assert room_for("t", fp, {"t", "r"}, {"r"}, {0: H200_MIB}) is None


def test_the_largest_idle_partner_goes_first_and_no_more_than_needed() -> None:
    fp = {"e": {0: 50}, "small": {0: 20}, "large": {0: 40}, "mid": {0: 30}}
    assert room_for("e", fp, set(fp), set(), {0: 100}) == Room(("large",))
    assert room_for("e", fp, set(fp), set(), {0: 70}) == Room(("large", "mid"))
    # Ties go by name, so the same state parks the same pods.
    tie = {"e": {0: 50}, "y": {0: 30}, "x": {0: 30}}
    assert room_for("e", tie, set(tie), set(), {0: 80}) == Room(("x",))


def test_a_park_frees_every_gpu_the_partner_holds_and_only_the_entrants_gpus_count() -> None:
    fp = {"e": {0: 60, 1: 60}, "p": {0: 50, 1: 50}, "q": {2: 99}}
    assert room_for("e", fp, set(fp), set(), {0: 100, 1: 100, 2: 50}) == Room(("p",))
    # A GPU the caller gives no size for is not limited here.
    assert room_for("e", fp, set(fp), set(), {}) == Room()


def memory_turns(max_wait_s: float = 60.0) -> Turns[str, str]:
    t: Turns[str, str] = Turns(SharingRules(), max_wait_s)
    t.set_gpus({"t": frozenset({0}), "r": frozenset({0})})
    t.set_memory({"t": {0: TRAINER_32B}, "r": {0: ROLLOUT_7B}}, {0: H200_MIB})
    return t


def trainer_in_with_rollout_parked(t: Turns[str, str]) -> None:
    """t goes into training at 0 s once r, idle, is parked; the caller parks r."""
    t.enter("t", "t0", Phase.TRAINING, 0.0, "tt")
    t.admit(0.0)
    t.set_memory({"t": {0: TRAINER_32B}}, {0: H200_MIB})


def rollout_back(t: Turns[str, str]) -> Admitted[str]:
    """t idles at 1 s; r asks for rollout at 2 s: its admission (t parked, r restored)."""
    t.enter("t", "t0", Phase.IDLE, 1.0, "tt2")
    t.enter("r", "r0", Phase.ROLLOUT, 2.0, "tr")
    [back] = t.admit(2.0)
    assert back.restore and back.park == ("t",)
    return back


def test_a_pair_over_the_gpu_takes_turns_with_its_memory() -> None:
    """The trainer goes into training once the idle rollout pod is parked; the
    rollout pod waits for the trainer's turn to end, then comes back and goes
    in once the trainer, idle now, is parked in its turn."""
    t = memory_turns()
    assert not t.enter("t", "t0", Phase.TRAINING, 0.0, "tt")  # it fits only after a park
    [went] = t.admit(0.0)
    assert went == Admitted("tt", 0.0, expired=False, park=("r",), restore=False)
    assert t.gate_parked() == ["r"]
    t.set_memory({"t": {0: TRAINER_32B}}, {0: H200_MIB})  # the caller parked r
    assert not t.enter("r", "r0", Phase.ROLLOUT, 5.0, "tr")
    assert t.admit(6.0) == []  # its turn has not come: t works
    assert t.enter("t", "t0", Phase.IDLE, 9.0, "tt2")
    [back] = t.admit(9.0)
    assert back == Admitted("tr", 4.0, expired=False, park=("t",), restore=True)
    assert t.gate_parked() == ["t"] and t.working() == {"r": ["memory"]}


def test_a_restored_pod_counts_before_the_callers_view_shows_it_again() -> None:
    t = memory_turns()
    trainer_in_with_rollout_parked(t)
    rollout_back(t)
    # Before r's memory shows: t, parked in flight, still shows; r is kept.
    t.set_memory({"t": {0: TRAINER_32B}}, {0: H200_MIB})
    assert not t.enter("t", "t0", Phase.TRAINING, 3.0, "tt3")
    assert t.admit(3.0) == []  # r works and holds its memory: t waits for its turn
    t.enter("r", "r0", Phase.IDLE, 4.0, "tr2")
    [again] = t.admit(4.0)
    assert again == Admitted("tt3", 1.0, expired=False, park=("r",), restore=True)


def test_a_wait_past_its_bound_does_not_override_memory() -> None:
    t = memory_turns(max_wait_s=10.0)
    trainer_in_with_rollout_parked(t)
    assert not t.enter("r", "r0", Phase.ROLLOUT, 1.0, "tr")
    assert t.next_deadline() == 11.0
    assert t.admit(20.0) == []  # past its bound, but t works and r does not fit
    assert t.next_deadline() is None  # it waits for room now, not for a clock
    assert t.waiting() == {"r": 1.0}
    t.enter("t", "t0", Phase.IDLE, 30.0, "tt2")
    [went] = t.admit(30.0)
    # It goes because its turn came (the partner idles), not at the bound.
    assert went == Admitted("tr", 29.0, expired=False, park=("t",), restore=True)


def test_past_its_bound_a_pod_goes_in_beside_a_worker_where_memory_fits() -> None:
    t: Turns[str, str] = Turns(SharingRules(), 10.0)
    t.set_gpus({"a": frozenset({0}), "b": frozenset({0})})
    t.set_memory({"a": {0: 60_000}, "b": {0: 60_000}}, {0: H200_MIB})
    assert t.enter("a", "a0", Phase.TRAINING, 0.0, "ta")  # fits: no move, goes at once
    assert not t.enter("b", "b0", Phase.TRAINING, 1.0, "tb")  # its turn: waits as before
    assert t.admit(11.0) == [Admitted("tb", 10.0, expired=True)]


def test_moves_that_fail_put_the_pod_back_in_line_from_when_it_asked() -> None:
    t = memory_turns()
    t.enter("t", "t0", Phase.TRAINING, 0.0, "tt")
    [went] = t.admit(0.5)
    t.requeue(went, parked=())  # the park of r failed
    assert t.gate_parked() == [] and t.working() == {}
    assert t.waiting() == {"t": 0.0}
    [again] = t.admit(1.0)  # decided again: r is still the one to park
    assert again == Admitted("tt", 1.0, expired=False, park=("r",))


def test_a_failed_restore_leaves_the_pod_parked_and_the_park_that_happened_stands() -> None:
    t = memory_turns()
    trainer_in_with_rollout_parked(t)
    t.requeue(rollout_back(t), parked=("t",))
    assert t.gate_parked() == ["r", "t"] and t.waiting() == {"r": 2.0}
    t.set_memory({}, {0: H200_MIB})  # neither shows on the GPU now
    [retry] = t.admit(3.0)
    assert retry == Admitted("tr", 1.0, expired=False, park=(), restore=True)


def test_memory_the_gate_did_not_park_is_forgotten_and_released_pods_are_not_restored() -> None:
    t = memory_turns()
    t.set_memory({"t": {0: TRAINER_32B}}, {0: H200_MIB})  # r left: parked by the conductor
    assert t.enter("t", "t0", Phase.TRAINING, 0.0, "tt")  # nothing to park
    t.enter("t", "t0", Phase.IDLE, 1.0, "tt2")
    t.set_memory({"t": {0: TRAINER_32B}, "r": {0: ROLLOUT_7B}}, {0: H200_MIB})
    assert not t.enter("t", "t0", Phase.TRAINING, 2.0, "tt3")
    [went] = t.admit(2.0)
    assert went.park == ("r",)
    t.release("r")  # someone else resumed it, or it is gone
    assert t.gate_parked() == []
    t.set_memory({"t": {0: TRAINER_32B}}, {0: H200_MIB})
    t.enter("t", "t0", Phase.IDLE, 3.0, "tt4")
    assert t.enter("r", "r0", Phase.ROLLOUT, 4.0, "tr")  # not the gate's: nothing to restore


def test_a_pod_going_in_and_every_pod_that_works_count_at_their_declared_peak() -> None:
    """Two pods that fit as they are: b (20,000 MiB of weights, 50,000 at its
    peak) goes into rollout only once a, idle with 50,000, is parked, as its KV
    cache would not fit beside a. Back in its turn, a waits for b, which may
    still grow to its peak while it works, though it holds less now."""
    gpu = 81_920
    t: Turns[str, str] = Turns(SharingRules(), 60.0)
    t.set_gpus({"a": frozenset({0}), "b": frozenset({0})})
    peaks = {"a": 50_000, "b": 50_000}
    t.set_memory({"a": {0: 50_000}, "b": {0: 20_000}}, {0: gpu}, peaks)
    assert not t.enter("b", "b0", Phase.ROLLOUT, 0.0, "tb")
    [went] = t.admit(0.0)
    assert went == Admitted("tb", 0.0, expired=False, park=("a",))
    t.set_memory({"b": {0: 20_000}}, {0: gpu}, peaks)  # a parked; b not grown yet
    t.enter("b", "b0", Phase.IDLE, 1.0, "tb2")
    assert not t.enter("a", "a0", Phase.TRAINING, 2.0, "ta")
    [back] = t.admit(2.0)  # b idles holding 20,000: 70,000 with a's peak fits
    assert back == Admitted("ta", 0.0, expired=False, park=(), restore=True)
    t.set_memory({"a": {0: 50_000}, "b": {0: 20_000}}, {0: gpu}, peaks)
    t.enter("a", "a0", Phase.IDLE, 3.0, "ta2")
    assert t.enter("b", "b0", Phase.WEIGHT_SYNC, 4.0, "tb3") is False  # its peak needs room
    [synced] = t.admit(4.0)
    assert synced.park == ("a",)
    t.set_memory({"b": {0: 30_000}}, {0: gpu}, peaks)
    assert not t.enter("a", "a0", Phase.TRAINING, 5.0, "ta3")
    assert t.admit(5.0) == []  # b works at 30,000 but may reach 50,000: no room for a


def test_without_peaks_a_pod_counts_what_it_holds() -> None:
    t: Turns[str, str] = Turns(SharingRules(), 60.0)
    t.set_gpus({"a": frozenset({0}), "b": frozenset({0})})
    t.set_memory({"a": {0: 50_000}, "b": {0: 20_000}}, {0: 81_920})
    assert t.enter("b", "b0", Phase.ROLLOUT, 0.0, "tb")  # fits as it is: nothing moves


def test_only_movable_pods_are_parked() -> None:
    fp = {"t": {0: TRAINER_32B}, "r": {0: ROLLOUT_7B}, "x": {0: 1_000}}
    # r cannot be parked (its client would never ask to come back): no room.
    assert room_for("t", fp, set(fp), set(), {0: H200_MIB}, movable={"x"}) is None
    assert room_for("t", fp, set(fp), set(), {0: H200_MIB}, movable={"r"}) == Room(("r",))


def test_a_restored_pod_that_stops_and_never_shows_is_forgotten() -> None:
    # An agent runs for months: a pod brought back that ends before the
    # caller's view shows it again leaves nothing behind.
    t = memory_turns()
    trainer_in_with_rollout_parked(t)
    rollout_back(t)
    assert t.footprint("r") == {0: ROLLOUT_7B}
    t.set_memory({}, {0: H200_MIB})  # still on its way, and working: kept
    assert t.footprint("r") == {0: ROLLOUT_7B}
    t.leave("r0")
    t.set_memory({}, {0: H200_MIB})
    assert t.footprint("r") == {} and t.gate_parked() == ["t"]


# -- a weight sync parks a partner that works and stops at safe points ---------


# The simulator's disaggregated pools (as in test_placement_turns.py): the
# trainer's 55 s of training, the rollout pod's 5 s sync. Stopping the 32B
# trainer costs it the sync and its memory out and back (about 3.8 s).
TRAINER_POOL = load_profile_of({Phase.TRAINING: 55.0, Phase.WEIGHT_SYNC: 5.0, Phase.IDLE: 60.0})
ROLLOUT_POOL = load_profile_of({Phase.ROLLOUT: 60.0, Phase.WEIGHT_SYNC: 5.0, Phase.IDLE: 55.0})


def trainer_working_sync_waiting(
    *, safe_points: bool, at: float = 1.0, declared: bool = True
) -> tuple[Turns[str, str], list[Admitted[str]]]:
    """t trains from 0 s (it parked s, idle, to go in); s asks for its weight sync at ``at``."""
    t = memory_turns_named("t", "s")
    if declared:
        t.set_cycles({"t": TRAINER_POOL, "s": ROLLOUT_POOL})
    t.enter("t", "t0", Phase.TRAINING, 0.0, "tt", safe_points=safe_points)
    [went] = t.admit(0.0)
    assert went.park == ("s",)
    t.set_memory({"t": {0: TRAINER_32B}}, {0: H200_MIB})
    assert not t.enter("s", "s0", Phase.WEIGHT_SYNC, at, "ts")
    return t, t.admit(at)


def memory_turns_named(trainer: str, other: str) -> Turns[str, str]:
    t: Turns[str, str] = Turns(SharingRules(), 60.0)
    t.set_gpus({trainer: frozenset({0}), other: frozenset({0})})
    t.set_memory({trainer: {0: TRAINER_32B}, other: {0: ROLLOUT_7B}}, {0: H200_MIB})
    return t


def test_a_sync_parks_a_working_partner_that_stops_at_safe_points() -> None:
    t, [synced] = trainer_working_sync_waiting(safe_points=True)
    assert synced.ticket == "ts" and synced.park == ("t",) and synced.restore
    assert t.stopped() == ["t"] and t.working() == {"s": ["network"]}


def test_a_sync_waits_for_a_partner_that_promised_no_safe_points() -> None:
    t, admitted = trainer_working_sync_waiting(safe_points=False)
    assert admitted == [] and t.stopped() == []


def test_a_sync_waits_for_a_phase_about_to_end_or_of_unknown_length() -> None:
    # 55 s of training: at 50 s, 5 s are left, less than the sync (5 s) and
    # the trainer's copies (3.8 s) would cost it; at 40 s, 15 s are left.
    assert gate_room.worth_stopping(15.0, 5.0, TRAINER_32B)
    assert not gate_room.worth_stopping(5.0, 5.0, TRAINER_32B)
    t, admitted = trainer_working_sync_waiting(safe_points=True, at=50.0)
    assert admitted == [] and t.stopped() == []
    t, [synced] = trainer_working_sync_waiting(safe_points=True, at=40.0)
    assert synced.park == ("t",)
    # Without declared cycles the gate cannot tell what is left: it waits.
    t, admitted = trainer_working_sync_waiting(safe_points=True, declared=False)
    assert admitted == [] and t.stopped() == []


def test_the_gates_copy_floors_are_the_simulators() -> None:
    round_trip = hw.MIB / hw.PCIE_D2H_BYTES_PER_S + hw.MIB / hw.PCIE_H2D_BYTES_PER_S
    assert pytest.approx(round_trip) == gate_room.ROUND_TRIP_S_PER_MIB


def test_only_a_sync_parks_a_working_partner() -> None:
    t = memory_turns_named("t", "s")
    t.enter("t", "t0", Phase.TRAINING, 0.0, "tt", safe_points=True)
    t.admit(0.0)
    t.set_memory({"t": {0: TRAINER_32B}}, {0: H200_MIB})
    assert not t.enter("s", "s0", Phase.ROLLOUT, 1.0, "ts")
    assert t.admit(1.0) == [] and t.stopped() == []


def test_a_stopped_partner_comes_back_first_once_the_sync_has_left() -> None:
    t, _ = trainer_working_sync_waiting(safe_points=True)
    t.set_memory({"s": {0: ROLLOUT_7B}}, {0: H200_MIB})
    # While s syncs, t waits to come back with no ticket: nobody asked.
    assert t.admit(1.5) == [] and t.waiting() == {"t": 1.0}
    # s's sync ends and it asks for its rollout: t comes back first (its room
    # was kept for it: s's rollout counts it at its peak and waits).
    assert not t.enter("s", "s0", Phase.ROLLOUT, 2.0, "ts2")
    [back] = t.admit(2.0)
    assert back.ticket is None and back.pod == "t" and back.restore and back.park == ("s",)
    assert t.stopped() == [] and t.working() == {"t": ["compute"]}
    assert t.waiting() == {"s": 2.0}


def test_a_stopped_pod_keeps_its_room_from_other_entrants() -> None:
    t, _ = trainer_working_sync_waiting(safe_points=True)
    t.set_memory({"s": {0: ROLLOUT_7B}}, {0: H200_MIB})
    t.enter("s", "s0", Phase.IDLE, 2.0, "ts2")  # s idles: t may come back
    [back] = t.admit(2.0)
    assert back.pod == "t" and back.park == ("s",)


def test_a_sync_whose_park_failed_waits_and_the_partner_works_on() -> None:
    t, [synced] = trainer_working_sync_waiting(safe_points=True)
    t.requeue(synced, parked=[])  # t never reached a safe point in time
    assert t.stopped() == [] and t.working() == {"t": ["compute"]}
    assert t.waiting() == {"s": 1.0} and t.admit(1.5) == []


def test_a_comeback_whose_restore_failed_waits_to_come_back_again() -> None:
    t, _ = trainer_working_sync_waiting(safe_points=True)
    t.set_memory({"s": {0: ROLLOUT_7B}}, {0: H200_MIB})
    t.enter("s", "s0", Phase.IDLE, 2.0, "ts2")
    [back] = t.admit(2.0)
    t.requeue(back, parked=[])  # s stayed; t's restore failed
    assert t.stopped() == ["t"] and t.waiting() == {"t": 1.0}
    [again] = t.admit(3.0)
    assert again.pod == "t" and again.ticket is None


def test_a_stopped_pod_whose_processes_left_is_not_brought_back() -> None:
    t, _ = trainer_working_sync_waiting(safe_points=True)
    t.leave("t0")
    assert t.stopped() == [] and "t" not in t.waiting()


def test_room_for_parks_pods_that_do_not_work_before_interruptible_ones() -> None:
    fp = {"e": {0: 50}, "w": {0: 40}, "i": {0: 30}}
    assert room_for("e", fp, set(fp), {"w"}, {0: 100}, interruptible={"w"}) == Room(("i",))
    assert room_for("e", fp, set(fp), {"w", "i"}, {0: 100}, interruptible={"w"}) == Room(("w",))


def test_a_stopped_pod_found_after_an_agent_restart_is_brought_back_at_its_turn() -> None:
    # The restarted agent adopts the gate's park from its record; the stopped
    # process reconnects inside its training phase and says so (it asks
    # nothing): the gate brings it back once it fits.
    t = memory_turns_named("t", "s")
    t.set_memory({"s": {0: ROLLOUT_7B}}, {0: H200_MIB})
    t.adopt("t", {0: TRAINER_32B}, 0.0)
    t.enter("s", "s0", Phase.WEIGHT_SYNC, 0.0, "ts")  # s syncs: no room for t now
    assert t.returned("t", "t0", Phase.TRAINING, 1.0, adopt=True)
    assert t.stopped() == ["t"] and t.admit(1.0) == []
    t.enter("s", "s0", Phase.IDLE, 2.0, "ts2")
    [back] = t.admit(2.0)
    assert back.pod == "t" and back.ticket is None and back.restore and back.park == ("s",)
    assert t.working() == {"t": ["compute"]}


def test_a_resume_handed_to_the_gate_of_a_pod_parked_mid_phase_waits_for_room() -> None:
    # The conductor parked t while it trained; r then went into rollout and
    # works. The conductor's resume of t is handed to the gate: t is stopped
    # (mid-phase, it asks nothing) and comes back by the gate's move once r,
    # working, no longer holds its room.
    t = memory_turns_named("t", "r")
    assert t.enter("t", "t0", Phase.TRAINING, 0.0, "tt") is False
    [went] = t.admit(0.0)
    assert went.park == ("r",)
    t.set_memory({"t": {0: TRAINER_32B}}, {0: H200_MIB})
    t.forget_pod("t", 1.0)  # the conductor parked t mid-phase (the agent's records say so)
    t.release("r")  # and resumed r, which enters rollout at its full memory
    t.set_memory({"r": {0: ROLLOUT_7B}}, {0: H200_MIB})
    assert t.enter("r", "r0", Phase.ROLLOUT, 2.0, "tr")
    t.adopt("t", {0: TRAINER_32B}, 3.0)
    assert t.stopped() == ["t"] and t.gate_parked() == ["t"]
    assert t.admit(3.0) == []  # r works at its memory: no room for t's
    t.enter("r", "r0", Phase.IDLE, 4.0, "tr2")
    [back] = t.admit(4.0)
    assert back.pod == "t" and back.ticket is None and back.restore and back.park == ("r",)
    assert t.working()["t"] == ["compute"]


def test_a_resume_handed_to_the_gate_of_an_idle_pod_comes_back_when_it_asks() -> None:
    t = memory_turns_named("t", "r")
    t.set_memory({"r": {0: ROLLOUT_7B}}, {0: H200_MIB})  # t parked while idle
    assert t.enter("r", "r0", Phase.ROLLOUT, 0.0, "tr")
    t.adopt("t", {0: TRAINER_32B}, 1.0)
    assert t.stopped() == [] and t.gate_parked() == ["t"]
    assert t.admit(1.0) == []  # nobody asked for t: it stays parked
    assert not t.enter("t", "t0", Phase.TRAINING, 2.0, "tt")
    assert t.admit(2.0) == []  # r works at its memory
    t.enter("r", "r0", Phase.IDLE, 3.0, "tr2")
    [back] = t.admit(3.0)
    assert (back.ticket, back.restore, back.park) == ("tt", True, ("r",))


def test_a_load_parks_no_pod_that_works_where_a_sync_would() -> None:
    # s's weight sync may park t, which trains and stops at safe points; the
    # same weight sync said to be s's first allocation (its model load) waits:
    # the stop pays for a sync's declared seconds, and a load's are not those.
    t, [synced] = trainer_working_sync_waiting(safe_points=True)
    assert synced.park == ("t",)
    t = memory_turns_named("t", "s")
    t.set_cycles({"t": TRAINER_POOL, "s": ROLLOUT_POOL})
    t.enter("t", "t0", Phase.TRAINING, 0.0, "tt", safe_points=True)
    t.admit(0.0)
    t.set_memory({"t": {0: TRAINER_32B}}, {0: H200_MIB})
    assert not t.enter("s", "s0", Phase.WEIGHT_SYNC, 1.0, "ts", loading=True)
    assert t.admit(1.0) == [] and t.stopped() == []
    t.enter("t", "t0", Phase.IDLE, 2.0, "tt2")
    [loaded] = t.admit(2.0)
    assert (loaded.ticket, loaded.park) == ("ts", ("t",))


def test_a_pod_let_in_before_its_memory_shows_counts_at_its_peak() -> None:
    # Neither pod holds memory yet (both about to load, on GPU 0 as they
    # declare); a's training goes in. b's load, which would gain beside a's
    # kernels, waits all the same: a may grow to its peak before the next
    # reading of the GPUs shows any of it.
    t: Turns[str, str] = Turns(SharingRules(), 60.0)
    t.set_gpus({"a": frozenset({0}), "b": frozenset({0})})
    t.set_memory({}, {0: H200_MIB}, {"a": TRAINER_32B, "b": ROLLOUT_7B})
    assert t.enter("a", "a0", Phase.TRAINING, 0.0, "ta")
    assert not t.enter("b", "b0", Phase.WEIGHT_SYNC, 1.0, "tb", loading=True)
    assert t.admit(1.0) == []
    t.enter("a", "a0", Phase.IDLE, 2.0, "ta2")
    [loaded] = t.admit(2.0)
    assert loaded.ticket == "tb" and loaded.park == ()
