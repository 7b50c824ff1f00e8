"""The client's connection to the node agent, kept alive in the background.

One daemon thread connects (and reconnects, with backoff, when the agent
restarts), reads lines, resolves replies, and hands the agent's own requests
(suspend/resume) to a second thread, so a long offload never stops replies
from being read. Requests from the trainer are fire-and-forget or awaited,
the caller's choice.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import queue
import socket
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from rlix.core import agent_protocol as proto

log = logging.getLogger("rlix")


class AgentUnavailableError(Exception):
    """Not connected to the node agent (yet, or any more)."""


class AgentLink:
    def __init__(
        self,
        path: str,
        *,
        on_request: Callable[[proto.Request], bytes | tuple[bytes, list[int]]],
        on_connect: Callable[[], list[tuple[str, dict[str, Any]]]],
        on_connect_reply: Callable[[str, proto.Reply], None] | None = None,
        max_backoff_s: float = 1.0,
    ) -> None:
        self._path = path
        self._on_request = on_request
        self._on_connect = on_connect
        # Told of each accepted reply to what on_connect sent (the hello's says
        # what this agent offers, e.g. its phase gate).
        self._on_connect_reply = on_connect_reply
        self._max_backoff = max_backoff_s
        self._ids = itertools.count(1)
        self._lock = threading.Lock()  # guards _sock and _pending
        self._send_lock = threading.Lock()  # one line at a time on the wire
        self._sock: socket.socket | None = None
        self._pending: dict[int, Future[proto.Reply]] = {}
        # Requests from the agent, with the connection (generation) they came on.
        self._inbox: queue.Queue[tuple[int, proto.Request] | None] = queue.Queue()
        self._generation = 0
        self._stopped = threading.Event()
        self.connected = threading.Event()
        threading.Thread(target=self._read_loop, name="rlix-agent-link", daemon=True).start()
        threading.Thread(target=self._work_loop, name="rlix-agent-requests", daemon=True).start()

    def request(self, op: str, **args: Any) -> Future[proto.Reply]:
        fut: Future[proto.Reply] = Future()
        with self._lock:
            sock = self._sock
            if sock is None:
                fut.set_exception(AgentUnavailableError(f"not connected to {self._path}"))
                return fut
            msg_id = next(self._ids)
            self._pending[msg_id] = fut
        # Send outside the state lock: a full socket buffer blocks sendall until
        # the agent reads, and the agent reads only while our reader thread
        # drains its replies, which needs the state lock (a real deadlock the
        # benchmark found at ~20k switches).
        try:
            with self._send_lock:
                sock.sendall(proto.encode_request(msg_id, op, **args))
        except OSError as exc:
            with self._lock:
                self._pending.pop(msg_id, None)
            if not fut.done():
                fut.set_exception(AgentUnavailableError(str(exc)))
        return fut

    def notify(self, op: str, **args: Any) -> None:
        """Send without waiting; an error reply is logged, not raised."""
        self.request(op, **args).add_done_callback(_log_failure)

    def close(self) -> None:
        self._stopped.set()
        self._inbox.put(None)
        with self._lock:
            if self._sock is not None:
                with contextlib.suppress(OSError):
                    self._sock.shutdown(socket.SHUT_RDWR)

    def _answer(self, generation: int, line: bytes, fds: list[int]) -> None:
        """Send an answer on the connection its request came on.

        If that connection is gone (the agent restarted while, say, a suspend
        waited for a phase boundary), the new agent never asked: the answer
        would be a stray reply it drops, and a process that parked would stay
        parked with no agent knowing. It gets a fresh hello instead, which
        says what this process now is (parked or not), and the agent decides.
        """
        with self._lock:
            sock, current = self._sock, self._generation
        if sock is None:
            return  # the next connection's hello says it
        if generation == current:
            self._send_on(sock, line, fds)
            return
        for op, args in self._on_connect():
            self.notify(op, **args)

    def _greet(self, op: str, args: dict[str, Any]) -> None:
        fut = self.request(op, **args)
        fut.add_done_callback(_log_failure)
        callback = self._on_connect_reply
        if callback is not None:

            def told(done: Future[proto.Reply]) -> None:
                if done.exception() is None and done.result().ok:
                    callback(op, done.result())

            fut.add_done_callback(told)

    def _send_on(self, sock: socket.socket, line: bytes, fds: list[int] | None) -> None:
        with self._send_lock, contextlib.suppress(OSError):
            if fds:
                # The descriptors travel with the line's first bytes; the rest
                # of a long line follows as plain data. The caller keeps (and
                # later closes) its own copies.
                sent = socket.send_fds(sock, [line], fds)
                sock.sendall(line[sent:])
            else:
                sock.sendall(line)

    def _read_loop(self) -> None:
        backoff = 0.01
        while not self._stopped.is_set():
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(self._path)
            except OSError:
                sock.close()
                self._stopped.wait(backoff)
                backoff = min(backoff * 2, self._max_backoff)
                continue
            backoff = 0.01
            with self._lock:
                self._sock = sock
                self._generation += 1
                generation = self._generation
            for op, args in self._on_connect():
                self._greet(op, args)
            self.connected.set()
            try:
                self._read(sock, generation)
            except OSError as exc:  # agent killed or restarted: reconnect below
                log.debug("rlix: agent connection dropped: %s", exc)
            finally:
                self.connected.clear()
                with self._lock:
                    self._sock = None
                    pending, self._pending = self._pending, {}
                for fut in pending.values():
                    fut.set_exception(AgentUnavailableError("agent connection lost"))
                sock.close()

    def _read(self, sock: socket.socket, generation: int) -> None:
        with sock.makefile("rb") as reader:
            for line in reader:
                try:
                    msg = proto.decode(line)
                except proto.ProtocolError as exc:
                    log.warning("rlix: unreadable message from the agent: %s", exc)
                    continue
                if isinstance(msg, proto.Reply):
                    with self._lock:
                        fut = self._pending.pop(msg.re, None)
                    if fut is not None:
                        fut.set_result(msg)
                    elif not msg.ok:
                        log.warning("rlix agent: %s: %s", msg.error_code, msg.error_message)
                else:
                    self._inbox.put((generation, msg))

    def _work_loop(self) -> None:
        while True:
            item = self._inbox.get()
            if item is None:
                return
            generation, req = item
            fds: list[int] = []
            try:
                out = self._on_request(req)
                if isinstance(out, tuple):
                    out, fds = out
            except proto.ProtocolError as exc:
                out = proto.encode_error(req.id, exc.code, exc.message)
            except Exception as exc:  # report, never die: the trainer keeps running
                log.exception("rlix: handling %s from the agent failed", req.op)
                out = proto.encode_error(req.id, proto.E_FAILED, f"{type(exc).__name__}: {exc}")
            self._answer(generation, out, fds)


def _log_failure(fut: Future[proto.Reply]) -> None:
    exc = fut.exception()
    if exc is not None:
        log.debug("rlix: agent request not delivered: %s", exc)
        return
    reply = fut.result()
    if not reply.ok:
        log.warning("rlix agent refused a request: %s: %s", reply.error_code, reply.error_message)
