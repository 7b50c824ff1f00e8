"""The CLI's and the demo's door to the API server: the objects the views need, as dicts."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from rlix.core import names


@dataclass
class ClusterView:
    rljobs: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    nodes: list[dict[str, Any]]


class Kube:
    def __init__(self, kubeconfig: str | None = None, context: str | None = None) -> None:
        from kubernetes import client, config

        config.load_kube_config(config_file=kubeconfig, context=context)  # type: ignore[no-untyped-call]
        self._api = client.ApiClient()
        self._core = client.CoreV1Api(self._api)
        self._custom = client.CustomObjectsApi(self._api)

    def _raw(self, call: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        # Raw JSON keeps the API's own field names (camelCase), as kubectl shows them.
        resp = call(*args, _preload_content=False, **kwargs)
        data: dict[str, Any] = json.loads(resp.data)
        return data

    def rljobs(self, namespace: str | None) -> list[dict[str, Any]]:
        g, v, p = names.GROUP, names.VERSION, names.PLURAL
        if namespace:
            out = self._raw(self._custom.list_namespaced_custom_object, g, v, namespace, p)
        else:
            out = self._raw(self._custom.list_cluster_custom_object, g, v, p)
        return list(out.get("items", []))

    def rljob(self, namespace: str, name: str) -> dict[str, Any]:
        g, v, p = names.GROUP, names.VERSION, names.PLURAL
        return self._raw(self._custom.get_namespaced_custom_object, g, v, namespace, p, name)

    def rlix_pods(self, namespace: str | None, job: str | None = None) -> list[dict[str, Any]]:
        selector = f"{names.LABEL_JOB}={job}" if job else names.LABEL_JOB
        if namespace:
            out = self._raw(self._core.list_namespaced_pod, namespace, label_selector=selector)
        else:
            out = self._raw(self._core.list_pod_for_all_namespaces, label_selector=selector)
        return list(out.get("items", []))

    def gpu_nodes(self) -> list[dict[str, Any]]:
        return list(self._raw(self._core.list_node).get("items", []))

    def events_for(self, namespace: str, uid: str) -> list[dict[str, Any]]:
        out = self._raw(
            self._core.list_namespaced_event, namespace, field_selector=f"involvedObject.uid={uid}"
        )
        return list(out.get("items", []))

    def patch_rljob(self, namespace: str, name: str, body: dict[str, Any]) -> None:
        """Merge-patch an RLJob (its metadata: a request annotation)."""
        g, v, p = names.GROUP, names.VERSION, names.PLURAL
        self._custom.patch_namespaced_custom_object(g, v, namespace, p, name, body)

    def patch_pod(self, namespace: str, name: str, body: dict[str, Any]) -> bool:
        """Merge-patch a pod; False when it is gone (deleted since it was listed)."""
        return self._if_found(self._core.patch_namespaced_pod, name, namespace, body)

    def patch_pod_status(self, namespace: str, name: str, body: dict[str, Any]) -> bool:
        """Merge-patch a pod's status; False when it is gone."""
        return self._if_found(self._core.patch_namespaced_pod_status, name, namespace, body)

    @staticmethod
    def _if_found(call: Any, *args: Any) -> bool:
        from kubernetes.client.exceptions import ApiException

        try:
            call(*args)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def resource_claims(self, namespace: str) -> list[dict[str, Any]]:
        """The namespace's ResourceClaims (a cluster without DRA has none: empty)."""
        from kubernetes.client.exceptions import ApiException

        try:
            out = self._raw(
                self._custom.list_namespaced_custom_object,
                "resource.k8s.io",
                "v1",
                namespace,
                "resourceclaims",
            )
        except ApiException as exc:
            if exc.status == 404:
                return []
            raise
        return list(out.get("items", []))

    def create_rljob(self, body: dict[str, Any]) -> None:
        g, v, p = names.GROUP, names.VERSION, names.PLURAL
        self._custom.create_namespaced_custom_object(g, v, body["metadata"]["namespace"], p, body)

    def create_pod(self, body: dict[str, Any]) -> None:
        # The client accepts a plain dict (it serialises it as is); its stub says V1Pod.
        self._core.create_namespaced_pod(body["metadata"]["namespace"], body)  # type: ignore[arg-type]

    def delete_pods(self, namespace: str, selector: str) -> None:
        self._core.delete_collection_namespaced_pod(namespace, label_selector=selector)

    def view(self, namespace: str | None) -> ClusterView:
        return ClusterView(
            rljobs=self.rljobs(namespace), pods=self.rlix_pods(namespace), nodes=self.gpu_nodes()
        )
