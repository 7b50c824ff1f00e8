"""The conductor's protocol with the node agents: what is asked, what was done.

The decider (the operator's conductor) and the node agent never talk to each
other directly; the API server is the only channel. The decider writes what it
wants on the pod (:data:`ANNOTATION_DESIRED`), the agent on the pod's node
carries it out and writes what happened (:data:`ANNOTATION_OBSERVED`) with the
same *generation*. Every write is a whole JSON document in one annotation, so a
reader never sees half of one, and each side's work is a pure function of what
both annotations say: either may restart at any point and converge.

* The decider bumps the generation on every change of mind; the agent acts on
  a desired generation it has not observed yet, and only then.
* The agent's own suspended-pod record, not the annotation, says whether a pod
  is parked: a suspend it finds already done is reported, never done twice.
* A suspend the agent could not finish is rolled back (the pod keeps its
  memory and runs on) and reported as :attr:`Outcome.ROLLED_BACK`.

Both ends import this module (they may not import each other); the names are
documented in docs/conductor.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from rlix.core.agent_protocol import SELF, TARGET_PLACES, Location
from rlix.core.names import GROUP

# On a Pod: what the conductor wants (JSON, DesiredSuspension.to_json).
ANNOTATION_DESIRED: Final = f"{GROUP}/desired-suspension"
# On a Pod: what the node agent did about it (JSON, ObservedSuspension.to_json).
ANNOTATION_OBSERVED: Final = f"{GROUP}/observed-suspension"
# On a Node: when its agent last published (RFC 3339). No fresh heartbeat, no
# suspension asked of that node: nobody would carry it out.
ANNOTATION_AGENT_HEARTBEAT: Final = f"{GROUP}/agent-heartbeat"
# On an RLJob: a person's request (`rlix suspend|resume rljob NAME`), JSON
# {"state": "suspended"|"running", "nonce": "..."}; the conductor turns it into
# desired state on the job's pods, or refuses it with an event and condition.
ANNOTATION_REQUEST: Final = f"{GROUP}/suspension-request"

# On every pod of a job with a rollout role (its elastic one, if declared):
# which of its replicas run (JSON, ActiveReplicas.to_json), written by the
# conductor; the node agent hands it to the pod's processes (the client's
# ``rlix.active_replicas()``), so the trainer routes work only to replicas that
# are not parked, and waits while none is.
ANNOTATION_ACTIVE_REPLICAS: Final = f"{GROUP}/active-replicas"

# RLJob condition type: True while some pod of the job is suspended (or being
# suspended); its reason and message say why, for whom and since when.
CONDITION_SUSPENDED: Final = "Suspended"

# A heartbeat older than this means the node's agent is down or cut off.
AGENT_STALE_S: Final = 60.0


class State(StrEnum):
    """Where a pod's device memory should be (desired) or is (observed)."""

    RUNNING = "running"  # on its GPUs, the pod runs
    SUSPENDED = "suspended"  # parked off its GPUs, the pod waits


class Reason(StrEnum):
    """Why the conductor suspends or resumes (event reasons, metric labels)."""

    MANUAL = "Manual"  # a person asked (rlix suspend|resume rljob)
    PRIORITY = "Priority"  # a higher-priority job (or a far smaller one of its class) needs it
    PHASE_OVERFLOW = "PhaseOverflow"  # a co-resident's phase would exceed physical HBM
    LEND = "Lend"  # an elastic rollout's replicas above its minimum lend their GPUs
    MEMORY_FREE = "MemoryFree"  # resume: its memory fits on its GPUs again
    AGED = "Aged"  # resume: suspended longer than the bound, it goes first


class Refusal(StrEnum):
    """Why a suspension was not asked for or not carried out."""

    NOT_PREEMPTIBLE = "NotPreemptible"  # the job says rlix.io/preemptible: "false"
    AGENT_DOWN = "AgentDown"  # no fresh heartbeat from the node's agent
    NOT_REGISTERED = "NoMemoryRegistered"  # no process of the pod registered memory
    NOT_PLACED = "NotPlaced"  # the pod is not bound to a node
    NOTHING_ELSE_WORKS = "EvictionFallback"  # parking cannot free enough: evict instead
    FREES_NOTHING = "ParkingFreesNothing"  # parked memory stays counted: nobody is parked


class Outcome(StrEnum):
    """What the agent reports for one generation."""

    SUSPENDED = "Suspended"
    RESUMED = "Resumed"
    ROLLED_BACK = "RolledBack"  # the suspend failed part-way; the pod runs on, whole
    REFUSED = "Refused"  # nothing was done (the error says why); the pod runs on
    FAILED = "Failed"  # a resume failed; the memory stays parked, retried


