"""A programmable scheduler extender for real-cluster tests of the scheduler wiring.

It speaks the kube-scheduler extender protocol (k8s.io/kube-scheduler/extender/v1:
Go field names, nodeCacheCapable so only NodeNames travel) and lets a test decide
per call which nodes pass and how each scores. It records every call so a test
can prove the real kube-scheduler asked it. The real RLix extender is tested in
its own tier; this stand proves the cluster plumbing, and plays an extender
whose view disagrees with admission's.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# (pod, node names) -> {node: reason} for the nodes to reject.
FilterRule = Callable[[dict[str, Any], list[str]], dict[str, str]]
# (pod, node names) -> {node: score 0..10}; nodes left out score 0.
ScoreRule = Callable[[dict[str, Any], list[str]], dict[str, int]]


def accept_all(pod: dict[str, Any], nodes: list[str]) -> dict[str, str]:
    return {}


def score_none(pod: dict[str, Any], nodes: list[str]) -> dict[str, int]:
    return {}


class ExtenderStand:
    def __init__(self, port: int) -> None:
        self.port = port
        self.rule: FilterRule = accept_all
        self.scores: ScoreRule = score_none
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        stand = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                args = json.loads(self.rfile.read(length) or b"{}")
                verb = self.path.strip("/").split("/")[-1]
                with stand._lock:
                    stand.calls.append((verb, args))
                body = stand._answer(verb, args)
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _answer(self, verb: str, args: dict[str, Any]) -> Any:
        pod = args.get("Pod") or {}
        names = list(args.get("NodeNames") or [])
        if verb == "filter":
            failed = self.rule(pod, names)
            return {
                "NodeNames": [n for n in names if n not in failed],
                "FailedNodes": failed,
                "FailedAndUnresolvableNodes": {},
                "Error": "",
            }
        if verb == "prioritize":
            scores = self.scores(pod, names)
            return [{"Host": n, "Score": scores.get(n, 0)} for n in names]
        if verb == "preempt":
            return {"NodeNameToMetaVictims": args.get("NodeNameToMetaVictims") or {}}
        return {"Error": f"unknown verb {verb!r}"}

    def verbs_seen(self, pod_name: str) -> set[str]:
        with self._lock:
            return {
                verb
                for verb, args in self.calls
                if (args.get("Pod") or {}).get("metadata", {}).get("name") == pod_name
            }

    def __enter__(self) -> ExtenderStand:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
