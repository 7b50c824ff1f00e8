"""Turns at the phase gate on one node: the node agent's side of ``gating``.

The simulator's engine applies ``gating.gains_by_entering`` at every phase
start of a job; on a cluster the same decision is the node agent's, at the
moment a trainer process reports the phase it is about to enter (the client
library's phase boundaries, where a trainer already waits for a suspension).
This module keeps what that decision needs: which pods work on which GPUs and
who waits to enter, and answers who may go.

Why the unit is the pod and not the process: a pod's processes are one gang
(data-parallel ranks meet in collectives), so letting one rank of a pod in
while another rank of it waits would stall the rank that went in. A pod that
has a process in a busy phase *works*; another of its processes enters
without asking. A waiting pod waits only for pods that work, and a working
pod never waits, so no two pods can wait for each other.

Why only pods that take part: a pod whose client does not report the end of
its phases (an older client library) would hold a GPU for ever in the gate's
eyes. Such pods are left out of the gate both ways, as before it existed.

Which pairs take turns: where both pods declare their cycle (the seconds of
an iteration they spend in each phase, ``rlix.io/phase-seconds``), the
simulator's rule, ``sharing.takes_turns``: only pods that both idle part of
their cycle, and only where turns beat drifting side by side; other declared
pairs co-run, as rule 5 judged them when it let them share. Where a pod
declares no cycle the gate cannot tell, and every meeting that would lose
progress is a turn, at full pressure (a cluster measures none lower).

Waits are bounded (``max_wait_s``): past it a pod goes in whatever it meets,
so a holder that stalls (or never reports its phase's end) cannot starve its
neighbour.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from rlix.core.phases import Phase, Shape, shape_of
from rlix.core.policy.placement.gating import Busy, gains_by_entering
from rlix.core.policy.placement.sharing import SharingRules, takes_turns
from rlix.core.snapshot import PhaseLoad

P = TypeVar("P", bound=Hashable)  # a process (the agent: its connection)
T = TypeVar("T")  # what a waiter gets back when it may go

# A pod's declared cycle: its load profile and the seconds of one iteration
# (``snapshot.load_profile_of`` of its ``rlix.io/phase-seconds``).
Cycle = tuple[tuple[PhaseLoad, ...], float]


@dataclass(frozen=True, slots=True)
class Admitted(Generic[T]):
    """A waiter that may go now."""

    ticket: T
    waited_s: float
    expired: bool  # went in because its wait reached max_wait_s, not because it gains


@dataclass(slots=True)
class _Waiter(Generic[T]):
    pod: str
    busy: Busy
    since: float
    ticket: T


@dataclass(slots=True)
class _Pod:
    # process -> its busy phase (processes are the caller's type: Turns' P)
    working: dict[Any, Busy] = field(default_factory=dict)


class Turns(Generic[P, T]):
    """Who works, and who waits to enter a busy phase, on one node's GPUs."""

    def __init__(self, rules: SharingRules, max_wait_s: float) -> None:
        if rules.interference is None:
            raise ValueError("the phase gate needs an interference matrix (SharingRules)")
        if max_wait_s <= 0:
            raise ValueError(f"max_wait_s must be positive, got {max_wait_s}")
        self.rules = rules
        self.max_wait_s = max_wait_s
        self._pods: dict[str, _Pod] = {}
        self._gpus: dict[str, frozenset[int]] = {}
        self._cycles: dict[str, Cycle] = {}
        self._waiting: dict[P, _Waiter[T]] = {}
        self._pod_of: dict[P, str] = {}
        # Parked pods: the busy phase each of their processes was in (or was
        # let into when the pod was parked), to work in again once restored.
        self._parked: dict[str, dict[Any, Busy]] = {}
        # Waits that ended without a turn because the process asked again (two
        # threads of one process): handed back by the next admit, so no
        # answer is lost.
        self._ended: list[Admitted[T]] = []

    # -- what the agent tells it -------------------------------------------------
    def set_gpus(self, gpus: Mapping[str, frozenset[int]]) -> None:
        """The GPUs each pod holds now (a pod not named holds none)."""
        self._gpus = dict(gpus)

    def set_cycles(self, cycles: Mapping[str, Cycle]) -> None:
        """The cycles pods declare now (a pod not named declares none)."""
        self._cycles = {pod: c for pod, c in cycles.items() if c[0] and c[1] > 0}

    def enter(self, pod: str, process: P, phase: Phase, now: float, ticket: T) -> bool:
        """``process`` of ``pod`` is about to enter ``phase`` (ending the one it was in).

        True: it goes now. False: it waits, and ``ticket`` comes back from
        :meth:`admit` when it may go.
        """
        self._forget_process(process, now)
        self._pod_of[process] = pod
        shape = shape_of(phase)
        if shape is Shape.NONE:
            return True  # idle: nothing to wait for, and it stops holding
        busy: Busy = (shape, 1.0)  # a cluster knows no pressure below full
        if self._works(pod) or self._may_enter(pod, busy):
            self._pods.setdefault(pod, _Pod()).working[process] = busy
            return True
        self._waiting[process] = _Waiter(pod, busy, now, ticket)
        return False

    def returned(self, pod: str, process: P, phase: Phase, now: float, *, adopt: bool) -> bool:
        """``process`` of ``pod`` is in ``phase`` now, without asking: a nested
        phase block ended inside an enclosing one, or it reconnected inside a
        block, where it cannot wait (a suspend must not land inside a block).
        It works in that phase at once, or holds nothing if the phase is idle.
        Followed only if it took part before (it entered through :meth:`enter`)
        or ``adopt`` (its client says such reports are its phase now); True if
        it was."""
        if process not in self._pod_of and not adopt:
            return False
        self._forget_process(process, now)
        self._pod_of[process] = pod
        shape = shape_of(phase)
        if shape is not Shape.NONE:
            self._pods.setdefault(pod, _Pod()).working[process] = (shape, 1.0)
        return True

    def leave(self, process: P) -> None:
        """``process`` is gone (disconnected): it neither works nor waits."""
        self._forget_process(process)
        self._pod_of.pop(process, None)

    def forget_pod(self, pod: str, now: float) -> list[Admitted[T]]:
        """A pod's memory left the GPUs (suspended): it holds nothing, and its
        waiters are handed back (a parked process goes nowhere until it is
        restored). What its processes were busy in is kept for ``restore_pod``."""
        state = self._pods.pop(pod, None)
        held: dict[Any, Busy] = dict(state.working) if state is not None else {}
        out = []
        for process, waiter in list(self._waiting.items()):
            if waiter.pod == pod:
                del self._waiting[process]
                out.append(Admitted(waiter.ticket, now - waiter.since, expired=False))
                held[process] = waiter.busy  # it goes into its phase once restored
        if held:
            self._parked.setdefault(pod, {}).update(held)
        return out

    def restore_pod(self, pod: str) -> None:
        """A parked pod's memory is back: its processes carry on in the phases
        they were in, working without asking (they are mid-phase; a restore
        is the conductor's decision, not the gate's)."""
        held = self._parked.pop(pod, None)
        if held:
            self._pods.setdefault(pod, _Pod()).working.update(held)

    def parked(self) -> list[str]:
        """Pods parked while a process of theirs was busy (``restore_pod`` brings it back)."""
        return sorted(self._parked)

    # -- what it answers ---------------------------------------------------------
    def admit(self, now: float) -> list[Admitted[T]]:
        """The waiters that may go now, longest wait first: those whose pod
        works already, those that gain by entering beside who works now
        (including the ones admitted before them), and those past their
        bound; first, any wait that ended since without a turn (its process
        asked again)."""
        out, self._ended = self._ended, []
        for process, waiter in sorted(self._waiting.items(), key=lambda kv: kv[1].since):
            waited = now - waiter.since
            goes = self._works(waiter.pod) or self._may_enter(waiter.pod, waiter.busy)
            if goes or waited >= self.max_wait_s:
                del self._waiting[process]
                self._pods.setdefault(waiter.pod, _Pod()).working[process] = waiter.busy
                out.append(Admitted(waiter.ticket, waited, expired=not goes))
        return out

    def pods(self) -> list[str]:
        """Every pod that works or waits."""
        return sorted(set(self._pods) | {w.pod for w in self._waiting.values()})

    def next_deadline(self) -> float | None:
        """When the longest wait reaches its bound (None: nobody waits)."""
        if not self._waiting:
            return None
        return min(w.since for w in self._waiting.values()) + self.max_wait_s

    def working(self) -> dict[str, list[str]]:
        """Pod -> the busy shapes its processes work in (for status)."""
        return {
            pod: sorted(shape.value for shape, _ in s.working.values())
            for pod, s in self._pods.items()
            if s.working
        }

    def declared(self) -> dict[str, float]:
        """Pod -> the seconds of the iteration it declares (for status)."""
        return {pod: seconds for pod, (_, seconds) in sorted(self._cycles.items())}

    def waiting(self) -> dict[str, float]:
        """Pod -> when its longest-waiting process began to wait."""
        out: dict[str, float] = {}
        for w in self._waiting.values():
            out[w.pod] = min(out.get(w.pod, w.since), w.since)
        return out

    # -- internals ---------------------------------------------------------------
    def _may_enter(self, pod: str, busy: Busy) -> bool:
        """Whether entering adds progress on every GPU the pod shares with pods
        that work and that it takes turns with."""
        for gpu in self._gpus.get(pod, frozenset()):
            holders = [
                b
                for other, s in self._pods.items()
                if other != pod
                and gpu in self._gpus.get(other, frozenset())
                and self._turns_with(pod, other)
                for b in s.working.values()
            ]
            if holders and not gains_by_entering(self.rules, busy, holders):
                return False
        return True

    def _turns_with(self, pod: str, other: str) -> bool:
        """Whether ``pod`` waits for ``other``'s busy phases at all: by their
        declared cycles where both declare one, else always."""
        mine, theirs = self._cycles.get(pod), self._cycles.get(other)
        if mine is None or theirs is None:
            return True
        return takes_turns(self.rules, *mine, *theirs)

    def _works(self, pod: str) -> bool:
        return pod in self._pods  # a pod is kept only while a process of it works

    def _forget_process(self, process: P, now: float | None = None) -> None:
        """Drop what ``process`` holds or waits for; given ``now`` (it asks
        again), its wait is answered by the next admit."""
        waiter = self._waiting.pop(process, None)
        if waiter is not None and now is not None:
            self._ended.append(Admitted(waiter.ticket, now - waiter.since, expired=False))
        pod = self._pod_of.get(process)
        if pod is None:
            return
        parked = self._parked.get(pod)
        if parked is not None:
            parked.pop(process, None)
            if not parked:
                del self._parked[pod]
        if pod not in self._pods:
            return
        working = self._pods[pod].working
        working.pop(process, None)
        if not working:
            del self._pods[pod]
