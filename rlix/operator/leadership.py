"""Leader election on a ``coordination.k8s.io`` Lease: one active operator among replicas.

Every replica watches (its store stays warm), but only the holder of the Lease
admits, creates pods and writes status, so ``operator.replicas > 1`` is a
standby, not a second decision maker. The admission ledger's fence already
keeps two admitters from promising the same GPUs; the Lease keeps them from
doing the rest of the work twice and from fighting over it.

Why the kubernetes client's ``leaderelection`` module: it is client-go's
algorithm (acquire, renew within ``renewDeadline``, a standby takes over
``leaseDuration`` after it last saw the Lease change), kept by the Kubernetes
authors, with a ``LeaseLock``. kopf's own peering is not a Lease (a KopfPeering
custom resource) and lets peers of the same priority all run; it also pauses
only kopf's handlers, while our work runs in a background task.

Fitting it to kopf's asyncio model: the module is blocking (``time.sleep``), so
it runs in a daemon thread and signals the event loop. Two gaps are closed
here: every Lease call gets a request timeout (a hung request must not stretch
the renew deadline past the lease), and transport errors are turned into the
``ApiException`` the module retries on (otherwise they would end its thread).
A leader that fails to renew exits the process at once, as client-go's
controllers do: it must stop acting before the standby's wait runs out, and the
kubelet restarts it as a candidate.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

log = logging.getLogger("rlix.operator")

DEFAULT_LEASE = "rlix-operator"
RELEASE_TIMEOUT_S = 3.0
RELEASE_ATTEMPTS = 3


def default_identity() -> str:
    """client-go's convention: the pod's hostname plus a random suffix (unique per run)."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class ElectionSettings:
    """Where the Lease lives and its timing (client-go's names and defaults)."""

    namespace: str
    name: str = DEFAULT_LEASE
    lease_duration_s: int = 15
    renew_deadline_s: int = 10
    retry_period_s: int = 2
    identity: str = field(default_factory=default_identity)

    @property
    def request_timeout_s(self) -> float:
        """Bound on one Lease call, so a leader notices loss before a standby takes over.

        A leader steps down at most ``renew_deadline + retry_period + 2 x timeout``
        after its last renewal (one try is a GET and a PUT); that must stay
        below ``lease_duration``, which ``errors`` checks.
        """
        slack = self.lease_duration_s - self.renew_deadline_s - self.retry_period_s
        return max(0.5, min(float(self.retry_period_s), slack / 2.5))

    def errors(self) -> list[str]:
        """What is wrong with the timing, naming the flags (the module would sys.exit)."""
        out = []
        if self.retry_period_s < 1:
            out.append("--leader-election-retry-period must be at least 1 second")
        if self.renew_deadline_s <= 1.2 * self.retry_period_s:
            out.append(
                "--leader-election-renew-deadline must exceed 1.2 x --leader-election-retry-period"
            )
        if self.lease_duration_s <= self.renew_deadline_s + self.retry_period_s:
            out.append(
                "--leader-election-lease-duration must exceed --leader-election-renew-deadline "
                "+ --leader-election-retry-period (a leader must notice it lost the lease "
                "before a standby may take it)"
            )
        return out


class _BoundedCalls:
    """The typed Lease API with a timeout on every call and transport errors as ApiException."""

    def __init__(self, api: Any, timeout_s: float, stopped: threading.Event) -> None:
        self._api = client.CoordinationV1Api(api)
        self._timeout_s = timeout_s
        self._stopped = stopped
        # Held for the length of each call: a release takes it after setting
        # ``stopped``, so a renewal already in flight lands before the release
        # reads the Lease (else the release's write conflicts and the Lease
        # stays held until it expires).
        self.in_flight = threading.Lock()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._api, name)

        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            with self.in_flight:
                if self._stopped.is_set():
                    # After a release no renewal may re-take the Lease.
                    raise ApiException(status=0, reason="leader election stopped")
                try:
                    return method(*args, _request_timeout=self._timeout_s, **kwargs)
                except ApiException:
                    raise
                except Exception as exc:  # urllib3 timeouts, refused connections
                    raise ApiException(status=0, reason=f"{type(exc).__name__}: {exc}") from exc

        return call


