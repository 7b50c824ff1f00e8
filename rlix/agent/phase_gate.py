"""The phase gate on this node (``rlix agent --phase-gate``, docs/node-agent.md).

A trainer process about to enter a busy phase asks (``phase`` with
``"wait": true``); the agent answers at once where entering adds progress on
every GPU its pod shares with pods that are working, and otherwise holds the
answer until they leave their busy phases (or the wait reaches its bound).
The decision is the shared core's (``rlix.core.policy.placement.turns``, on
``gating.gains_by_entering`` and ``sharing.takes_turns``, the functions the
simulator's engine applies); this module only feeds it what the node knows:
which GPUs each pod's processes hold, the cycles pods declare
(``rlix.io/phase-seconds``), which pods are parked, and the clock, and it
wakes waiters whose bound is reached.

Answers are sent from whichever thread frees them (a neighbour's phase
report, a disconnect, a suspension, the bound's timer), never under the
gate's lock.

With ``memory`` and ``moves`` (``--park-at-gate``) a pod goes in only where
its memory fits beside the pods resident on its GPUs, after the partners that
do not work are parked, and a pod the gate parked is brought back before it
goes (``Turns.set_memory``; docs/node-agent.md). Those moves run on one
thread of their own, in the order they were decided, never on the thread that
freed the waiter: that thread may be the reader of the very connection whose
process is being parked (a partner reporting its idle phase is parked for
the pod waiting on it), and a park waits for that process's reply. One
thread also keeps a pod's park and a later restore of it in order. Where a
move fails, the pod waits again (``Turns.requeue``), as it would have
without parking.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, Protocol

from rlix.core.phases import Phase
from rlix.core.policy.placement.gate_room import Footprint
from rlix.core.policy.placement.sharing import SharingRules
from rlix.core.policy.placement.turns import Admitted, Cycle, Turns

log = logging.getLogger(__name__)

# How long a pod that asked the gate is remembered once its pod is no longer
# listed (``keep_asked``): the node's listing is a few seconds old at worst.
ASKED_KEPT_S = 600.0

# Called when a held process may go: (seconds it waited, whether it went in
# only because its wait reached the bound).
Go = Callable[[float, bool], None]

# What pods resident on the GPUs hold (pod uid -> GPU -> MiB), each GPU's
# usable MiB, the per-GPU MiB pods declare at their peak, and the pods that can
# be parked (``Turns.set_memory``).
Memory = Callable[
    [], tuple[Mapping[str, Footprint], Mapping[int, int], Mapping[str, int], Collection[str]]
]


class Moves(Protocol):
    """Parks and restores a pod's memory in place (the agent's Preemption);
    each raises where the move did not happen."""

    def park(self, pod: str, held: Footprint) -> None:
        """Park ``pod``, which holds ``held`` (GPU -> MiB) now: kept in its
        record, for an agent restarted before its restore."""
        ...

    def restore(self, pod: str) -> None: ...

    def parked(self) -> Mapping[str, Footprint]:
        """The pods whose memory is parked for the gate now (the records say
        so), with what each held: one brought back some other way, or made a
        suspension (the conductor), is not named."""
        ...


class PhaseGate:
    def __init__(
        self,
        rules: SharingRules,
        max_wait_s: float,
        *,
        gpus: Callable[[], Mapping[str, frozenset[int]]],
        parked: Callable[[str], bool],
        cycles: Callable[[], Mapping[str, Cycle]] = dict,
        clock: Callable[[], float] = time.monotonic,
        on_wait: Callable[[float, bool], None] | None = None,
        memory: Memory | None = None,
        moves: Moves | None = None,
        declared_gpus: Callable[[], Mapping[str, frozenset[int]]] = dict,
    ) -> None:
        """``gpus``: pod uid -> the GPUs its processes hold now; ``parked``:
        whether a pod's memory is off its GPUs; ``cycles``: pod uid -> the
        cycle it declares (a pod not named declares none); ``on_wait``: told of every
        answered wait (seconds, went in at the bound), for the metrics;
        ``memory`` and ``moves`` (both or neither): park partners that do not
        work where a pod's memory does not fit (module docstring; its reading of
        what each pod holds also says which GPUs it holds, so ``gpus`` is then
        not read); ``declared_gpus``: pod uid -> the GPUs it declares
        (``rlix.io/gpu-indices``), its GPUs too, before it holds memory there
        (its load). Pods the records say the gate parked and it does not know
        of (parked before the agent restarted, or by a reply that came after
        its park gave up) join its parks, brought back at their turn."""
        if (memory is None) != (moves is None):
            raise ValueError("parking at the gate needs both memory and moves")
        self._turns: Turns[object, Go] = Turns(rules, max_wait_s)
        self._memory = memory
        self._moves = moves
        self.parks = moves is not None
        # Admissions whose moves are to be made, with what each pod it parks holds.
        self._pending: queue.Queue[tuple[Admitted[Go], dict[str, dict[int, int]]]] = queue.Queue()
        # Pods named by admissions whose moves are queued or under way: whatever
        # the agent's records say of them in the meantime is the move in flight.
        self._moving: Counter[str] = Counter()
        self._gpus = gpus
        self._declared_gpus = declared_gpus
        self._parked = parked
        self._cycles = cycles
        self._clock = clock
        self._on_wait = on_wait or (lambda waited, expired: None)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self.max_wait_s = max_wait_s
        # Pods that asked to go in (a phase, a load), or were followed into a
        # block, with when they last did: ``gate_promises`` asks whether a pod
        # that loaded ever did.
        self._asked: dict[str, float] = {}

    def enter(
        self,
        pod: str,
        process: object,
        phase: Phase,
        go: Go,
        *,
        safe_points: bool = False,
        loading: bool = False,
    ) -> bool:
        """``process`` (of pod uid ``pod``) enters ``phase``. True: it goes now;
        False: ``go`` is called when it may (from another thread).
        ``safe_points``: it stops at safe points in ``phase`` (a parking gate
        may park it there for a partner's weight sync, ``Turns``); ``loading``:
        a weight sync that is the pod's first allocation (``Turns.enter``)."""
        with self._lock:
            self._asked[pod] = self._clock()
            released = self._refresh()
            goes = self._turns.enter(
                pod, process, phase, self._clock(), go, safe_points=safe_points, loading=loading
            )
            released += self._admit()
            self._changed.notify_all()
        self._release(released)
        return goes

    def returned(self, pod: str, process: object, phase: Phase, *, adopt: bool) -> None:
        """``process`` reported ``phase`` without waiting: it is in that phase now,
        inside a block (``Turns.returned``). ``adopt``: its client says so of
        such reports, so it is followed even if it never asked the gate here
        (it reconnected mid-block, to a restarted agent); otherwise a process
        that never took part stays out of the gate."""
        with self._lock:
            if not self._turns.returned(pod, process, phase, self._clock(), adopt=adopt):
                return
            self._asked[pod] = self._clock()
            # After it, so that a parked pod's phase is kept for its restore.
            released = self._refresh() + self._admit()
            self._changed.notify_all()
        self._release(released)

    def leave(self, process: object) -> None:
        """``process`` disconnected: what it held is free."""
        with self._lock:
            self._turns.leave(process)
            released = self._refresh() + self._admit()
        self._release(released)

    def asked(self, pod: str) -> bool:
        """Whether pod uid ``pod`` ever asked this gate to go in, or was
        followed into a block (``returned``)."""
        with self._lock:
            return pod in self._asked

    def keep_asked(self, pods: Iterable[str]) -> None:
        """Forget the pods not named (gone from the node) that last asked
        over ``ASKED_KEPT_S`` ago: a listing may lag a pod that just asked."""
        keep, now = set(pods), self._clock()
        with self._lock:
            self._asked = {
                p: t for p, t in self._asked.items() if p in keep or now - t < ASKED_KEPT_S
            }

    def poke(self) -> None:
        """Something moved (memory parked or restored): decide again."""
        with self._lock:
            released = self._refresh() + self._admit()
        self._release(released)

    def status(self) -> dict[str, Any]:
        with self._lock:
            self._read_cycles()  # what it would decide with now, even before any report
            self._read_memory()
            self._read_parks()
            now = self._clock()
            return {
                "maxWaitS": self.max_wait_s,
                "working": self._turns.working(),
                "declaredCycles": self._turns.declared(),
                "waitingS": {p: round(now - t, 3) for p, t in self._turns.waiting().items()},
                "parksAtGate": self.parks,
                "gateParked": self._turns.gate_parked(),
                "gateStopped": self._turns.stopped(),
                "peaksMiB": self._turns.peaks(),
            }

    def run(self, stop: threading.Event) -> None:
        """Wake waiters whose bound is reached, and carry out the memory moves
        admissions name (on a thread of their own); returns once ``stop`` is set."""
        if self._moves is not None:
            threading.Thread(
                target=self._move_loop, args=(stop,), name="rlix-gate-moves", daemon=True
            ).start()
        while not stop.is_set():
            with self._lock:
                deadline = self._turns.next_deadline()
                timeout = 1.0 if deadline is None else max(0.0, deadline - self._clock())
                self._changed.wait(min(timeout, 1.0))
                released = self._admit()
            self._release(released)

    def _move_loop(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                admitted, held = self._pending.get(timeout=0.5)
            except queue.Empty:
                continue
            self._move(admitted, held)

    def _move(self, admitted: Admitted[Go], held: dict[str, dict[int, int]]) -> None:
        """Park what ``admitted`` names, bring its pod back, then answer it;
        where a move fails, it waits again, with memory counted where it is."""
        assert self._moves is not None
        parked: list[str] = []
        done = False
        try:
            for pod in admitted.park:
                self._moves.park(pod, held.get(pod, {}))
                parked.append(pod)
            if admitted.restore:
                self._moves.restore(admitted.pod)
            done = True
        except Exception:
            log.exception(
                "phase gate: making room for pod %s failed (parked %s of %s); it waits again",
                admitted.pod,
                parked,
                list(admitted.park),
            )
        with self._lock:
            self._moving.subtract(_named(admitted))
            self._moving = +self._moving  # drops the pods no move names any more
            answered: list[Admitted[Go]] = []
            if done:
                waited = self._clock() - admitted.since  # it waited until its room was made
                answered.append(Admitted(admitted.ticket, waited, admitted.expired))
            else:
                self._turns.requeue(admitted, parked)
            released = self._refresh() + self._admit()
            self._changed.notify_all()
        self._release(answered + released)

    # -- internals (under the lock) -----------------------------------------------
    def _refresh(self) -> list[Admitted[Go]]:
        if self._memory is not None:
            self._read_memory(with_gpus=True)  # one reading of the GPUs gives both
        else:
            try:
                self._turns.set_gpus(self._with_declared(self._gpus()))
            except Exception:  # a failed reading keeps the last one; the next event retries
                log.exception("phase gate: reading which GPUs each pod holds failed")
        self._read_cycles()
        self._read_parks()
        now, out = self._clock(), []
        mine = set(self._turns.gate_parked()) | set(self._moving)
        for pod in self._turns.pods():
            if pod not in mine and self._parked(pod):
                out += self._turns.forget_pod(pod, now)
        for pod in self._turns.parked():
            # Restored: it works again in the phase it was in. One the gate
            # stopped (or is stopping) comes back by the gate's own move.
            if pod not in mine and not self._parked(pod):
                self._turns.restore_pod(pod)
        return out

    def _read_memory(self, *, with_gpus: bool = False) -> None:
        """What pods hold, for the room test; ``with_gpus``: and which GPUs each
        holds, from the same reading (the GPUs a pod holds memory on)."""
        if self._memory is None:
            return
        try:
            held, capacity, peaks, movable = self._memory()
            if with_gpus:
                on = {pod: frozenset(gpus) for pod, gpus in held.items()}
                self._turns.set_gpus(self._with_declared(on))
            self._turns.set_memory(held, capacity, peaks, movable)
        except Exception:  # a failed reading keeps the last one; the next event retries
            log.exception("phase gate: reading what pods hold on the GPUs failed")

    def _with_declared(self, gpus: Mapping[str, frozenset[int]]) -> dict[str, frozenset[int]]:
        """The GPUs each pod holds memory on, and those it declares: a pod that
        holds nothing yet (it is about to load) is on its GPUs all the same."""
        out = dict(gpus)
        for pod, declared in self._declared_gpus().items():
            out[pod] = out.get(pod, frozenset()) | declared
        return out

    def _read_parks(self) -> None:
        """The gate's own parks stay in line (their waiters wait for a turn and
        a restore). One that is not in flight and no longer the gate's was
        brought back by someone else (``rlix agent resume``), made a
        suspension (the conductor), or its pod is gone; one the gate does not
        know of joins them."""
        if self._moves is None:
            return
        try:
            records = self._moves.parked()
        except Exception:  # a failed reading keeps the last one; the next event retries
            log.exception("phase gate: reading which pods it parked failed")
            return
        known = set(self._turns.gate_parked())
        for pod in known - records.keys():
            if pod not in self._moving:
                self._turns.release(pod)
        for pod in records.keys() - known:
            if pod not in self._moving:
                self._turns.adopt(pod, records[pod], self._clock())

    def _read_cycles(self) -> None:
        try:
            self._turns.set_cycles(self._cycles())
        except Exception:  # a failed reading keeps the last one; the next event retries
            log.exception("phase gate: reading the cycles pods declare failed")

    def _admit(self) -> list[Admitted[Go]]:
        admitted = self._turns.admit(self._clock())
        for a in admitted:
            if a.park or a.restore:
                self._moving.update(_named(a))  # in flight from now until the mover is done
                self._pending.put((a, {pod: self._turns.footprint(pod) for pod in a.park}))
        return admitted

    def _release(self, released: list[Admitted[Go]]) -> None:
        for a in released:
            if a.park or a.restore:
                continue  # queued for the mover (``_admit``): answered once its room is made
            if a.ticket is None:
                continue  # a stopped pod came back: it asked nothing
            self._on_wait(a.waited_s, a.expired)
            try:
                a.ticket(a.waited_s, a.expired)
            except Exception:  # one client's answer failing must not stop the others'
                log.exception("phase gate: answering a waiting process failed")


def _named(admitted: Admitted[Go]) -> list[str]:
    """The pods an admission moves: those it parks, and its own where it restores it."""
    return [*admitted.park, *([admitted.pod] if admitted.restore else [])]
