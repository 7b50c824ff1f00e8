"""kopf wiring: watch events into the store, the loop's lifetime, operator settings.

Handlers are registered on a registry the caller owns (not kopf's global one),
so importing this module has no side effects and tests can build operators.
Only ``on.event`` handlers watch: they need no finalizers and no progress
annotations, so the RLJob object carries nothing but its spec and our status.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from rlix.core import names
from rlix.core.validation import Capacity
from rlix.operator import webhook
from rlix.operator.admitting import Admitter
from rlix.operator.conducting import Conductor
from rlix.operator.dry_runs import template_errors
from rlix.operator.leadership import Leadership
from rlix.operator.loop import run_loop
from rlix.operator.reconciling import Reconciler
from rlix.operator.snapshots import build_snapshot
from rlix.operator.store import Store, job_key, uid_of


@dataclass
class Options:
    webhook_server: kopf.WebhookServer | None = None
    # Writes the webhook configuration (ours, not kopf's: see rlix.operator.webhook).
    register_webhook: Callable[[], Awaitable[None]] | None = None
    # A watch that receives nothing for server_timeout is re-established; the
    # client timeout catches connections the server side silently dropped.
    watch_server_timeout_s: int = 120
    watch_client_timeout_s: int = 150
    watch_connect_timeout_s: int = 10


@dataclass
class Runtime:
    store: Store
    admitter: Admitter
    reconciler: Reconciler
    options: Options
    # None: no election, this process is the only operator (local runs, tests).
    leadership: Leadership | None = None
    conductor: Conductor | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def lead(self) -> None:
        """The work loop, once this replica leads; until then it only watches."""
        metrics = self.admitter.metrics
        if self.leadership is not None:
            metrics.leader.set(0)
            self.leadership.start()
            await self.leadership.leading.wait()
        metrics.leader.set(1)
        await run_loop(self.store, self.admitter, self.reconciler, conductor=self.conductor)

    def capacity(self) -> Capacity | None:
        return Capacity.of(build_snapshot(self.store.nodes.values(), ()))

    async def dry_run(self, manifest: Mapping[str, Any]) -> list[str]:
        """The API server's verdict on the manifest's pod templates (webhook)."""
        reconciler = self.reconciler
        return await template_errors(
            reconciler.kube,
            manifest,
            agent_socket_dir=reconciler.agent_socket_dir,
            scheduler_name=reconciler.scheduler_name,
        )


def build_registry(runtime: Runtime) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    store = runtime.store

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        # kopf's own kubeconfig reader: no dependency on the client's config code.
        return kopf.login_with_kubeconfig(**kwargs) or kopf.login_with_service_account(**kwargs)

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        options = runtime.options
        settings.watching.server_timeout = options.watch_server_timeout_s
        settings.watching.client_timeout = options.watch_client_timeout_s
        settings.watching.connect_timeout = options.watch_connect_timeout_s
        settings.posting.level = logging.WARNING
        if options.webhook_server is not None:
            settings.admission.server = options.webhook_server
        if options.register_webhook is not None:
            await options.register_webhook()
        runtime.tasks.append(asyncio.create_task(runtime.lead()))

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_: Any) -> None:
        for task in runtime.tasks:
            task.cancel()
        await asyncio.gather(*runtime.tasks, return_exceptions=True)
        if runtime.leadership is not None:
            # The loop is stopped: hand the Lease over now rather than after it expires.
            await asyncio.to_thread(runtime.leadership.release)

    @kopf.on.event(names.GROUP, names.VERSION, names.PLURAL, registry=registry)
    async def rljob_event(event: kopf.RawEvent, **_: Any) -> None:
        body = event["object"]
        if event["type"] == "DELETED":
            store.drop_job(job_key(body), uid=uid_of(body))
        else:
            store.put_job(dict(body))

    @kopf.on.event("", "v1", "pods", labels={names.LABEL_JOB: kopf.PRESENT}, registry=registry)
    async def pod_event(event: kopf.RawEvent, **_: Any) -> None:
        if event["type"] == "DELETED":
            store.drop_pod(event["object"])
        else:
            store.put_pod(dict(event["object"]))

    @kopf.on.event("", "v1", "nodes", registry=registry)
    async def node_event(event: kopf.RawEvent, **_: Any) -> None:
        body = event["object"]
        if event["type"] == "DELETED":
            store.drop_node(body["metadata"]["name"], uid=uid_of(body))
        else:
            store.put_node(dict(body))

    if runtime.options.webhook_server is not None:
        webhook.register(registry, runtime.capacity, runtime.dry_run)
    return registry