class Leadership:
    """Campaign for the Lease in a thread; ``leading`` is set while this process leads."""

    def __init__(
        self,
        settings: ElectionSettings,
        api: Any,
        *,
        on_lost: Callable[[], None] | None = None,
    ) -> None:
        self.settings = settings
        self._api = api
        self._stopped = threading.Event()
        self._on_lost = on_lost or _exit_lost
        self.leading = asyncio.Event()
        self.is_leader = False
        lock = LeaseLock(settings.name, settings.namespace, settings.identity)  # type: ignore[no-untyped-call]
        self._calls = _BoundedCalls(api, settings.request_timeout_s, self._stopped)
        lock.api_instance = self._calls  # type: ignore[assignment]
        self._lock = lock

    def start(self) -> None:
        """Start campaigning; call from the running event loop."""
        loop = asyncio.get_running_loop()

        def started() -> None:
            self.is_leader = True
            log.warning(
                "leading: holder of Lease %s/%s as %s",
                self.settings.namespace,
                self.settings.name,
                self.settings.identity,
            )
            loop.call_soon_threadsafe(self.leading.set)

        def stopped() -> None:
            if self._stopped.is_set():
                return  # released on shutdown: nothing was lost
            self.is_leader = False
            self._on_lost()

        config = electionconfig.Config(  # type: ignore[no-untyped-call]
            self._lock,
            lease_duration=self.settings.lease_duration_s,
            renew_deadline=self.settings.renew_deadline_s,
            retry_period=self.settings.retry_period_s,
            onstarted_leading=started,
            onstopped_leading=stopped,
        )
        # The module logs every standby retry at INFO; our own lines say what matters.
        logging.getLogger("leaderelection").setLevel(logging.WARNING)
        threading.Thread(
            target=self._campaign, args=(config, stopped), name="leader-election", daemon=True
        ).start()

    def _campaign(self, config: Any, stopped: Callable[[], None]) -> None:
        while not self._stopped.is_set():
            try:
                # Returns only after this leader failed to renew (``stopped`` ran).
                election = leaderelection.LeaderElection(config)  # type: ignore[no-untyped-call]
                election.run()  # type: ignore[no-untyped-call]
                return
            except Exception:
                log.exception("leader election failed")
                if self.is_leader:
                    stopped()
                    return
            self._stopped.wait(self.settings.retry_period_s)  # a candidate tries again

    def release(self) -> None:
        """On shutdown: stop renewing and clear the holder, so a standby need not wait.

        Fenced on the resourceVersion read: a Lease someone else took meanwhile
        is left alone. A renewal in flight is waited for first, and a conflict
        re-read, so the release does not lose a race with our own renewal.
        """
        self._stopped.set()
        with self._calls.in_flight:  # no renewal runs from here on
            if not self.is_leader:
                return
            self.is_leader = False
        api = client.CoordinationV1Api(self._api)
        # Not the renewal's tight bound: shutting down, a slow answer is still
        # worth waiting for (the process's grace period is the limit).
        timeout = max(RELEASE_TIMEOUT_S, self.settings.request_timeout_s)
        for _ in range(RELEASE_ATTEMPTS):
            try:
                lease = api.read_namespaced_lease(
                    self.settings.name, self.settings.namespace, _request_timeout=timeout
                )
                if lease.spec is None or lease.spec.holder_identity != self.settings.identity:
                    return
                lease.spec.holder_identity = None
                # A standby reads an empty holder as free at once; the renew
                # time says when it was let go.
                lease.spec.renew_time = datetime.now(UTC)
                api.replace_namespaced_lease(
                    self.settings.name, self.settings.namespace, lease, _request_timeout=timeout
                )
                log.warning("released Lease %s/%s", self.settings.namespace, self.settings.name)
                return
            except Exception as exc:  # shutting down: at worst the lease simply expires
                log.warning("could not release Lease %s: %s", self.settings.name, exc)


def _exit_lost() -> None:
    log.critical("lost the leader Lease; exiting so no second leader acts (restart to rejoin)")
    logging.shutdown()
    os._exit(1)
