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
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from rlix.core.phases import Phase
from rlix.core.policy.placement.sharing import SharingRules
from rlix.core.policy.placement.turns import Cycle, Turns

log = logging.getLogger(__name__)

# Called when a held process may go: (seconds it waited, whether it went in
# only because its wait reached the bound).
Go = Callable[[float, bool], None]


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
    ) -> None:
        """``gpus``: pod uid -> the GPUs its processes hold now; ``parked``:
        whether a pod's memory is off its GPUs; ``cycles``: pod uid -> the
        cycle it declares (a pod not named declares none); ``on_wait``: told of every
        answered wait (seconds, went in at the bound), for the metrics."""
        self._turns: Turns[object, Go] = Turns(rules, max_wait_s)
        self._gpus = gpus
        self._parked = parked
        self._cycles = cycles
        self._clock = clock
        self._on_wait = on_wait or (lambda waited, expired: None)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self.max_wait_s = max_wait_s

    def enter(self, pod: str, process: object, phase: Phase, go: Go) -> bool:
        """``process`` (of pod uid ``pod``) enters ``phase``. True: it goes now;
        False: ``go`` is called when it may (from another thread)."""
        with self._lock:
            released = self._refresh()
            goes = self._turns.enter(pod, process, phase, self._clock(), go)
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

    def poke(self) -> None:
        """Something moved (memory parked or restored): decide again."""
        with self._lock:
            released = self._refresh() + self._admit()
        self._release(released)

    def status(self) -> dict[str, Any]:
        with self._lock:
            self._read_cycles()  # what it would decide with now, even before any report
            now = self._clock()
            return {
                "maxWaitS": self.max_wait_s,
                "working": self._turns.working(),
                "declaredCycles": self._turns.declared(),
                "waitingS": {p: round(now - t, 3) for p, t in self._turns.waiting().items()},
            }

    def run(self, stop: threading.Event) -> None:
        """Wake waiters whose bound is reached; returns once ``stop`` is set."""
        while not stop.is_set():
            with self._lock:
                deadline = self._turns.next_deadline()
                timeout = 1.0 if deadline is None else max(0.0, deadline - self._clock())
                self._changed.wait(min(timeout, 1.0))
                released = self._admit()
            self._release(released)

    # -- internals (under the lock) -----------------------------------------------
    def _refresh(self) -> list[tuple[Go, float, bool]]:
        try:
            self._turns.set_gpus(self._gpus())
        except Exception:  # a failed reading keeps the last one; the next event retries
            log.exception("phase gate: reading which GPUs each pod holds failed")
        self._read_cycles()
        now, out = self._clock(), []
        for pod in self._turns.pods():
            if self._parked(pod):
                out += [(a.ticket, a.waited_s, a.expired) for a in self._turns.forget_pod(pod, now)]
        for pod in self._turns.parked():
            if not self._parked(pod):  # restored: it works again in the phase it was in
                self._turns.restore_pod(pod)
        return out

    def _read_cycles(self) -> None:
        try:
            self._turns.set_cycles(self._cycles())
        except Exception:  # a failed reading keeps the last one; the next event retries
            log.exception("phase gate: reading the cycles pods declare failed")

    def _admit(self) -> list[tuple[Go, float, bool]]:
        return [(a.ticket, a.waited_s, a.expired) for a in self._turns.admit(self._clock())]

    def _release(self, released: list[tuple[Go, float, bool]]) -> None:
        for go, waited, expired in released:
            self._on_wait(waited, expired)
            try:
                go(waited, expired)
            except Exception:  # one client's answer failing must not stop the others'
                log.exception("phase gate: answering a waiting process failed")
