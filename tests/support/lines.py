"""Lines from a child process's pipe, with timeouts that see every line.

``select`` on the buffered file object ``subprocess.Popen(text=True)`` hands
out misses lines the buffer already holds: two lines the child writes close
together arrive in one read, ``readline`` returns the first, and ``select``
then waits in vain for the second, which sits in the buffer (a test that
failed only on a loaded machine: "parked" and "restored" came in one chunk).
So read the descriptor itself and keep the buffer here; a pipe read through
``Lines`` must not also be read through its file object.
"""

from __future__ import annotations

import os
import select
import time
from typing import IO, Any


class Lines:
    def __init__(self, pipe: IO[Any]) -> None:
        self._fd = pipe.fileno()
        self._buf = bytearray()
        self._eof = False

    def _take(self) -> str | None:
        end = self._buf.find(b"\n")
        if end < 0:
            if self._eof and self._buf:  # a last line without a newline
                end = len(self._buf) - 1
            else:
                return None
        line = bytes(self._buf[: end + 1])
        del self._buf[: end + 1]
        return line.decode()

    def readline(self, timeout: float) -> str:
        """The next line ("" at end of file); TimeoutError if none comes within ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            line = self._take()
            if line is not None:
                return line
            if self._eof:
                return ""
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._fd], [], [], left)[0]:
                raise TimeoutError(f"no line within {timeout} s")
            chunk = os.read(self._fd, 1 << 16)
            if chunk:
                self._buf += chunk
            else:
                self._eof = True

    def silent_for(self, seconds: float) -> bool:
        """Whether no line comes within ``seconds``; a line that did stays to be read."""
        try:
            line = self.readline(seconds)
        except TimeoutError:
            return True
        self._buf[:0] = line.encode()  # end of file ("") is not silence either
        return False
