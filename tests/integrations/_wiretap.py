"""A transparent relay between the rlix client and the real agent, in the
trainer process itself, that records every message the client sends.

The agent publishes phases as annotations, coalescing bursts, so the exact
sequence a trainer reported cannot be read back from it. The relay runs as a
thread of the trainer, so the agent still authenticates the trainer's own PID
(SO_PEERCRED) and sees nothing different; suspend/resume requests flow back
through it unchanged.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from typing import Any


class Wiretap:
    def __init__(self, upstream: str, path: str) -> None:
        self.upstream = upstream
        self.sent: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(path)
        self._server.listen(8)
        self.path = path
        threading.Thread(target=self._accept, daemon=True).start()

    def phases(self) -> list[str]:
        with self._lock:
            return [m["phase"] for m in self.sent if m.get("op") == "phase"]

    def _accept(self) -> None:
        while True:
            client, _ = self._server.accept()
            agent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                agent.connect(self.upstream)
            except OSError:
                client.close()  # the client reconnects with backoff
                agent.close()
                continue
            threading.Thread(target=self._pump, args=(client, agent, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(agent, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, record: bool) -> None:
        pending = b""
        try:
            while data := src.recv(65536):
                if record:
                    pending += data
                    *lines, pending = pending.split(b"\n")
                    with self._lock:
                        self.sent.extend(json.loads(line) for line in lines if line.strip())
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
