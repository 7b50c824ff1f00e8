"""The phase gate's memory moves (``PhaseGate`` with ``memory`` and ``moves``):
made on the gate's own thread, in order, before the waiter is answered; a
failed one puts the waiter back in line. The node's side is a small model of
what the agent's Preemption does (the record, the memory leaving the GPU);
e2e/test_park_at_gate.py runs the real agent and real trainer processes."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping

import pytest

from rlix.agent.parking_state import PARKED_BY_GATE, SuspendedPod
from rlix.agent.phase_gate import PhaseGate
from rlix.core.phases import Phase
from rlix.core.policy.placement.sharing import SharingRules
from rlix.core.policy.placement.turns import Cycle
from rlix.core.snapshot import load_profile_of

GPU_MIB = 81_920
PEAK = 50_000


class Node:
    """What the gate reads of the node, and the moves it asks for."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.resident = {"a": {0: PEAK}, "b": {0: 20_000}}
        self.away: dict[str, dict[int, int]] = {}  # parked: what each held
        self.moves: list[tuple[str, str, threading.Thread]] = []
        self.fail_next_park = False
        self.next_park_lands_late = False  # it fails, but the memory leaves all the same
        self.suspensions: set[str] = set()  # parked pods the conductor made its own
        self.reads = {"gpus": 0, "memory": 0}

    def gpus(self) -> dict[str, frozenset[int]]:
        with self.lock:
            self.reads["gpus"] += 1
            return {pod: frozenset(held) for pod, held in self.resident.items()}

    def memory(
        self,
    ) -> tuple[dict[str, dict[int, int]], dict[int, int], dict[str, int], set[str]]:
        with self.lock:
            self.reads["memory"] += 1
            held = {pod: dict(h) for pod, h in self.resident.items()}
        return held, {0: GPU_MIB}, {"a": PEAK, "b": PEAK}, {"a", "b"}

    def is_parked(self, pod: str) -> bool:
        with self.lock:
            return pod in self.away

    def park(self, pod: str, held: Mapping[int, int]) -> None:
        with self.lock:
            self.moves.append(("park", pod, threading.current_thread()))
            if self.fail_next_park:
                self.fail_next_park = False
                raise RuntimeError(f"pod {pod}: no park reply within 30s")
            if self.next_park_lands_late:
                self.next_park_lands_late = False
                self.away[pod] = self.resident.pop(pod)  # recorded as the gate's
                raise RuntimeError(f"pod {pod}: no park reply within 30s")
            assert dict(held) == self.resident[pod], "the gate passes what the pod holds"
            self.away[pod] = self.resident.pop(pod)

    def restore(self, pod: str) -> None:
        with self.lock:
            self.moves.append(("restore", pod, threading.current_thread()))
            self.resident[pod] = self.away.pop(pod)

    def parked(self) -> dict[str, dict[int, int]]:
        with self.lock:
            return {p: dict(h) for p, h in self.away.items() if p not in self.suspensions}


@pytest.fixture
def node() -> Node:
    return Node()


@contextlib.contextmanager
def running_gate(
    node: Node, cycles: Callable[[], Mapping[str, Cycle]] = dict
) -> Iterator[PhaseGate]:
    """A parking gate on ``node``, its loop (and so its mover) running."""
    g = PhaseGate(
        SharingRules(),
        60.0,
        gpus=node.gpus,
        parked=node.is_parked,
        memory=node.memory,
        moves=node,
        cycles=cycles,
    )
    stop = threading.Event()
    runner = threading.Thread(target=g.run, args=(stop,), daemon=True)
    runner.start()
    try:
        yield g
    finally:
        stop.set()
        runner.join(timeout=5)


@pytest.fixture
def gate(node: Node) -> Iterator[PhaseGate]:
    with running_gate(node) as g:
        yield g


class Answers:
    def __init__(self) -> None:
        self.got = threading.Event()
        self.calls: list[tuple[float, bool, threading.Thread]] = []

    def __call__(self, waited: float, expired: bool) -> None:
        self.calls.append((waited, expired, threading.current_thread()))
        self.got.set()


def test_the_idle_partner_is_parked_on_the_gates_thread_before_the_answer(
    gate: PhaseGate, node: Node
) -> None:
    go = Answers()
    assert not gate.enter("b", "b0", Phase.ROLLOUT, go)  # b's peak needs a's memory gone
    assert go.got.wait(10), gate.status()
    [(kind, pod, thread)] = node.moves
    assert (kind, pod) == ("park", "a")
    assert thread is not threading.current_thread()  # not the thread that asked
    assert go.calls[0][2] is thread  # answered once the park was made, by the same thread
    status = gate.status()
    assert status["gateParked"] == ["a"] and status["working"] == {"b": ["memory"]}
    assert status["parksAtGate"] and status["peaksMiB"] == {"a": PEAK, "b": PEAK}


