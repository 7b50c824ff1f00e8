"""Read protocol lines from a unix socket together with the descriptors
(SCM_RIGHTS) sent alongside them.

A buffered file object (``sock.makefile``) would read the bytes and silently
drop the ancillary data, so this reader calls ``recvmsg`` itself. Descriptors
arrive with the first byte of the line they were sent with; the line's
envelope says how many it carries (``"fds": N``), and :meth:`take` hands
exactly those to it. Descriptors nobody claims are closed, so a client cannot
exhaust the agent's descriptor table by sending them unasked.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections import deque

from rlix.core import agent_protocol as proto

log = logging.getLogger(__name__)

_CHUNK = 65536


class FdLineReader:
    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buf = bytearray()
        self._fds: deque[int] = deque()
        self._eof = False

    def readline(self, limit: int) -> bytes:
        """The next line, with its newline; b"" at end of stream.

        Returns the first ``limit + 1`` bytes without a newline when a line is
        longer than ``limit`` (the caller refuses it), like ``readline(limit)``.
        """
        while True:
            end = self._buf.find(b"\n")
            if end >= 0 and end <= limit:
                line = bytes(self._buf[: end + 1])
                del self._buf[: end + 1]
                return line
            if end > limit or len(self._buf) > limit:
                line = bytes(self._buf[: limit + 1])
                del self._buf[: limit + 1]
                return line
            if self._eof:
                line = bytes(self._buf)
                self._buf.clear()
                return line
            data, fds, flags, _ = socket.recv_fds(self._sock, _CHUNK, proto.MAX_FDS)
            if flags & getattr(socket, "MSG_CTRUNC", 0):
                log.warning(
                    "a peer sent more than %d descriptors at once; extras dropped", proto.MAX_FDS
                )
            self._fds.extend(fds)
            if len(self._fds) > proto.MAX_FDS:
                self.discard()  # nobody announced this many: refuse to hold them
            if not data:
                self._eof = True
            self._buf += data

    def take(self, n: int) -> tuple[int, ...]:
        """The ``n`` descriptors a line announced; raises if they did not come."""
        if n > len(self._fds):
            got = len(self._fds)
            self.discard()
            raise proto.ProtocolError(
                proto.E_MALFORMED, f"message announced {n} file descriptors, {got} arrived"
            )
        return tuple(self._fds.popleft() for _ in range(n))

    def discard(self) -> None:
        """Close descriptors that no line claimed."""
        while self._fds:
            with contextlib.suppress(OSError):
                os.close(self._fds.popleft())

    def line_done(self) -> None:
        """After a line is handled: with no next line begun, leftovers are strays."""
        if not self._buf:
            self.discard()

    def drain(self, timeout: float) -> None:
        """Read and drop whatever is still coming (before closing after an error)."""
        self._sock.settimeout(timeout)
        with contextlib.suppress(OSError):
            while self._sock.recv(_CHUNK):
                pass
        self.discard()
