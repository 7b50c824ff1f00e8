"""A transparent relay between the rlix client and the real agent, in the
trainer process itself, that records every message the client sends.

The agent publishes phases as annotations, coalescing bursts, so the exact
sequence a trainer reported cannot be read back from it. The relay runs as a
thread of the trainer, so the agent still authenticates the trainer's own PID
(SO_PEERCRED) and sees nothing different; suspend/resume requests flow back
through it unchanged.

Read the record only after the client has closed its connection
(``rlix.configure(None)``): the client's send returns once the bytes are in the
socket, before a relay thread has read them, so a record read while the
connection is open can miss the last messages (the final ``idle`` of a run).
:meth:`Wiretap.phases` therefore waits until every relayed connection has
reached its end.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import threading
import time
from typing import Any


class Wiretap:
    def __init__(self, upstream: str, path: str) -> None:
        self.upstream = upstream
        self.sent: list[dict[str, Any]] = []
        self._lock = threading.Condition()
        self._open = 0  # client connections whose messages are still being read
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(path)
        self._server.listen(8)
        self._server.setblocking(False)  # accepted only once poll says one waits
        self.path = path
        threading.Thread(target=self._accept, daemon=True).start()

    def phases(self, timeout: float = 60.0) -> list[str]:
        """The phases the client reported, once it has closed its connection.

        A client that connected, sent and closed before the accept thread ran
        still sits in the listen backlog, counted nowhere. The accept thread
        takes a connection off the backlog and counts it under the lock, so
        with the lock held the backlog is empty only once every connection is
        counted; wait for that, then until every counted connection was read to
        its end.
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._waiting(0) or self._open:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        "the client still holds its connection to the wiretap: "
                        "call rlix.configure(None) before reading the phases"
                    )
                # A short wait: the accept thread notifies when it counts a
                # connection, but nobody notifies when one enters the backlog.
                self._lock.wait(min(left, 0.05))
            return [m["phase"] for m in self.sent if m.get("op") == "phase"]

    def loads(self) -> list[str]:
        """The phases the client said were loads (``rlix.loading()`` to an
        agent whose gate takes loads); read after ``phases``."""
        with self._lock:
            return [m["phase"] for m in self.sent if m.get("op") == "phase" and m.get("loading")]

    def _waiting(self, timeout_ms: int | None) -> list[tuple[int, int]]:
        # poll, not select: select refuses descriptors above 1023, which a long
        # test session can reach.
        poller = select.poll()
        poller.register(self._server, select.POLLIN)
        return poller.poll(timeout_ms)

    def _accept(self) -> None:
        while True:
            self._waiting(None)
            with self._lock:
                # Off the backlog and counted in one step under the lock: a
                # phases() between the two would see neither and answer early.
                try:
                    client, _ = self._server.accept()
                except BlockingIOError:
                    continue
                self._open += 1
                self._lock.notify_all()
            client.setblocking(True)
            agent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                agent.connect(self.upstream)
            except OSError:
                client.close()  # the client reconnects with backoff
                agent.close()
                with self._lock:
                    self._open -= 1
                    self._lock.notify_all()
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
            if record:
                with self._lock:
                    self._open -= 1
                    self._lock.notify_all()
