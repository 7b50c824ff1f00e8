"""The FastAPI application: routes, timing and framing around ``handlers``.

Bodies are read as raw bytes and answers written as ready JSON bytes: FastAPI's
model validation and ``jsonable_encoder`` cost more than the policy itself for
a 5,000-name request, and the wire format is checked by ``rlix.extender.wire``.
The verbs are answered by a bare ASGI layer (``_Verbs``) in front of FastAPI,
on the event loop thread, one at a time, so the memoising view needs no lock.

``freeze_gc``: the cache holds hundreds of thousands of long-lived objects, and
CPython's full garbage collection walks all of them; measured, that turned a
4 ms p50 into a 160 ms p99. The service therefore moves everything alive into
the permanent generation (``gc.freeze``) whenever the cache view was rebuilt,
so collections only walk what the current request allocated. The cache holds
no reference cycles, so reference counting still frees what it drops.
"""

from __future__ import annotations

import gc
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.types import ASGIApp, Receive, Scope, Send

from rlix.core.policy.placement import PlacementView, snapshot_to_doc
from rlix.core.policy.placement.documents import rules_to_doc
from rlix.extender.cache import ClusterCache
from rlix.extender.handlers import Answer, do_filter, do_preempt, do_prioritize, refusal
from rlix.extender.metrics import ExtenderMetrics
from rlix.extender.wire import MAX_BODY_BYTES, encode_priority_list

JSON = "application/json"
log = logging.getLogger("rlix.extender.app")


async def _body(receive: Receive) -> bytes | None:
    """The body, read no further than one byte past the limit ``wire`` refuses;
    None when the client went away before sending it all."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_BODY_BYTES or not message.get("more_body", False):
            return b"".join(chunks)


async def _send(send: Send, status: int, payload: bytes, extra: list[tuple[bytes, bytes]]) -> None:
    headers = [(b"content-type", JSON.encode()), (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + extra})
    await send({"type": "http.response.body", "body": payload})


class _Verbs:
    """The scheduler's verbs as a bare ASGI layer in front of FastAPI.

    kube-scheduler waits for two of these calls per pod, on the same CPUs as
    everything else; FastAPI's routing, middleware stack and request objects
    cost about as much CPU as the policy's answer itself (measured with a
    1,000-node cluster), so POSTs to the verbs are answered here and every
    other path (health, metrics, debug) goes on to FastAPI.
    """

    def __init__(self, app: ASGIApp, verbs: dict[str, Callable[[bytes], tuple[int, bytes]]]):
        self.app = app
        self.verbs = verbs

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        verb = self.verbs.get(scope["path"]) if scope["type"] == "http" else None
        if verb is None:
            await self.app(scope, receive, send)
        elif scope["method"] != "POST":
            detail = json.dumps({"detail": "Method Not Allowed"}).encode()
            await _send(send, 405, detail, [(b"allow", b"POST")])
        else:
            body = await _body(receive)
            if body is not None:
                status, payload = verb(body)
                await _send(send, status, payload, [])


def _json(status: int, body: Any) -> Response:
    return Response(
        content=json.dumps(body, separators=(",", ":")), status_code=status, media_type=JSON
    )


def create_app(
    cache: ClusterCache, metrics: ExtenderMetrics | None = None, *, freeze_gc: bool = False
) -> FastAPI:
    """Build the app around ``cache`` (fed by a watcher, or by tests directly)."""
    metrics = metrics or ExtenderMetrics()
    last_view: list[PlacementView | None] = [None]

    def current_view() -> PlacementView:
        view = cache.view()
        if freeze_gc and view is not last_view[0]:
            last_view[0] = view
            gc.freeze()
        return view

    app = FastAPI(title="rlix-extender", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.cache = cache
    app.state.metrics = metrics

    def serve(
        verb: str, body: bytes, run: Callable[[PlacementView, bytes], Answer]
    ) -> tuple[int, bytes]:
        start = time.perf_counter()
        try:
            answer = run(current_view(), body)
        except Exception as exc:  # last line of defence: still the protocol's answer
            log.exception("%s failed", verb)
            answer = refusal(verb, f"rlix extender could not handle {verb}: {exc!r}", "internal")
        if answer.error:
            log.info("%s answered %s: %s", verb, answer.outcome, answer.error[:500])
        if verb == "prioritize":  # always wire.priority_list's shape
            payload = encode_priority_list(answer.body)
        else:
            payload = json.dumps(answer.body, separators=(",", ":")).encode()
        metrics.latency.labels(verb).observe(time.perf_counter() - start)
        metrics.requests.labels(verb, answer.outcome).inc()
        return answer.status, payload

    app.add_middleware(
        _Verbs,
        verbs={
            "/filter": lambda body: serve(
                "filter", body, lambda view, b: do_filter(view, b, cache.awaited_victims)
            ),
            "/prioritize": lambda body: serve("prioritize", body, do_prioritize),
            "/preempt": lambda body: serve(
                "preempt",
                body,
                lambda view, b: do_preempt(
                    view, b, cache.name_of_uid, cache.uid_of, cache.expect_deleted
                ),
            ),
        },
    )

    @app.get("/healthz")
    async def healthz() -> Response:
        return _json(200, {"status": "ok"})

    @app.get("/readyz")
    async def readyz() -> Response:
        if cache.ready:
            return _json(200, {"status": "ready"})
        return _json(503, {"status": "waiting for the first node and pod lists"})

    @app.get("/metrics")
    async def metrics_endpoint() -> Response:
        nodes, pods = cache.counts()
        metrics.nodes.set(nodes)
        metrics.pods.set(pods)
        errors = cache.object_errors()
        for kind in ("Pod", "Node"):
            metrics.objects_with_errors.labels(kind).set(
                sum(1 for key in errors if key.startswith(f"{kind} "))
            )
        metrics.rejected_objects.set(cache.rejected_objects)
        return Response(content=generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/debug/snapshot")
    async def debug_snapshot() -> Response:
        doc = snapshot_to_doc(cache.view().snapshot)
        doc["sharingRules"] = rules_to_doc(cache.rules)
        doc["uids"] = cache.uids()
        doc["objectErrors"] = {key: list(errors) for key, errors in cache.object_errors().items()}
        doc["claims"] = {
            key: {"node": a.node, "gpus": list(a.gpus), "consumedMiB": list(a.consumed_mib)}
            for key, a in sorted(cache.allocations().items())
        }
        return _json(200, doc)

    return app
