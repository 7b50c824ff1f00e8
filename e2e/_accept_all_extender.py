"""A scheduler extender that accepts every node, for tests of the operator.

The operator's tests need rlix-scheduler pods to bind, not the RLix placement
policy (tested in its own tier), so this answers filter with every node it was
given and prioritize with nothing. Run it in-process (``AcceptAll(port)``) or as
``python e2e/_accept_all_extender.py PORT``.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        args: dict[str, Any] = json.loads(self.rfile.read(length) or b"{}")
        verb = self.path.strip("/").split("/")[-1]
        nodes = list(args.get("NodeNames") or [])
        body: Any
        if verb == "filter":
            body = {"NodeNames": nodes, "FailedNodes": {}, "Error": ""}
        elif verb == "prioritize":
            body = []
        else:
            body = {"NodeNameToMetaVictims": args.get("NodeNameToMetaVictims") or {}}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class AcceptAll:
    """Serve on 127.0.0.1:``port`` in a daemon thread until ``close()``."""

    def __init__(self, port: int) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), _Handler)
    server.serve_forever()


class _RealExtender:
    def __init__(self, port: int, kubeconfig: str) -> None:
        import subprocess
        import time
        import urllib.request

        self._proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rlix.extender",
                "--port",
                str(port),
                "--kubeconfig",
                kubeconfig,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        self.close()
        raise RuntimeError("rlix.extender did not become ready")

    def close(self) -> None:
        self._proc.terminate()
        self._proc.wait(timeout=10)


def start_extender(port: int, kubeconfig: str) -> AcceptAll | _RealExtender:
    """The real extender when ``python -m rlix.extender`` exists, else accept-all."""
    import importlib.util

    if importlib.util.find_spec("rlix.extender.__main__") is not None:
        return _RealExtender(port, kubeconfig)
    return AcceptAll(port)