def test_one_reading_of_the_gpus_per_event_says_what_pods_hold_and_where(
    gate: PhaseGate, node: Node
) -> None:
    # Each reading lists the GPUs' processes (NVML) and resolves each pid's
    # pod: a parking gate reads it once per event, not once for the GPUs a
    # pod holds and again for the memory there.
    before = dict(node.reads)
    assert gate.enter("a", "a0", Phase.TRAINING, Answers())  # a alone works: nothing moves
    assert node.reads["memory"] - before["memory"] == 1
    assert node.reads["gpus"] == before["gpus"]
    assert gate.status()["working"] == {"a": ["compute"]}


def test_the_parked_pod_stays_in_line_and_comes_back_at_its_turn(
    gate: PhaseGate, node: Node
) -> None:
    went_b = Answers()
    gate.enter("b", "b0", Phase.ROLLOUT, went_b)
    assert went_b.got.wait(10)
    node.resident["b"] = {0: PEAK}  # its KV cache, in the room a left
    went_a = Answers()
    # a is parked (the node's record says so), yet its wait is not answered:
    # it is the gate's park, brought back at a's turn, not someone else's.
    assert not gate.enter("a", "a0", Phase.TRAINING, went_a)
    gate.poke()
    assert not went_a.got.wait(0.5)
    assert gate.status()["waitingS"].keys() == {"a"}
    assert gate.enter("b", "b0", Phase.IDLE, Answers())  # b's turn ends
    assert went_a.got.wait(10), gate.status()
    assert [(k, p) for k, p, _ in node.moves] == [("park", "a"), ("park", "b"), ("restore", "a")]
    assert gate.status()["gateParked"] == ["b"]


