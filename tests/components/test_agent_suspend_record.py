"""A suspend returns only once its record is saved (``Preemption.suspend_pod``).

A park reply wakes the suspend's wait before the reply's done-callback, which
saves the record, has run (``concurrent.futures`` notifies waiters first). A
suspend that read the record then found none: it said nothing was parked, the
phase gate took its own park for someone else's resume, and the record was
saved without who asked for it (a gate park published as a suspension). CI
caught that on the real node; here the callback is slowed down so that the
old order loses every time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from rlix.agent.driver_checkpoint import NoCheckpointer
from rlix.agent.identities import Caller, PeerCredentials, PodIdentity
from rlix.agent.park_space import ParkSpace
from rlix.agent.parking_state import PARKED_BY_GATE, StateStore
from rlix.agent.preemption import Preemption
from rlix.agent.publication import BackgroundPublisher
from rlix.agent.publishing import RecordingPublisher
from rlix.agent.relocation import SimulatedHbm
from rlix.agent.simulated_gpus import SimulatedBackend
from rlix.core import agent_protocol as proto
from rlix.core.names import ANNOTATION_SUSPENDED

UID = "aaaaaaaa-0000-4000-8000-00000000000a"
PID = 4242


class ParkingProcess:
    """A connected trainer process that answers its suspend from another thread."""

    hooks = ("state",)
    greeted = True
    asks_while_parked = True

    def __init__(self) -> None:
        self.caller = Caller(PeerCredentials(PID, 0, 0), PodIdentity(UID, "team-a", "trainer-0"))
        self.asked = threading.Event()
        self.future: Future[proto.Reply] = Future()

    @property
    def pid(self) -> int:
        return PID

    def request(self, op: str, **args: Any) -> Future[proto.Reply]:
        assert op == proto.OP_SUSPEND
        self.asked.set()
        return self.future

    def reply(self) -> None:
        manifest = {
            "where": "self",
            "entries": [{"name": "state/x", "nbytes": 4096, "checksum": "c"}],
        }
        self.future.set_result(proto.Reply(re=1, ok=True, body={"manifest": manifest}))


PUBLISHED = RecordingPublisher()


@pytest.fixture
def preemption(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[Preemption]:
    backend = SimulatedBackend(gpu_count=1, memory_mib=81920)
    publisher = BackgroundPublisher(PUBLISHED)
    p = Preemption(
        store=StateStore(tmp_path / "state"),
        backend=backend,
        checkpointer=NoCheckpointer("simulated"),
        publisher=publisher,
        now=lambda: datetime.now(UTC),
        timeout_s=getattr(request, "param", 10.0),  # how long a suspend waits for replies
        parks=ParkSpace(tmp_path / "parks"),
        relocator=SimulatedHbm(backend),
    )
    record = p._record

    def slow_record(*args: Any) -> None:
        time.sleep(0.3)  # the reply's callback, late behind the woken wait
        record(*args)

    monkeypatch.setattr(p, "_record", slow_record)
    yield p
    assert publisher.flush(timeout=5)
    publisher.stop()


def test_a_suspend_returns_what_was_parked_and_the_record_says_who_asked(
    preemption: Preemption,
) -> None:
    process = ParkingProcess()
    preemption.attach(process)  # type: ignore[arg-type]
    answer: dict[str, Any] = {}

    def suspend() -> None:
        answer.update(preemption.suspend_pod(UID, by=PARKED_BY_GATE, held_mib={0: 50_000}))

    thread = threading.Thread(target=suspend)
    thread.start()
    assert process.asked.wait(10)
    process.reply()
    thread.join(10)
    assert answer == {"pod_uid": UID, "parked": {str(PID): "self"}}
    rec = preemption.suspended[UID]
    assert rec.by == PARKED_BY_GATE and rec.held_mib == {0: 50_000}
    assert preemption.parked_by_gate() == {UID: {0: 50_000}}
    # A turn at the gate, not a suspension: nothing is published as suspended.
    assert preemption._publisher.flush(timeout=5)
    assert all(ANNOTATION_SUSPENDED not in p.annotations for p in PUBLISHED.patches)


@pytest.mark.parametrize("preemption", [0.2], indirect=True)
def test_a_reply_after_the_suspend_gave_up_is_recorded_for_whoever_asked(
    preemption: Preemption,
) -> None:
    process = ParkingProcess()
    preemption.attach(process)  # type: ignore[arg-type]
    with pytest.raises(proto.ProtocolError, match=r"no park reply within 0\.2s"):
        preemption.suspend_pod(UID, by=PARKED_BY_GATE, held_mib={0: 50_000})
    process.reply()  # it parks at its next phase boundary, after the call gave up
    deadline = time.monotonic() + 10
    while UID not in preemption.suspended and time.monotonic() < deadline:
        time.sleep(0.05)
    rec = preemption.suspended[UID]
    # Still the gate's turn (it takes the record back into its line), not a
    # suspension nobody wants that a conductor would resume into its partner's memory.
    assert rec.by == PARKED_BY_GATE and rec.held_mib == {0: 50_000}
    assert preemption._publisher.flush(timeout=5)
    assert all(ANNOTATION_SUSPENDED not in p.annotations for p in PUBLISHED.patches)


def conductor_suspends(preemption: Preemption, process: ParkingProcess) -> None:
    """The conductor's suspend of the process's pod (no ``by``), while it holds
    30,000 MiB on GPU 0."""
    preemption._backend.report_usage(PID, 0, 30_000, 0.5)
    preemption.attach(process)  # type: ignore[arg-type]
    thread = threading.Thread(target=preemption.suspend_pod, args=(UID,))
    thread.start()
    assert process.asked.wait(10)
    process.reply()
    thread.join(10)


def test_a_suspension_records_what_the_pod_held_and_a_resume_can_be_handed_to_the_gate(
    preemption: Preemption,
) -> None:
    # With --park-at-gate the conductor's resume goes to the gate: the record
    # becomes the gate's (with the room its restore needs, recorded at the
    # suspend), the memory stays parked, and the pod is no longer published
    # as suspended.
    def published() -> list[str | None]:
        # Flushed first: the background publisher coalesces a pod's patches
        # made before it runs (a CI run saw "true" then None sent as one None).
        assert preemption._publisher.flush(timeout=5)
        return [
            p.annotations[ANNOTATION_SUSPENDED]
            for p in PUBLISHED.patches
            if p.key == "team-a/trainer-0" and ANNOTATION_SUSPENDED in p.annotations
        ]

    conductor_suspends(preemption, ParkingProcess())
    rec = preemption.suspended[UID]
    assert rec.by == "" and rec.held_mib == {0: 30_000}
    assert preemption.parked_by_gate() == {}
    assert published()[-1:] == ["true"]
    assert preemption.hand_to_gate(UID)
    assert preemption.parked_by_gate() == {UID: {0: 30_000}}
    assert preemption.parked_bytes(UID) == 4096
    assert published()[-2:] == ["true", None]
    assert not preemption.hand_to_gate(UID)  # the gate's already


def test_a_resume_is_not_handed_to_the_gate_of_a_pod_that_would_not_ask_it(
    preemption: Preemption,
) -> None:
    process = ParkingProcess()
    process.asks_while_parked = False  # an older client: parked, it never asks the gate
    conductor_suspends(preemption, process)
    assert not preemption.hand_to_gate(UID)
    assert preemption.suspended[UID].by == ""
