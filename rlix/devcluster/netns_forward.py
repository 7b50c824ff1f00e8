"""Forward TCP from inside a network namespace to an address in this one.

The real node's kubelet runs in a network namespace of its own (its node IP
must not be loopback, and must live on an interface the test created), but the
API server listens on 127.0.0.1 of the machine. This process, started in the
machine's namespace, opens its listening socket inside the node's namespace
(``setns`` only while creating it: a socket stays in the namespace it was
created in) and connects out from the machine's namespace. The kubelet then
uses the very same URL as every other client, ``https://127.0.0.1:<port>``, so
the API server's certificate matches unchanged.

    python -m rlix.devcluster.netns_forward NETNS_PATH PORT [TARGET_HOST]
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import socket
import sys

_CLONE_NEWNET = 0x40000000


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def listen_in_netns(netns_path: str, port: int) -> socket.socket:
    """A listening socket on 127.0.0.1:``port`` inside the namespace ``netns_path``."""
    own = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(netns_path, os.O_RDONLY)
    try:
        _setns(target)
        try:
            return socket.create_server(("127.0.0.1", port), reuse_port=False)
        finally:
            _setns(own)
    finally:
        os.close(target)
        os.close(own)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            writer.close()


async def serve(listener: socket.socket, target_host: str, port: int) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(target_host, port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    server = await asyncio.start_server(handle, sock=listener)
    async with server:
        await server.serve_forever()


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(
            "usage: python -m rlix.devcluster.netns_forward NETNS_PATH PORT [TARGET_HOST]",
            file=sys.stderr,
        )
        return 2
    netns_path, port = argv[0], int(argv[1])
    target_host = argv[2] if len(argv) == 3 else "127.0.0.1"
    listener = listen_in_netns(netns_path, port)  # before any thread exists: setns is per thread
    print(f"forwarding {netns_path} 127.0.0.1:{port} -> {target_host}:{port}", flush=True)
    asyncio.run(serve(listener, target_host, port))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