def test_a_park_that_fails_puts_the_waiter_back_in_line_and_is_tried_again(
    gate: PhaseGate, node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    node.fail_next_park = True
    go = Answers()
    with caplog.at_level(logging.ERROR, logger="rlix.agent.phase_gate"):
        gate.enter("b", "b0", Phase.ROLLOUT, go)
        assert go.got.wait(10), gate.status()
    assert [(k, p) for k, p, _ in node.moves] == [("park", "a"), ("park", "a")]
    assert len(go.calls) == 1  # answered once, after the second park
    assert "making room for pod b failed (parked [] of ['a']); it waits again" in caplog.text


def test_a_park_that_lands_after_its_move_gave_up_is_the_gates_to_bring_back(
    gate: PhaseGate, node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    node.next_park_lands_late = True
    went_b = Answers()
    with caplog.at_level(logging.ERROR, logger="rlix.agent.phase_gate"):
        gate.enter("b", "b0", Phase.ROLLOUT, went_b)
        assert went_b.got.wait(10), gate.status()
    assert "making room for pod b failed" in caplog.text
    # a's record says the gate parked it: it is in the gate's line, not parked
    # for good, and b went in without parking it again.
    assert gate.status()["gateParked"] == ["a"]
    gate.enter("b", "b0", Phase.IDLE, Answers())
    went_a = Answers()
    gate.enter("a", "a0", Phase.TRAINING, went_a)
    assert went_a.got.wait(10), gate.status()
    assert [(k, p) for k, p, _ in node.moves] == [("park", "a"), ("restore", "a")]


def test_a_gate_park_brought_back_by_someone_else_is_not_restored_again(
    gate: PhaseGate, node: Node
) -> None:
    go = Answers()
    gate.enter("b", "b0", Phase.ROLLOUT, go)
    assert go.got.wait(10)
    node.restore("a")  # `rlix agent resume`, say
    gate.poke()
    assert gate.status()["gateParked"] == []
    gate.enter("b", "b0", Phase.IDLE, Answers())
    assert gate.enter("a", "a0", Phase.IDLE, Answers())
    assert [(k, p) for k, p, _ in node.moves] == [("park", "a"), ("restore", "a")]


def test_a_gate_park_made_a_suspension_is_let_go_and_its_wait_answered(
    gate: PhaseGate, node: Node
) -> None:
    went_b = Answers()
    gate.enter("b", "b0", Phase.ROLLOUT, went_b)
    assert went_b.got.wait(10)
    went_a = Answers()
    assert not gate.enter("a", "a0", Phase.TRAINING, went_a)
    node.suspensions.add("a")  # the conductor wants a suspended: it stays parked as one
    gate.poke()
    assert went_a.got.wait(10)  # answered as any suspended pod's wait is: it goes nowhere
    assert gate.status()["gateParked"] == [] and gate.status()["waitingS"] == {}
    gate.enter("b", "b0", Phase.IDLE, Answers())
    assert [(k, p) for k, p, _ in node.moves] == [("park", "a")]  # not brought back


def test_a_pod_parked_by_a_previous_agent_comes_back_into_what_its_record_says(
    node: Node,
) -> None:
    node.away["a"] = node.resident.pop("a")  # parked at the gate before a restart
    with running_gate(node) as g:
        go = Answers()
        assert not g.enter("a", "a0", Phase.TRAINING, go)
        assert go.got.wait(10), g.status()
        # b holds 20,000 and a's peak is 50,000: both fit, nothing else moves.
        assert [(k, p) for k, p, _ in node.moves] == [("restore", "a")]


def test_parking_needs_both_what_pods_hold_and_a_way_to_move_them(node: Node) -> None:
    with pytest.raises(ValueError, match="both memory and moves"):
        PhaseGate(SharingRules(), 60.0, gpus=node.gpus, parked=node.is_parked, moves=node)


def test_a_gate_parks_record_says_so_and_keeps_what_it_held() -> None:
    rec = SuspendedPod(
        "aaaaaaaa-0000-4000-8000-00000000000a", "ns", "p", "2026-12-07T00:00:00Z",
        by=PARKED_BY_GATE, held_mib={0: PEAK, 3: 10},
    )  # fmt: skip
    doc = rec.to_doc()
    assert doc["by"] == PARKED_BY_GATE and doc["heldMiB"] == {"0": PEAK, "3": 10}
    assert SuspendedPod.from_doc(doc) == rec
    # A record an older agent wrote (or any suspension) carries neither.
    older = {k: v for k, v in doc.items() if k not in ("by", "heldMiB")}
    back = SuspendedPod.from_doc(older)
    assert back.by == "" and back.held_mib == {}
    assert "by" not in back.to_doc()


def wait_for(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return False


# a trains for a minute a cycle, b syncs for a second: stopping a (its
# 50,000 MiB out and back, about 2.3 s, and b's sync) costs less than
# waiting for a's phase to end.
CYCLES = {
    "a": load_profile_of({Phase.TRAINING: 60.0, Phase.IDLE: 60.0}),
    "b": load_profile_of({Phase.WEIGHT_SYNC: 1.0, Phase.IDLE: 119.0}),
}


def test_a_sync_parks_a_working_partner_at_its_safe_points_and_the_gate_brings_it_back(
    node: Node,
) -> None:
    # a trains, saying it stops at safe points; b's sync does not fit beside
    # a's peak: a is parked (the agent's suspend lands at a's next safe
    # point), b goes in, and once b's sync has left the gate brings a back
    # itself (a waits inside its phase and asks nothing), parking b, idle.
    with running_gate(node, lambda: CYCLES) as gate:
        sync_parks_and_brings_back(gate, node)


def sync_parks_and_brings_back(gate: PhaseGate, node: Node) -> None:
    assert gate.enter("a", "a0", Phase.TRAINING, Answers(), safe_points=True)
    synced = Answers()
    assert not gate.enter("b", "b0", Phase.WEIGHT_SYNC, synced)
    assert synced.got.wait(10), gate.status()
    assert [(k, p) for k, p, _ in node.moves] == [("park", "a")]
    assert gate.status()["gateStopped"] == ["a"]
    assert gate.status()["working"] == {"b": ["network"]}
    node.resident["b"] = {0: PEAK}
    assert gate.enter("b", "b0", Phase.IDLE, Answers())
    assert wait_for(lambda: len(node.moves) == 3), (node.moves, gate.status())
    assert [(k, p) for k, p, _ in node.moves] == [("park", "a"), ("park", "b"), ("restore", "a")]
    status = gate.status()
    assert status["gateStopped"] == [] and status["working"] == {"a": ["compute"]}
    assert status["waitingS"] == {} and len(synced.calls) == 1


@pytest.mark.parametrize("declared", [True, False], ids=["no-safe-points", "no-cycles"])
def test_a_sync_waits_for_a_working_partner_without_safe_points_or_a_cycle(
    node: Node, declared: bool
) -> None:
    with running_gate(node, (lambda: CYCLES) if declared else dict) as gate:
        assert gate.enter("a", "a0", Phase.TRAINING, Answers(), safe_points=not declared)
        synced = Answers()
        assert not gate.enter("b", "b0", Phase.WEIGHT_SYNC, synced)
        gate.poke()
        assert not synced.got.wait(0.5)
        assert node.moves == [] and gate.status()["gateStopped"] == []


def test_a_resume_handed_to_the_gate_brings_a_pod_parked_mid_phase_back_at_its_turn(
    gate: PhaseGate, node: Node
) -> None:
    # The conductor parks a while it trains; b goes into rollout and grows to
    # its peak. The conductor's resume of a is handed to the gate (the agent
    # makes a's record the gate's): a comes back by the gate's own move, not
    # into b's memory but once b is out, b parked, idle, to make its room.
    assert gate.enter("a", "a0", Phase.TRAINING, Answers())
    node.suspensions.add("a")
    node.away["a"] = node.resident.pop("a")  # the conductor's suspend, at a safe point
    gate.poke()
    went_b = Answers()
    assert gate.enter("b", "b0", Phase.ROLLOUT, went_b)
    node.resident["b"] = {0: PEAK}
    node.suspensions.discard("a")  # Preemption.hand_to_gate
    gate.poke()
    status = gate.status()
    assert status["gateParked"] == ["a"] and status["gateStopped"] == ["a"]
    assert status["working"] == {"b": ["memory"]} and node.moves == []
    assert gate.enter("b", "b0", Phase.IDLE, Answers())
    assert wait_for(lambda: len(node.moves) == 2), (node.moves, gate.status())
    assert [(k, p) for k, p, _ in node.moves] == [("park", "b"), ("restore", "a")]
    assert gate.status()["working"] == {"a": ["compute"]}
