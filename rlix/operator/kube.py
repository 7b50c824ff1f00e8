"""The operator's only door to the API server: a few typed, idempotent calls.

kopf watches; everything the operator *writes* goes through here. Calls run the
official (blocking) client on a bounded thread pool so a slow API server delays
reconciliation instead of the watch loops. Each call is safe to repeat, which is
what makes the operator restart-safe: create treats 409 as done, delete treats
404 as done, and status patches are whole-status merge patches.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import os
import urllib.parse
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from kubernetes import client, config

from rlix.core import names
from rlix.operator import ledger
from rlix.operator.ledger import Entry, Ledger

COMPONENT = "rlix-operator"
# (connect, read) seconds for every call. The operator's one loop awaits each
# call (``loop.run_loop``), so a response that never comes would stop every
# admission and reconcile for good, with nothing logged. The API server answers
# or gives up (its --request-timeout, 60 s by default) well inside the read
# timeout; a call cut off raises, its pass is logged as failed and retried.
REQUEST_TIMEOUT_S = (10.0, 90.0)


def api_client(kubeconfig: str | None = None, *, pool: int = 16) -> Any:
    """A client for in-cluster use or for the kubeconfig the operator was given."""
    if kubeconfig is None and "KUBERNETES_SERVICE_HOST" in os.environ:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
        configuration = client.Configuration.get_default_copy()
    else:
        configuration = client.Configuration()
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, client_configuration=configuration
        )
    # One HTTP connection per worker thread; the default (4) logs "pool full".
    configuration.connection_pool_maxsize = pool
    return client.ApiClient(configuration)


class KubeError(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:500]}")
        self.status = status
        self.message = _status_message(body) or body[:500]


def _status_message(body: str) -> str:
    """The ``message`` of a metav1.Status body: the sentence naming field or quota."""
    try:
        found = json.loads(body)
    except ValueError:
        return ""
    return str(found.get("message", "")) if isinstance(found, dict) else ""


class Kube:
    """Raw JSON requests through the official client's transport and auth.

    The generated typed methods (kubernetes>=35) validate and deserialize every
    body into pydantic models; at a thousand jobs that costs more than the
    request, and the operator already has the objects as plain JSON.
    """

    def __init__(
        self,
        api: Any,
        *,
        workers: int = 16,
        request_timeout_s: tuple[float, float] = REQUEST_TIMEOUT_S,
    ) -> None:
        self._api = api
        self._request_timeout_s = request_timeout_s
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kube")
        self._serial = itertools.count()

    def _request_sync(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> Any:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        params = self._api.param_serialize(
            method=method,
            resource_path=path,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self._api.call_api(*params, _request_timeout=self._request_timeout_s)
        data = response.read()
        if not 200 <= response.status < 300:
            raise KubeError(response.status, data.decode(errors="replace") if data else "")
        return json.loads(data) if data else None

    async def _request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> Any:
        loop = asyncio.get_running_loop()
        call = functools.partial(self._request_sync, method, path, body, content_type)
        return await loop.run_in_executor(self._pool, call)

    async def create(self, path: str, body: Mapping[str, Any]) -> bool:
        """POST ``body`` to the collection ``path``; False when the name already exists.

        Any other refusal (422 invalid, 403 quota or policy) raises ``KubeError``
        for the reconciler to report on the job.
        """
        try:
            await self._request("POST", path, dict(body))
        except KubeError as exc:
            if exc.status == 409:
                return False
            raise
        return True

    async def delete(self, path: str) -> None:
        """DELETE one object now; already gone is done."""
        try:
            await self._request("DELETE", path, {"gracePeriodSeconds": 0})
        except KubeError as exc:
            if exc.status != 404:
                raise

    async def create_pod(self, body: Mapping[str, Any]) -> bool:
        """Create the pod; False when it already exists (a restart re-creating it)."""
        namespace = body["metadata"]["namespace"]
        return await self.create(f"/api/v1/namespaces/{namespace}/pods", body)

    async def delete_pod(self, namespace: str, name: str) -> None:
        await self.delete(f"/api/v1/namespaces/{namespace}/pods/{name}")

    async def create_service(self, body: Mapping[str, Any]) -> bool:
        namespace = body["metadata"]["namespace"]
        return await self.create(f"/api/v1/namespaces/{namespace}/services", body)

    async def get_service(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self.get(f"/api/v1/namespaces/{namespace}/services/{name}")

    async def delete_service(self, namespace: str, name: str) -> None:
        await self.delete(f"/api/v1/namespaces/{namespace}/services/{name}")

    async def create_priority_class(self, body: Mapping[str, Any]) -> bool:
        return await self.create("/apis/scheduling.k8s.io/v1/priorityclasses", body)

    async def patch_status(
        self, namespace: str, name: str, status: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """Merge-patch ``.status``; the stored object, or None when the job is gone."""
        path = (
            f"/apis/{names.GROUP}/{names.VERSION}/namespaces/{namespace}/"
            f"{names.PLURAL}/{name}/status"
        )
        try:
            result = await self._request(
                "PATCH", path, {"status": dict(status)}, "application/merge-patch+json"
            )
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
        return result if isinstance(result, dict) else None

    async def patch_pod_annotations(
        self, namespace: str, name: str, annotations: Mapping[str, str | None]
    ) -> dict[str, Any] | None:
        """Merge-patch a pod's annotations; the stored pod, or None when it is gone."""
        body = {"metadata": {"annotations": dict(annotations)}}
        try:
            result = await self._request(
                "PATCH",
                f"/api/v1/namespaces/{namespace}/pods/{name}",
                body,
                "application/merge-patch+json",
            )
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
        return result if isinstance(result, dict) else None

    async def event(
        self, job: Mapping[str, Any], kind: str, reason: str, message: str, now: datetime
    ) -> None:
        """Record a core/v1 Event on the job, the thing `kubectl describe` lists."""
        meta = job["metadata"]
        stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "metadata": {
                "name": f"{meta['name']}.{int(now.timestamp() * 1e6):x}{next(self._serial)}",
                "namespace": meta["namespace"],
            },
            "involvedObject": {
                "apiVersion": names.API_VERSION,
                "kind": names.KIND,
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
            },
            "type": kind,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            await self._request("POST", f"/api/v1/namespaces/{meta['namespace']}/events", body)
        except KubeError as exc:
            # An event is a courtesy: losing one (namespace terminating) must
            # never stop reconciliation.
            if exc.status not in (403, 404, 409, 422):
                raise

    async def get(self, path: str) -> dict[str, Any] | None:
        """GET one object (or list); None on 404."""
        try:
            result = await self._request("GET", path)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
        return result if isinstance(result, dict) else None

    async def get_rljob(self, namespace: str, name: str) -> dict[str, Any] | None:
        path = f"/apis/{names.GROUP}/{names.VERSION}/namespaces/{namespace}/{names.PLURAL}/{name}"
        return await self.get(path)

    async def read_ledger(self, namespace: str) -> Ledger:
        found = await self.get(f"/api/v1/namespaces/{namespace}/configmaps/{ledger.NAME}")
        if found is None:
            return Ledger(None)
        data = found.get("data") or {}
        return Ledger(
            found["metadata"]["resourceVersion"], ledger.decode(data.get(ledger.DATA_KEY))
        )

    async def write_ledger(
        self, namespace: str, entries: Mapping[str, Entry], resource_version: str | None
    ) -> bool:
        """Write the ledger if nobody wrote it since ``resource_version``; False on conflict.

        Create when it did not exist (409: someone else created it first), else
        replace with the resourceVersion precondition (409: someone wrote since).
        """
        body = ledger.configmap(namespace, entries, resource_version)
        base = f"/api/v1/namespaces/{namespace}/configmaps"
        try:
            if resource_version is None:
                await self._request("POST", base, body)
            else:
                await self._request("PUT", f"{base}/{ledger.NAME}", body)
        except KubeError as exc:
            if exc.status == 409:
                return False
            raise
        return True

    async def list_items(self, path: str, label_selector: str = "") -> list[dict[str, Any]]:
        """Every object of a list, page by page (a thousand jobs are one big list)."""
        items, _ = await self.list_snapshot(path, label_selector)
        return items

    async def list_snapshot(
        self, path: str, label_selector: str = ""
    ) -> tuple[list[dict[str, Any]], str]:
        """Every object of a list and the resourceVersion it was served at.

        The continue token keeps every page at the first page's version, so the
        whole list is one consistent view at that version ('' on a 404)."""
        items: list[dict[str, Any]] = []
        token = version = ""
        while True:
            query = {"limit": "500"}
            if label_selector:
                query["labelSelector"] = label_selector
            if token:
                query["continue"] = token
            found = await self.get(f"{path}?{urllib.parse.urlencode(query)}")
            if found is None:
                return items, version
            items.extend(found.get("items") or [])
            meta = found.get("metadata") or {}
            version = version or str(meta.get("resourceVersion") or "")
            token = meta.get("continue") or ""
            if not token:
                return items, version

    async def put_webhook_configuration(self, body: Mapping[str, Any]) -> None:
        """Create or replace a ValidatingWebhookConfiguration (ours, by name)."""
        base = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
        name = body["metadata"]["name"]
        current = await self.get(f"{base}/{name}")
        if current is None:
            await self._request("POST", base, dict(body))
            return
        meta = {**body["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}
        await self._request("PUT", f"{base}/{name}", {**body, "metadata": meta})

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
