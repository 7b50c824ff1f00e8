"""The Kubernetes implementation of the publishing port and the pod directory.

Thin on purpose: each function is one API call, so the real-cluster test tier
can exercise it against a real API server. Merge patches on ``metadata`` only;
the agent needs RBAC ``patch`` on nodes and pods and ``list`` on pods.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from rlix.agent.conducting import NodePod
from rlix.agent.identities import PodIdentity
from rlix.agent.pod_watches import OnPod
from rlix.agent.publishing import Annotations, ObjectGoneError
from rlix.core.dra import API_VERSION

log = logging.getLogger(__name__)


class KubePublisher:
    def __init__(self, api: Any) -> None:
        """``api`` is a ``kubernetes.client.CoreV1Api``."""
        self._api = api

    def patch_node_annotations(self, *, node: str, annotations: Annotations) -> None:
        body = {"metadata": {"annotations": dict(annotations)}}
        _patch(f"node {node}", lambda: self._api.patch_node(node, body))

    def patch_node_labels(self, *, node: str, labels: Annotations) -> None:
        body = {"metadata": {"labels": dict(labels)}}
        _patch(f"node {node}", lambda: self._api.patch_node(node, body))

    def patch_pod_annotations(self, *, namespace: str, name: str, annotations: Annotations) -> None:
        body = {"metadata": {"annotations": dict(annotations)}}
        _patch(
            f"pod {namespace}/{name}", lambda: self._api.patch_namespaced_pod(name, namespace, body)
        )


def _patch(what: str, call: Callable[[], Any]) -> None:
    """One patch; a 404 becomes :class:`ObjectGoneError` (final, not retried)."""
    try:
        call()
    except Exception as exc:  # kubernetes.client.ApiException carries the HTTP status
        if getattr(exc, "status", None) == 404:
            raise ObjectGoneError(f"{what} not found") from exc
        raise


class KubePodDirectory:
    """Pod UID -> identity for pods bound to this node (listed on a miss)."""

    def __init__(self, api: Any, *, node: str) -> None:
        self._api = api
        self._node = node
        self._by_uid: dict[str, PodIdentity] = {}

    def __call__(self, uid: str) -> PodIdentity | None:
        if uid not in self._by_uid:
            pods = self._api.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={self._node}"
            )
            self._by_uid = {
                p.metadata.uid: PodIdentity(p.metadata.uid, p.metadata.namespace, p.metadata.name)
                for p in pods.items
            }
        return self._by_uid.get(uid)


class KubeNodePods:
    """The pods bound to this node, with their annotations (the conductor's channel)."""

    def __init__(self, api: Any, *, node: str) -> None:
        self._api = api
        self._node = node

    def __call__(self) -> list[NodePod]:
        pods = self._api.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={self._node}")
        return [
            NodePod(
                uid=p.metadata.uid,
                namespace=p.metadata.namespace,
                name=p.metadata.name,
                annotations=dict(p.metadata.annotations or {}),
            )
            for p in pods.items
        ]


class KubePodEvents:
    """What the agent sees of a pod (a memory overrun, a load outside the
    gate) as core/v1 Events on the pod (``kubectl describe pod`` lists them)."""

    COMPONENT = "rlix-node-agent"

    def __init__(self, api: Any, *, node: str) -> None:
        """``api`` is a ``kubernetes.client.CoreV1Api``."""
        self._api = api
        self._node = node
        self._serial = itertools.count()

    def post(self, about: OnPod, *, kind: str, reason: str, message: str) -> None:
        now = datetime.now(UTC)
        stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "metadata": {
                "name": f"{about.name}.{int(now.timestamp() * 1e6):x}{next(self._serial)}",
                "namespace": about.namespace,
            },
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": about.name,
                "namespace": about.namespace,
                "uid": about.uid,
            },
            "type": kind,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": self.COMPONENT, "host": self._node},
            "reportingComponent": self.COMPONENT,
            "reportingInstance": self._node,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            self._api.create_namespaced_event(about.namespace, body)
        except Exception as exc:  # an event is a courtesy: the metric still counts it
            log.warning(
                "event %s on pod %s/%s not recorded: %s",
                reason,
                about.namespace,
                about.name,
                exc,
            )


def core_v1_api(kubeconfig: str | None) -> Any:
    """In-cluster config inside the DaemonSet, a kubeconfig file otherwise."""
    from kubernetes import client, config

    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig)  # type: ignore[no-untyped-call,unused-ignore]
    else:
        config.load_incluster_config()  # type: ignore[no-untyped-call,unused-ignore]
    return client.CoreV1Api()


class KubeSliceApi:
    """The DRA port (slices; claims for the kubelet plugin) over raw JSON requests
    (the typed client would validate every body against its own models, which
    lag the API's DRA fields)."""

    def __init__(self, api: Any) -> None:
        """``api`` is a ``kubernetes.client.CoreV1Api`` (its ApiClient is used)."""
        self._client = api.api_client
        self._core = api

    def _request(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        content_type = "application/merge-patch+json" if method == "PATCH" else "application/json"
        params = self._client.param_serialize(
            method=method,
            resource_path=path,
            header_params={"Accept": "application/json", "Content-Type": content_type},
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self._client.call_api(*params)
        data = response.read()
        if not 200 <= response.status < 300:
            raise SliceRequestError(response.status, f"{method} {path}: {data[:500]!r}")
        return json.loads(data) if data else {}

    def read_node(self, name: str) -> dict[str, Any]:
        return self._request("GET", f"/api/v1/nodes/{name}")

    def apply_slice(self, body: Mapping[str, Any]) -> dict[str, Any]:
        name = body["metadata"]["name"]
        try:
            return self._request("POST", SLICES, dict(body))
        except SliceRequestError as exc:
            if exc.status != 409:
                raise
        current = self._request("GET", f"{SLICES}/{name}")
        meta = {**body["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}
        return self._request("PUT", f"{SLICES}/{name}", {**body, "metadata": meta})

    def delete_slice(self, name: str) -> None:
        try:
            self._request("DELETE", f"{SLICES}/{name}")
        except SliceRequestError as exc:
            if exc.status != 404:
                raise

    def read_slice(self, name: str) -> dict[str, Any] | None:
        try:
            return self._request("GET", f"{SLICES}/{name}")
        except SliceRequestError as exc:
            if exc.status != 404:
                raise
        return None

    def read_claim(self, namespace: str, name: str) -> dict[str, Any]:
        """A ResourceClaim (for NodePrepareResources: the allocation says which GPUs)."""
        return self._request(
            "GET", f"/apis/{API_VERSION}/namespaces/{namespace}/resourceclaims/{name}"
        )

    def patch_node_annotations(self, *, node: str, annotations: Mapping[str, str | None]) -> None:
        self._request("PATCH", f"/api/v1/nodes/{node}", {"metadata": {"annotations": annotations}})


SLICES = f"/apis/{API_VERSION}/resourceslices"


class SliceRequestError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
