"""Pure aggregation of role pods into RLJob status.

The node agent writes each pod's ``rlix.io/phase`` and ``rlix.io/phase-since``;
this module folds them into per-role phases, the job's phase (its trainer's),
an iteration count and the time spent in each phase. It takes the previous
status and ``now`` as arguments, so an operator restarted mid-run continues the
counts from what it wrote last instead of starting again from zero.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rlix.core import names
from rlix.core.phases import ITERATION_ORDER, Phase
from rlix.core.rljob import (
    Condition,
    ConditionStatus,
    JobState,
    RLJobSpec,
    RLJobStatus,
    RoleKind,
    RoleStatus,
)
from rlix.core.times import parse_rfc3339

_PHASE_RANK = {p: i for i, p in enumerate((*ITERATION_ORDER, Phase.IDLE))}


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_time(raw: object) -> datetime | None:
    return parse_rfc3339(raw)


@dataclass(frozen=True, slots=True)
class PodView:
    """What status aggregation needs from one role pod."""

    name: str
    role: str
    pod_phase: str  # Pending / Running / Succeeded / Failed
    node: str | None
    ready: bool
    phase: Phase | None
    phase_since: datetime | None
    # Times its process left training, as its node agent counted (None: not said).
    iterations: int | None = None
    # A process of it waits its turn at its node's phase gate (rlix.io/waiting-for-turn).
    waiting: bool = False

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> PodView:
        meta = body.get("metadata", {})
        notes = meta.get("annotations") or {}
        status = body.get("status") or {}
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        return cls(
            name=str(meta.get("name", "")),
            role=str((meta.get("labels") or {}).get(names.LABEL_ROLE, "")),
            pod_phase=str(status.get("phase", "Pending")),
            node=(body.get("spec") or {}).get("nodeName") or None,
            ready=ready,
            phase=Phase.parse(notes.get(names.ANNOTATION_PHASE)),
            phase_since=parse_time(notes.get(names.ANNOTATION_PHASE_SINCE)),
            iterations=_count(notes.get(names.ANNOTATION_ITERATIONS)),
            waiting=Phase.parse(notes.get(names.ANNOTATION_WAITING_FOR_TURN)) is not None,
        )


def _count(text: str | None) -> int | None:
    """A non-negative count from an annotation (None: absent or not a count)."""
    if text is None or not text.isdigit():
        return None
    return int(text)


def role_phase(pods: Sequence[PodView]) -> Phase | None:
    """The phase most of the role's pods are in; ties go to the earlier phase."""
    counts = Counter(p.phase for p in pods if p.phase is not None)
    if not counts:
        return None
    return min(counts, key=lambda ph: (-counts[ph], _PHASE_RANK[ph]))


def _trainer_pods(spec: RLJobSpec, pods: Sequence[PodView]) -> list[PodView]:
    trainers = {r.name for r in spec.roles if r.kind is RoleKind.TRAINER}
    return [p for p in pods if p.role in trainers]


def observe(
    previous: RLJobStatus, spec: RLJobSpec, pods: Sequence[PodView], now: datetime
) -> RLJobStatus:
    """Fold the pods into ``previous``: roles, phase, iterations, phase seconds."""
    roles = []
    for role in spec.roles:
        mine = [p for p in pods if p.role == role.name]
        old = next((r for r in previous.roles if r.name == role.name), None)
        roles.append(
            RoleStatus(
                name=role.name,
                phase=role_phase(mine),
                replicas=role.replicas,
                bound=sum(1 for p in mine if p.node),
                ready=sum(1 for p in mine if p.ready),
                restarts=old.restarts if old else 0,
                waiting=sum(1 for p in mine if p.waiting),
            )
        )
    trainers = _trainer_pods(spec, pods)
    phase = role_phase(trainers)
    update: dict[str, Any] = {
        "roles": roles,
        "gpus": spec.gpus,
        "waiting_for_turn": sum(r.waiting for r in roles),
    }
    if phase is not None and phase != previous.phase:
        stamps = [p.phase_since for p in trainers if p.phase == phase and p.phase_since]
        since = max(stamps, default=now)
        seconds = dict(previous.phase_seconds)
        last = parse_time(previous.phase_since)
        if previous.phase is not None and last is not None:
            spent = max(0.0, (since - last).total_seconds())
            key = previous.phase.value
            seconds[key] = round(seconds.get(key, 0.0) + spent, 3)
        if previous.phase is Phase.TRAINING:
            # An iteration ends when the trainer leaves training: the one phase
            # every RL loop (PPO, GRPO, DPO-style) passes through exactly once.
            update["iterations"] = previous.iterations + 1
        update.update(phase=phase, phase_since=rfc3339(since), phase_seconds=seconds)
    # The agents' counts catch a training phase that came and went between two
    # looks (publications merge, reconciles can lag); they restart with an
    # agent, so they only ever raise the count, by the slowest trainer's.
    counted = [p.iterations for p in trainers if p.iterations is not None]
    if counted and min(counted) > update.get("iterations", previous.iterations):
        update["iterations"] = min(counted)
    return previous.model_copy(update=update)


def running_state(desired: int, pods: Sequence[PodView]) -> JobState:
    """Admitted until every desired pod is running, then Running."""
    running = sum(1 for p in pods if p.pod_phase == "Running")
    return JobState.RUNNING if desired and running >= desired else JobState.ADMITTED


def with_condition(
    status: RLJobStatus,
    type_: str,
    value: ConditionStatus,
    reason: str,
    message: str,
    *,
    now: datetime,
    generation: int | None,
) -> RLJobStatus:
    """Set one condition, keeping lastTransitionTime unless its status flips.

    Its reason becomes the job's ``status.reason`` (the printer column): the
    condition written last is the one that says why the job is as it is.
    """
    old = status.condition(type_)
    changed = old is None or old.status != value
    condition = Condition(
        type=type_,
        status=value,
        reason=reason,
        message=message,
        last_transition_time=rfc3339(now) if changed or old is None else old.last_transition_time,
        observed_generation=generation,
    )
    others = [c for c in status.conditions if c.type != type_]
    return status.model_copy(update={"conditions": [*others, condition], "reason": reason})


def status_body(status: RLJobStatus) -> dict[str, Any]:
    """The JSON the status subresource stores."""
    return status.model_dump(by_alias=True, exclude_none=True, mode="json")


def same_ignoring_times(a: RLJobStatus, b: RLJobStatus) -> bool:
    """Whether writing ``b`` over ``a`` would change anything a reader cares about."""

    def strip(s: RLJobStatus) -> dict[str, Any]:
        body = status_body(s)
        for c in body.get("conditions", []):
            c.pop("lastTransitionTime", None)
        return body

    return strip(a) == strip(b)
