"""One client connection on the agent's socket: framing, replies, and requests
the agent itself sends (suspend/resume) on the same connection.

Every line is handled in the connection's own thread; a bad line gets an error
reply and the loop goes on, so no client can crash the agent or another client.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import os
import socket
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from rlix.agent.fd_lines import FdLineReader
from rlix.agent.identities import Caller
from rlix.core import agent_protocol as proto

log = logging.getLogger(__name__)

# Handler: the reply line to send for a request (or raise proto.ProtocolError);
# None when the handler answers later itself (``send_if_open``), as the phase gate does.
RequestHandler = Callable[["Connection", proto.Request], bytes | None]


class ConnectionClosedError(Exception):
    """The peer went away before answering."""


class Connection:
    def __init__(self, sock: socket.socket, caller: Caller, handler: RequestHandler) -> None:
        self.sock = sock
        self.caller = caller
        self._handler = handler
        self._send_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._pending: dict[int, Future[proto.Reply]] = {}
        self._pending_lock = threading.Lock()
        self.closed = threading.Event()
        self.hooks: tuple[str, ...] = ()
        # Set when its hello arrives: until then its hooks (and so how it is
        # suspended) are unknown.
        self.greeted = False
        # Its hello said its wait-less phase reports are the phase it is in now
        # (``agent_protocol.reports_phase_now``): the phase gate follows them.
        self.reports_phase_now = False
        # Its hello said it asks a parking gate to enter while parked
        # (``agent_protocol.asks_gate_while_parked``): the gate may park it.
        self.asks_while_parked = False

    @property
    def pid(self) -> int:
        return self.caller.creds.pid

    def send(self, line: bytes) -> None:
        with self._send_lock:
            self.sock.sendall(line)

    def request(self, op: str, **args: Any) -> Future[proto.Reply]:
        """Send a request to the client; the future resolves with its reply."""
        fut: Future[proto.Reply] = Future()
        msg_id = next(self._ids)
        with self._pending_lock:
            if self.closed.is_set():
                fut.set_exception(ConnectionClosedError(f"pid {self.pid} disconnected"))
                return fut
            self._pending[msg_id] = fut
        try:
            self.send(proto.encode_request(msg_id, op, **args))
        except OSError as exc:
            self._fail(msg_id, ConnectionClosedError(f"pid {self.pid}: {exc}"))
        return fut

    def _fail(self, msg_id: int, exc: Exception) -> None:
        with self._pending_lock:
            fut = self._pending.pop(msg_id, None)
        if fut is not None and not fut.done():
            fut.set_exception(exc)

    def serve(self) -> None:
        """Read lines until the peer closes; always cleans up."""
        reader = FdLineReader(self.sock)
        try:
            while True:
                line = reader.readline(proto.MAX_LINE_BYTES)
                if not line:
                    return
                if not line.endswith(b"\n") and len(line) > proto.MAX_LINE_BYTES:
                    # Too long to resynchronise on: answer once, then hang up,
                    # draining first so the reset of an unread close cannot
                    # swallow the answer.
                    limit = proto.MAX_LINE_BYTES
                    self.send_if_open(
                        proto.encode_error(None, proto.E_MALFORMED, f"line over {limit} bytes")
                    )
                    with contextlib.suppress(OSError):
                        self.sock.shutdown(socket.SHUT_WR)
                    reader.drain(1.0)
                    return
                if line.strip():
                    self._handle_line(line, reader)
                reader.line_done()
        except OSError:
            return
        finally:
            reader.discard()
            self.close()

    def _handle_line(self, line: bytes, reader: FdLineReader) -> None:
        try:
            msg = proto.decode(line)
        except proto.ProtocolError as exc:
            self.send_if_open(proto.encode_error(exc.msg_id, exc.code, exc.message))
            return
        try:
            fds = reader.take(msg.nfds)
        except proto.ProtocolError as exc:
            if isinstance(msg, proto.Reply):
                # Whoever waits for this reply learns why it is unusable.
                msg = proto.Reply(
                    re=msg.re, ok=False, body={}, error_code=exc.code, error_message=exc.message
                )
                fds = ()
            else:
                self.send_if_open(proto.encode_error(msg.id, exc.code, exc.message))
                return
        if isinstance(msg, proto.Reply):
            with self._pending_lock:
                fut = self._pending.pop(msg.re, None)
            if fut is not None and not fut.done():
                # Whoever asked owns (and closes) the descriptors of the reply.
                fut.set_result(dataclasses.replace(msg, fds=fds))
            else:
                _close_all(fds)
            return
        if fds:
            _close_all(fds)
            self.send_if_open(
                proto.encode_error(
                    msg.id, proto.E_BAD_FIELD, f"op {msg.op!r} takes no file descriptors"
                )
            )
            return
        try:
            out = self._handler(self, msg)
        except proto.ProtocolError as exc:
            out = proto.encode_error(msg.id, exc.code, exc.message)
        except Exception as exc:  # a handler bug must not kill the connection or agent
            log.exception("handler failed for op %s from pid %s", msg.op, self.pid)
            out = proto.encode_error(msg.id, proto.E_FAILED, f"internal error: {exc}")
        if out is not None:
            self.send_if_open(out)

    def send_if_open(self, line: bytes) -> None:
        """Send, ignoring a peer that is gone (the read loop notices); safe from
        any thread, so a held reply (the phase gate's) goes out this way too."""
        with contextlib.suppress(OSError):
            self.send(line)

    def close(self) -> None:
        with self._pending_lock:
            self.closed.set()
            pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(ConnectionClosedError(f"pid {self.pid} disconnected"))
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


def _close_all(fds: tuple[int, ...]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
