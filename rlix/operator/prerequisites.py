"""What a job's pods need before they are created: its headless Service and PriorityClass.

Both are created if absent, with deterministic names, so repeating the step
after a crash is harmless (409 is success). The Service is the job's only if
its controller ownerReference carries the job's UID, as for pods: one left by
an earlier job of the same name is deleted and made again, and one that no
RLJob controls (a user's own Service of that name) is a conflict a person must
resolve, reported on the job (an orphaned one that still carries the job's
label is stale too). PriorityClasses are shared by every job of one
priority and never deleted (a handful of small cluster-scoped objects).

What is known to exist is remembered per job UID and per priority; losing that
memory (a restart) only costs one create call that answers 409.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlix.core import names
from rlix.core.rljob import RLJob
from rlix.operator.kube import Kube, KubeError
from rlix.operator.peers import build_service, service_name
from rlix.operator.pods import build_priority_class
from rlix.operator.recording import Recorder
from rlix.operator.store import Body

# Refusals no retry can change: the job fails and its admission is released.
PERMANENT = (400, 422)


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a job's objects could not be created, in the words the job's status uses."""

    reason: str
    message: str
    permanent: bool

    @classmethod
    def of(cls, error: KubeError, what: str, reason: str) -> Refusal:
        """The API server's own message (it names the field, quota or policy)."""
        return cls(
            reason=reason,
            message=f"the API server refused {what} (HTTP {error.status}): {error.message}",
            permanent=error.status in PERMANENT,
        )


def controlled_by(body: Body, uid: str) -> bool:
    """Whether ``uid`` is the object's controller (a name match alone proves nothing)."""
    refs = body.get("metadata", {}).get("ownerReferences") or []
    return any(r.get("controller") and r.get("uid") == uid for r in refs)


def _stale(body: Body, job: str) -> bool:
    """A Service an earlier job of this name left: controlled by an RLJob, or orphaned.

    ``kubectl delete rlj --cascade=orphan`` strips the ownerReference and
    leaves the job's label; a Service with neither is somebody else's.
    """
    meta = body.get("metadata", {})
    refs = [r for r in meta.get("ownerReferences") or [] if r.get("controller")]
    if not refs:
        return bool((meta.get("labels") or {}).get(names.LABEL_JOB) == job)
    return any(
        r.get("kind") == names.KIND and r.get("apiVersion") == names.API_VERSION for r in refs
    )


@dataclass
class Prerequisites:
    kube: Kube
    recorder: Recorder
    _services: set[str] = field(default_factory=set)  # job uids whose Service exists
    _classes: set[int] = field(default_factory=set)  # priorities whose class exists

    async def ensure(self, job: RLJob) -> Refusal | None:
        """Make both exist; a refusal (4xx) to report on the job, else None.

        None also when the Service is not there yet (a stale one being
        replaced): pods can be created meanwhile, and the next pass retries.
        """
        try:
            await self._priority_class(job.spec.priority)
        except KubeError as exc:
            if 400 <= exc.status < 500:
                return Refusal.of(exc, "the job's PriorityClass", "PriorityClassRejected")
            raise
        try:
            return await self._service(job)
        except KubeError as exc:
            if 400 <= exc.status < 500:
                return Refusal.of(exc, "the job's headless Service", "ServiceRejected")
            raise

    def forget(self, uid: str) -> None:
        self._services.discard(uid)

    async def _priority_class(self, priority: int) -> None:
        if priority in self._classes:
            return
        await self.kube.create_priority_class(build_priority_class(priority))
        self._classes.add(priority)

    async def _service(self, job: RLJob) -> Refusal | None:
        uid = str(job.metadata.get("uid", ""))
        if uid in self._services:
            return None
        if await self.kube.create_service(build_service(job, owner_uid=uid)):
            self._services.add(uid)
            return None
        name = service_name(job)
        found = await self.kube.get_service(job.namespace, name)
        if found is None:
            return None  # deleted between the two calls: created on the next pass
        if controlled_by(found, uid):
            self._services.add(uid)
            return None
        if _stale(found, job.name):
            await self.kube.delete_service(job.namespace, name)
            await self.recorder.event(
                job.key,
                "Warning",
                "StaleServiceReplaced",
                f"service {name} belongs to an earlier job of this name; deleted, to be recreated",
            )
            return None
        return Refusal(
            reason="ServiceConflict",
            message=f"service {name} exists and is not this job's: the job needs a headless "
            "Service of its own name for its pods' hostnames; rename the job or delete "
            "the service",
            permanent=True,
        )
