"""Feed a ClusterCache from the API server: list, then watch, forever.

Deliberately thin (the rules live in ``ClusterCache``): one daemon thread per
kind runs list -> watch -> (on 410 Gone or any error) relist. Objects stay
plain JSON dicts end to end, exactly what the cache's apply functions take. The client's
timeouts are set because silent watch stalls are a known failure: the server
ends each watch after ``timeout_seconds`` and the loop resumes from the last
resourceVersion. Exercised against a real API server by the e2e tier.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from rlix.extender.cache import ClusterCache

log = logging.getLogger("rlix.extender.watcher")

WATCH_TIMEOUT_S = 300
CLIENT_TIMEOUT_S = 330
RETRY_S = 2.0


def _load_client(kubeconfig: str | None) -> Any:
    import kubernetes

    k8s: Any = kubernetes  # the client is untyped; keep Any at the boundary
    client, config = k8s.client, k8s.config
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig)
    else:
        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
    return client.ApiClient()


def _run(
    *,
    kind: str,
    lister: Callable[..., Any],
    replace: Callable[[list[dict[str, Any]]], None],
    apply: Callable[[str, dict[str, Any]], None],
    stop: threading.Event,
    item_type: str | None = None,
) -> None:
    import kubernetes

    k8s: Any = kubernetes
    ApiException = k8s.client.exceptions.ApiException  # noqa: N806

    while not stop.is_set():
        try:
            listed = lister(_preload_content=False, _request_timeout=CLIENT_TIMEOUT_S)
            doc = json.loads(listed.data)
            replace(doc.get("items") or [])
            version = doc.get("metadata", {}).get("resourceVersion")
            while not stop.is_set():
                w = k8s.watch.Watch(return_type=item_type)
                for event in w.stream(
                    lister,
                    resource_version=version,
                    timeout_seconds=WATCH_TIMEOUT_S,
                    _request_timeout=CLIENT_TIMEOUT_S,
                    allow_watch_bookmarks=True,
                    # Plain dicts: the client's model deserialisation costs ~1 ms
                    # per pod and would hold the GIL the request path needs.
                    deserialize=False,
                ):
                    obj = event.get("object") or {}
                    kind_of = event.get("type", "")
                    version = obj.get("metadata", {}).get("resourceVersion", version)
                    if kind_of == "ERROR":  # e.g. 410 Gone: the except below relists
                        raise ApiException(status=obj.get("code", 500), reason="watch error")
                    if kind_of in ("ADDED", "MODIFIED", "DELETED"):
                        apply(kind_of, obj)
                    if stop.is_set():
                        w.stop()
                        break
        except Exception as exc:  # relist after any failure (410 Gone included)
            log.warning("%s watch restarting after: %s", kind, exc)
            stop.wait(RETRY_S)


def start_watching(
    cache: ClusterCache, kubeconfig: str | None, stop: threading.Event
) -> list[threading.Thread]:
    """Start node, pod and claim watchers feeding ``cache``; they stop when ``stop`` is set."""
    import kubernetes

    k8s: Any = kubernetes
    api_client = _load_client(kubeconfig)
    api = k8s.client.CoreV1Api(api_client)
    claims = k8s.client.ResourceV1Api(api_client).list_resource_claim_for_all_namespaces
    feeds = [
        ("nodes", api.list_node, cache.replace_nodes, cache.apply_node, None),
        ("pods", api.list_pod_for_all_namespaces, cache.replace_pods, cache.apply_pod, None),
        # Claim allocations: which pod holds which RLix GPU (docs/dra.md). The
        # client names the item model ResourceV1ResourceClaim, which its watch
        # cannot derive from the list type: name it (objects stay plain dicts).
        (
            "resourceclaims",
            claims,
            cache.replace_claims,
            cache.apply_claim,
            "ResourceV1ResourceClaim",
        ),
    ]
    threads = [
        threading.Thread(
            target=_run,
            kwargs={
                "kind": kind,
                "lister": lister,
                "replace": replace,
                "apply": apply,
                "stop": stop,
                "item_type": item_type,
            },
            name=f"rlix-watch-{kind}",
            daemon=True,
        )
        for kind, lister, replace, apply, item_type in feeds
    ]
    for t in threads:
        t.start()
    return threads