class SuspensionError(ValueError):
    """An annotation that is not in the documented shape (names it and the field)."""


@dataclass(frozen=True, slots=True)
class DesiredSuspension:
    """What the conductor wants for one pod; ``generation`` orders changes of mind."""

    generation: int
    state: State
    reason: str
    requester: str = ""  # the job it is done for ("ns/name"), or "user"
    target: Location = SELF
    since: str = ""  # RFC 3339, when this generation was decided
    nonce: str = ""  # the person's request it carries out, if any (SuspensionRequest)

    def to_json(self) -> str:
        doc = {
            "nonce": self.nonce,
            "generation": self.generation,
            "state": self.state.value,
            "reason": self.reason,
            "requester": self.requester,
            "target": str(self.target),
            "since": self.since,
        }
        return json.dumps(doc, separators=(",", ":"), sort_keys=True)

    @classmethod
    def parse(cls, raw: str) -> DesiredSuspension:
        doc = _object(ANNOTATION_DESIRED, raw)
        target = doc.get("target", str(SELF))
        try:
            location = Location.parse(target)
        except ValueError as exc:
            raise SuspensionError(f"{ANNOTATION_DESIRED}: 'target': {exc}") from None
        if location.place not in TARGET_PLACES:
            raise SuspensionError(f"{ANNOTATION_DESIRED}: 'target' {target!r} is not a target")
        return cls(
            generation=_generation(ANNOTATION_DESIRED, doc),
            state=_state(ANNOTATION_DESIRED, doc),
            reason=_text(ANNOTATION_DESIRED, doc, "reason"),
            requester=_text(ANNOTATION_DESIRED, doc, "requester"),
            target=location,
            since=_text(ANNOTATION_DESIRED, doc, "since"),
            nonce=_text(ANNOTATION_DESIRED, doc, "nonce"),
        )


@dataclass(frozen=True, slots=True)
class ObservedSuspension:
    """What the agent did about one desired generation."""

    generation: int
    state: State  # where the memory is now
    outcome: Outcome
    parked_bytes: int = 0
    error: str = ""
    at: str = ""  # RFC 3339

    def to_json(self) -> str:
        doc = {
            "generation": self.generation,
            "state": self.state.value,
            "outcome": self.outcome.value,
            "parkedBytes": self.parked_bytes,
            "error": self.error,
            "at": self.at,
        }
        return json.dumps(doc, separators=(",", ":"), sort_keys=True)

    def resumed_note(self) -> str:
        """What a resume report adds to "resumed": where it left memory parked,
        the node's phase gate took the resume (``--park-at-gate``), and the
        pod takes turns from now on."""
        if self.state is not State.RUNNING or not self.parked_bytes:
            return ""
        return f"; its {self.parked_bytes} parked bytes come back at its turn at the phase gate"

    @classmethod
    def parse(cls, raw: str) -> ObservedSuspension:
        doc = _object(ANNOTATION_OBSERVED, raw)
        try:
            outcome = Outcome(str(doc.get("outcome")))
        except ValueError:
            known = ", ".join(o.value for o in Outcome)
            raise SuspensionError(
                f"{ANNOTATION_OBSERVED}: 'outcome' must be one of {known}, got "
                f"{doc.get('outcome')!r}"
            ) from None
        parked = doc.get("parkedBytes", 0)
        if isinstance(parked, bool) or not isinstance(parked, int) or parked < 0:
            raise SuspensionError(
                f"{ANNOTATION_OBSERVED}: 'parkedBytes' must be a non-negative integer"
            )
        return cls(
            generation=_generation(ANNOTATION_OBSERVED, doc),
            state=_state(ANNOTATION_OBSERVED, doc),
            outcome=outcome,
            parked_bytes=parked,
            error=_text(ANNOTATION_OBSERVED, doc, "error"),
            at=_text(ANNOTATION_OBSERVED, doc, "at"),
        )


@dataclass(frozen=True, slots=True)
class SuspensionRequest:
    """A person's request on an RLJob; ``nonce`` tells a new request from an old one."""

    state: State
    nonce: str

    def to_json(self) -> str:
        return json.dumps({"state": self.state.value, "nonce": self.nonce}, sort_keys=True)

    @classmethod
    def parse(cls, raw: str) -> SuspensionRequest:
        doc = _object(ANNOTATION_REQUEST, raw)
        return cls(
            state=_state(ANNOTATION_REQUEST, doc), nonce=_text(ANNOTATION_REQUEST, doc, "nonce")
        )


