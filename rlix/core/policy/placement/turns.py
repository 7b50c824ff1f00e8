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

Memory, once the caller says what pods hold (``set_memory``): a pod goes in
only where its memory fits beside the pods resident on its GPUs, after
parking partners that do not work (``gate_room``), and a pod the gate parked
comes back before it goes. The caller carries those moves out before it
answers (``Admitted.park`` and ``restore``), and hands back an admission
whose moves failed (``requeue``), so a failed park falls back to the wait
it replaced. Memory is the one thing a wait's bound does not override: a
pod whose memory does not fit beside pods that work waits for them however
long, as running a GPU out of memory loses more than any wait. Without
``set_memory`` the gate decides on phases alone, as before.

A weight sync is the one entrant that may park pods that work
(``gate_room.parks_working_for``), and only pods whose every working process
said it stops at safe points (``enter``'s ``safe_points``). Such a pod is
*stopped*: the caller parks it at its next safe point, and the gate brings
it back itself (a stopped process waits inside its phase and asks nothing),
as an admission with no ticket, ahead of every other waiter, where it fits
again. Until then the room it had is kept for it: every other entrant
counts it as working at its peak.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from rlix.core.phases import Phase, Shape, shape_of
from rlix.core.policy.placement.gate_room import (
    Footprint,
    Room,
    parks_working_for,
    room_for,
    worth_stopping,
)
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
    """A waiter that may go now, once the caller has parked the pods in
    ``park`` and, where ``restore``, brought its own pod's memory back. No
    ``ticket``: a stopped pod coming back (nobody to answer)."""

    ticket: T | None
    waited_s: float
    expired: bool  # went in because its wait reached max_wait_s, not because it gains
    park: tuple[str, ...] = ()
    restore: bool = False
    # The wait it ends, for ``requeue`` (not part of what the caller compares).
    waiter: _Waiter[T] | None = field(default=None, compare=False, repr=False)

    @property
    def pod(self) -> str:
        """The pod admitted (the one to restore)."""
        return self.waiter.pod if self.waiter is not None else ""

    @property
    def since(self) -> float:
        """When its wait began."""
        return self.waiter.since if self.waiter is not None else 0.0


@dataclass(slots=True)
class _Waiter(Generic[T]):
    pod: str
    process: Any
    busy: Busy
    since: float
    ticket: T | None
    phase: Phase | None = None
    safe_points: bool = False  # its process stops at safe points in that phase
    loading: bool = False  # a weight sync that is its first allocation: it stops nobody
    # Past its bound but held because its memory does not fit: no deadline of
    # its own any more (it goes when room is made, see ``admit``).
    held_by_memory: bool = False


@dataclass(slots=True)
class _Pod:
    # process -> its busy phase (processes are the caller's type: Turns' P)
    working: dict[Any, Busy] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Comeback:
    """The key of a stopped pod's wait to come back (it has no process that asks)."""

    pod: str


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
        self._waiting: dict[P | _Comeback, _Waiter[T]] = {}
        self._pod_of: dict[P, str] = {}
        # Parked pods: the busy phase each of their processes was in (or was
        # let into when the pod was parked), to work in again once restored.
        self._parked: dict[str, dict[Any, Busy]] = {}
        # Waits that ended without a turn because the process asked again (two
        # threads of one process): handed back by the next admit, so no
        # answer is lost.
        self._ended: list[Admitted[T]] = []
        # Memory (``set_memory``; None: not known, the gate decides on phases
        # alone). Footprints are the last seen while resident, kept for pods
        # the gate parked (what they take back) and for pods it restored
        # until the caller's view shows them again.
        self._capacity: dict[int, int] | None = None
        self._peaks: dict[str, int] = {}
        self._movable: set[str] | None = None
        self._footprints: dict[str, dict[int, int]] = {}
        self._gate_parked: set[str] = set()
        self._arriving: set[str] = set()
        # Pods parked while they worked (a sync's room): brought back by the gate.
        self._stopped: set[str] = set()
        # Per process in a busy phase: the phase and when it went in, and
        # whether it stops at safe points there (kept while it is parked).
        self._since: dict[Any, tuple[Phase, float]] = {}
        self._stoppable: set[Any] = set()

    # -- what the agent tells it -------------------------------------------------
    def set_gpus(self, gpus: Mapping[str, frozenset[int]]) -> None:
        """The GPUs each pod holds now (a pod not named holds none)."""
        self._gpus = dict(gpus)

    def set_cycles(self, cycles: Mapping[str, Cycle]) -> None:
        """The cycles pods declare now (a pod not named declares none)."""
        self._cycles = {pod: c for pod, c in cycles.items() if c[0] and c[1] > 0}

    def set_memory(
        self,
        held: Mapping[str, Footprint],
        capacity: Mapping[int, int],
        peaks: Mapping[str, int] | None = None,
        movable: Collection[str] | None = None,
    ) -> None:
        """What each pod resident on the GPUs holds now (GPU -> MiB; a pod not
        named holds nothing there: it is parked, gone or not loaded yet), each
        GPU's usable MiB, and the per-GPU MiB pods declare at their peak
        (``rlix.io/gpu-memory-mib``; a pod not named declares none). A pod
        going in, and every pod that works, may grow to its peak; one that does
        not work holds what it holds. ``movable``: the pods that can be parked
        (None: every pod). From the first call on, pods go in only where that
        fits (module docstring)."""
        self._capacity = dict(capacity)
        self._peaks = dict(peaks or {})
        self._movable = None if movable is None else set(movable)
        for pod, footprint in held.items():
            self._footprints[pod] = dict(footprint)
            self._arriving.discard(pod)  # the caller sees it back
        for pod in list(self._footprints):
            if pod in held or pod in self._gate_parked:
                continue
            if pod in self._arriving and pod in self._pods:
                continue  # brought back and working: its memory is on its way
            del self._footprints[pod]  # parked by someone else, or gone
            self._arriving.discard(pod)

    def peaks(self) -> dict[str, int]:
        """Pod -> the per-GPU MiB it declares at its peak, as last told (for status)."""
        return dict(sorted(self._peaks.items()))

    def gate_parked(self) -> list[str]:
        """Pods whose memory the gate had parked (or is parking) and will bring back."""
        return sorted(self._gate_parked)

    def footprint(self, pod: str) -> dict[int, int]:
        """What ``pod`` holds per GPU as the gate last saw it (or was told: ``adopt``)."""
        return dict(self._footprints.get(pod, {}))

    def adopt(self, pod: str, footprint: Footprint, now: float) -> None:
        """``pod``'s memory is parked and the gate is to bring it back, at its
        turn, into ``footprint`` (GPU -> MiB): the gate parked it before the
        agent restarted, or a resume the conductor wants was handed to the
        gate. If a process of it was busy when it was parked, it waits there
        mid-phase and asks nothing: it is stopped, and comes back by the
        gate's own move where it fits (else when it asks to go in)."""
        self._footprints[pod] = dict(footprint)
        self._gate_parked.add(pod)
        self._stop(pod, now)

    def release(self, pod: str) -> None:
        """``pod``'s memory is no longer the gate's to bring back: it was
        brought back some other way, or the pod is gone."""
        self._gate_parked.discard(pod)
        self._arriving.discard(pod)
        if pod in self._stopped:  # its processes work on, wherever it came back
            self._stopped.discard(pod)
            self._waiting.pop(_Comeback(pod), None)

    def enter(
        self,
        pod: str,
        process: P,
        phase: Phase,
        now: float,
        ticket: T,
        *,
        safe_points: bool = False,
        loading: bool = False,
    ) -> bool:
        """``process`` of ``pod`` is about to enter ``phase`` (ending the one it was in).

        True: it goes now. False: it waits, and ``ticket`` comes back from
        :meth:`admit` when it may go (also where it may go at once but only
        after memory moves, which the admission names). ``safe_points``: it
        stops at safe points inside ``phase``, so a sync may park it there.
        ``loading``: the weight sync is the pod's first allocation (its model
        load), which parks no pod that works: what a stop pays for is the
        sync's declared seconds, and a load's are not those.
        """
        self._forget_process(process, now)
        self._pod_of[process] = pod
        shape = shape_of(phase)
        if shape is Shape.NONE:
            return True  # idle: nothing to wait for, and it stops holding
        busy: Busy = (shape, 1.0)  # a cluster knows no pressure below full
        if self._works(pod) or self._goes_without_moves(pod, busy, phase, now, loading=loading):
            self._set_working(pod, process, busy, phase, now, safe_points=safe_points)
            return True
        self._waiting[process] = _Waiter(
            pod, process, busy, now, ticket, phase, safe_points, loading=loading
        )
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
            self._set_working(pod, process, (shape, 1.0), phase, now, safe_points=False)
            if pod in self._gate_parked and pod not in self._arriving:
                # Mid-phase while the gate holds its memory parked: it was
                # stopped (the agent restarted since, and adopted the park),
                # and waits there to be brought back.
                self._stop(pod, now)
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
            if waiter.pod == pod and not isinstance(process, _Comeback):
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
        """Pods parked while a process of theirs was busy (``restore_pod`` brings
        it back; for a pod the gate stopped, the gate's own comeback)."""
        return sorted(self._parked)

    def stopped(self) -> list[str]:
        """Pods the gate parked while they worked, to bring back itself."""
        return sorted(self._stopped)

    # -- what it answers ---------------------------------------------------------
    def admit(self, now: float) -> list[Admitted[T]]:
        """The waiters that may go now, longest wait first: those whose pod
        works already, those that gain by entering beside who works now
        (including the ones admitted before them), and those past their
        bound, each where its memory fits once the partners named in its
        admission are parked; first, any wait that ended since without a
        turn (its process asked again)."""
        out, self._ended = self._ended, []
        order = sorted(
            self._waiting.items(), key=lambda kv: (not isinstance(kv[0], _Comeback), kv[1].since)
        )
        for process, waiter in order:
            if process not in self._waiting:
                continue  # a comeback dropped by a stop made just before
            waited = now - waiter.since
            comeback = isinstance(process, _Comeback)
            works = self._works(waiter.pod)
            # A stopped pod is mid-phase: it goes back wherever it fits.
            goes = works or comeback or self._may_enter(waiter.pod, waiter.busy)
            if not goes and waited < self.max_wait_s:
                continue
            room = (
                Room()
                if works
                else self._room(waiter.pod, waiter.phase, now, loading=waiter.loading)
            )
            if room is None:
                waiter.held_by_memory = waited >= self.max_wait_s
                continue
            del self._waiting[process]
            restore = waiter.pod in self._gate_parked
            self._gate_parked.difference_update({waiter.pod})
            self._gate_parked.update(room.park)
            for stopped in room.park:
                self._stop(stopped, now)
            if restore:
                self._arriving.add(waiter.pod)
            if comeback:  # back in the phase it was stopped in
                self._stopped.discard(waiter.pod)
                self._pods.setdefault(waiter.pod, _Pod()).working.update(
                    self._parked.pop(waiter.pod, {})
                )
            else:
                phase = waiter.phase or Phase.IDLE
                self._set_working(
                    waiter.pod, process, waiter.busy, phase, now, safe_points=waiter.safe_points
                )
            out.append(
                Admitted(
                    waiter.ticket,
                    waited,
                    expired=not goes,
                    park=room.park,
                    restore=restore,
                    waiter=waiter,
                )
            )
        return out

    def requeue(self, admitted: Admitted[T], parked: Collection[str]) -> None:
        """The moves ``admitted`` named did not all happen: of its ``park``,
        only ``parked`` left the GPUs, and its own pod, if it was to come back,
        did not. It waits again, from when it first asked, and the gate counts
        memory where it is."""
        waiter = admitted.waiter
        assert waiter is not None, "only an admission made by admit() can be requeued"
        unmoved = set(admitted.park) - set(parked)
        self._gate_parked.difference_update(unmoved)
        for pod in unmoved & self._stopped:
            # It never left: it works on, not stopped again in this phase (it
            # did not reach a safe point in time; trying again would hold
            # the next sync as long).
            self._stopped.discard(pod)
            self._waiting.pop(_Comeback(pod), None)
            self._stoppable.difference_update(self._parked.get(pod, {}))
            self.restore_pod(pod)
        if admitted.restore:
            self._arriving.discard(waiter.pod)
            self._gate_parked.add(waiter.pod)
        if isinstance(waiter.process, _Comeback):  # still parked: it waits to come back
            self._stop(waiter.pod, waiter.since)
            return
        state = self._pods.get(waiter.pod)
        self._since.pop(waiter.process, None)
        self._stoppable.discard(waiter.process)
        if state is not None:
            state.working.pop(waiter.process, None)
            if not state.working:
                del self._pods[waiter.pod]
        waiter.held_by_memory = False
        self._pod_of[waiter.process] = waiter.pod
        self._waiting[waiter.process] = waiter

    def pods(self) -> list[str]:
        """Every pod that works or waits."""
        return sorted(set(self._pods) | {w.pod for w in self._waiting.values()})

    def next_deadline(self) -> float | None:
        """When the longest wait reaches its bound (None: nobody waits for
        one; a wait past its bound held for memory waits for room instead)."""
        sinces = [w.since for w in self._waiting.values() if not w.held_by_memory]
        return min(sinces) + self.max_wait_s if sinces else None

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
    def _set_working(
        self, pod: str, process: Any, busy: Busy, phase: Phase, now: float, *, safe_points: bool
    ) -> None:
        self._pods.setdefault(pod, _Pod()).working[process] = busy
        self._since[process] = (phase, now)
        if safe_points:
            self._stoppable.add(process)
        else:
            self._stoppable.discard(process)

    def _declared_s(self, pod: str, phase: Phase) -> float | None:
        """The seconds of ``phase`` in ``pod``'s declared cycle (None: it declares none)."""
        cycle = self._cycles.get(pod)
        if cycle is None:
            return None
        profile, iteration_s = cycle
        return sum(seg.share for seg in profile if seg.phase is phase) * iteration_s

    def _left_s(self, pod: str, now: float) -> float | None:
        """How long ``pod`` has left in the phases its processes work in, by its
        declared cycle (None: unknown)."""
        state = self._pods.get(pod)
        if state is None or not state.working:
            return None
        left = []
        for process in state.working:
            since = self._since.get(process)
            declared = None if since is None else self._declared_s(pod, since[0])
            if since is None or not declared:
                return None
            left.append(declared - (now - since[1]))
        return max(left)

    def _may_stop(self, pod: str, entrant: str, now: float) -> bool:
        """Whether ``entrant``'s sync may park ``pod``, which works: each of its
        working processes stops at safe points, and its phase has longer left
        than stopping it costs (``gate_room.worth_stopping``)."""
        state = self._pods.get(pod)
        if state is None or not state.working or not state.working.keys() <= self._stoppable:
            return False
        sync_s = self._declared_s(entrant, Phase.WEIGHT_SYNC) or 0.0
        held = max(self._at_peak(pod).values(), default=0)
        return worth_stopping(self._left_s(pod, now), sync_s, held)

    def _stop(self, pod: str, since: float) -> None:
        """``pod`` is parked (or being parked) by an admission: if it worked,
        it is stopped mid-phase, and waits, from ``since``, to come back."""
        state = self._pods.pop(pod, None)
        if state is not None and state.working:
            self._parked.setdefault(pod, {}).update(state.working)
        if pod not in self._parked:
            return  # it did not work: it comes back when it asks to go in
        self._stopped.add(pod)
        busy = next(iter(self._parked[pod].values()))
        key = _Comeback(pod)
        self._waiting[key] = _Waiter(pod, key, busy, since, None)

    def _goes_without_moves(
        self, pod: str, busy: Busy, phase: Phase, now: float, *, loading: bool
    ) -> bool:
        """It gains by entering, and its memory is on its GPUs with room beside
        the pods there (nothing to park, nothing to bring back)."""
        if not self._may_enter(pod, busy) or pod in self._gate_parked:
            return False
        return self._room(pod, phase, now, loading=loading) == Room()

    def _room(
        self, pod: str, phase: Phase | None, now: float, *, loading: bool = False
    ) -> Room | None:
        """What must be parked for ``pod`` to work (``gate_room``), entering
        ``phase``; Room() where memory is not known. It and the pods that work
        count at their peak (they may grow to it in their phase), also before
        their memory shows (a load just let in), and so do the stopped pods
        (their room is kept for them); the others at what they hold. A sync
        may park pods that work and stop at safe points (not a load:
        ``enter``'s ``loading``)."""
        if self._capacity is None:
            return Room()
        stopped = self._stopped - {pod}
        working = set(self._pods) | stopped
        need = {
            p: self._at_peak(p) if p == pod or p in working else dict(footprint)
            for p, footprint in self._footprints.items()
        }
        for p in working - need.keys():  # let in before its memory shows (a load under way)
            need[p] = self._at_peak(p)
        need[pod] = self._at_peak(pod)
        resident = (set(self._footprints) - self._gate_parked) | working
        interruptible: set[str] = set()
        if phase is not None and parks_working_for(phase) and not loading:
            interruptible = {p for p in self._pods if p != pod and self._may_stop(p, pod, now)}
        return room_for(
            pod,
            need,
            resident,
            working,
            self._capacity,
            movable=self._movable,
            interruptible=interruptible,
        )

    def _at_peak(self, pod: str) -> dict[int, int]:
        held = self._footprints.get(pod, {})
        peak = self._peaks.get(pod, 0)
        return {gpu: max(held.get(gpu, 0), peak) for gpu in self._gpus_of(pod)}

    def _gpus_of(self, pod: str) -> frozenset[int]:
        """The GPUs a pod holds memory on, or comes back to where it is parked."""
        return self._gpus.get(pod) or frozenset(self._footprints.get(pod, {}))

    def _may_enter(self, pod: str, busy: Busy) -> bool:
        """Whether entering adds progress on every GPU the pod shares with pods
        that work and that it takes turns with."""
        for gpu in self._gpus_of(pod):  # a parked pod's: those it comes back to
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
        self._since.pop(process, None)
        self._stoppable.discard(process)
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
                # Nothing left to bring back to its phase; its record goes its way.
                if pod in self._stopped:
                    self._stopped.discard(pod)
                    self._waiting.pop(_Comeback(pod), None)
        if pod not in self._pods:
            return
        working = self._pods[pod].working
        working.pop(process, None)
        if not working:
            del self._pods[pod]