@dataclass(frozen=True, slots=True)
class PodSuspension:
    """Both halves of the protocol as one pod carries them."""

    desired: DesiredSuspension | None
    observed: ObservedSuspension | None

    @classmethod
    def of(cls, annotations: Mapping[str, str]) -> PodSuspension:
        """Read a pod's annotations; a malformed half reads as absent (and is rewritten)."""
        desired = observed = None
        raw = annotations.get(ANNOTATION_DESIRED)
        if raw:
            try:
                desired = DesiredSuspension.parse(raw)
            except SuspensionError:
                desired = None
        raw = annotations.get(ANNOTATION_OBSERVED)
        if raw:
            try:
                observed = ObservedSuspension.parse(raw)
            except SuspensionError:
                observed = None
        return cls(desired, observed)

    @property
    def pending(self) -> bool:
        """The agent has not yet answered the latest desired generation."""
        if self.desired is None:
            return False
        return self.observed is None or self.observed.generation < self.desired.generation

    @property
    def suspended(self) -> bool:
        """Parked, or asked to be: the conductor counts its memory as freed.

        While the agent has not answered, the desired state counts (memory asked
        away is going, asked back is coming); once it has, what it observed does
        (a refused or rolled-back suspend left the pod running).
        """
        if self.desired is not None and self.pending:
            return self.desired.state is State.SUSPENDED
        return self.observed is not None and self.observed.state is State.SUSPENDED

    @property
    def active(self) -> bool:
        """Runs with its memory on its GPUs and is not being asked to park.

        What the trainer may route work to: a pod asked to park is inactive at
        once (it parks at its next safe point), a parked pod asked back only
        once the agent reports it resumed.
        """
        if self.suspended:
            return False
        observed = self.observed
        return not (self.pending and observed is not None and observed.state is State.SUSPENDED)

    @property
    def next_generation(self) -> int:
        seen = [s.generation for s in (self.desired, self.observed) if s is not None]
        return max(seen, default=0) + 1


@dataclass(frozen=True, slots=True)
class ActiveReplicas:
    """Which replicas of a job's rollout role run now (indices, as in the pod names).

    ``min_replicas`` is the elastic role's minimum; for a role that is not
    elastic it equals ``replicas`` (nothing is lent, the role parks whole).
    """

    role: str
    replicas: int
    min_replicas: int
    active: tuple[int, ...]
    suspended: tuple[int, ...]  # parked, being parked, or not yet back

    def to_json(self) -> str:
        doc = {
            "role": self.role,
            "replicas": self.replicas,
            "minReplicas": self.min_replicas,
            "active": list(self.active),
            "suspended": list(self.suspended),
        }
        return json.dumps(doc, separators=(",", ":"), sort_keys=True)

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.to_json())
        return doc

    @classmethod
    def parse(cls, raw: str) -> ActiveReplicas:
        return cls.from_doc(_object(ANNOTATION_ACTIVE_REPLICAS, raw))

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> ActiveReplicas:
        what = ANNOTATION_ACTIVE_REPLICAS
        counts = {}
        for field in ("replicas", "minReplicas"):
            value = doc.get(field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise SuspensionError(f"{what}: {field!r} must be a non-negative integer")
            counts[field] = value
        lists = {}
        for field in ("active", "suspended"):
            value = doc.get(field)
            if not isinstance(value, list) or not all(
                isinstance(i, int) and not isinstance(i, bool) and 0 <= i < counts["replicas"]
                for i in value
            ):
                raise SuspensionError(
                    f"{what}: {field!r} must be a list of replica indices below 'replicas'"
                )
            lists[field] = tuple(sorted(value))
        return cls(
            role=_text(what, doc, "role"),
            replicas=counts["replicas"],
            min_replicas=counts["minReplicas"],
            active=lists["active"],
            suspended=lists["suspended"],
        )


def _object(what: str, raw: str) -> dict[str, Any]:
    try:
        doc = json.loads(raw)
    except (TypeError, ValueError) as exc:
        raise SuspensionError(f"{what}: not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise SuspensionError(f"{what}: expected a JSON object, got {type(doc).__name__}")
    return doc


def _generation(what: str, doc: Mapping[str, Any]) -> int:
    value = doc.get("generation")
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**53:
        raise SuspensionError(f"{what}: 'generation' must be a positive integer, got {value!r}")
    return value


def _state(what: str, doc: Mapping[str, Any]) -> State:
    try:
        return State(str(doc.get("state")))
    except ValueError:
        raise SuspensionError(
            f"{what}: 'state' must be 'running' or 'suspended', got {doc.get('state')!r}"
        ) from None


def _text(what: str, doc: Mapping[str, Any], field: str) -> str:
    value = doc.get(field, "")
    if not isinstance(value, str):
        raise SuspensionError(f"{what}: {field!r} must be a string, got {value!r}")
    return value
