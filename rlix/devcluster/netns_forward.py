"""Forward TCP from inside a network namespace to an address in this one.

The real node's kubelet runs in a network namespace of its own (its node IP
must not be loopback, and must live on an interface the test created), but the
API server listens on 127.0.0.1 of the machine. This process, started in the
machine's namespace, opens its listening socket inside the node's namespace
(``setns`` only while creating it: a socket stays in the namespace it was
created in) and connects out from the machine's namespace. The kubelet then
uses the very same URL as every other client, ``https://127.0.0.1:<port>``, so
the API server's certificate matches unchanged.

Pods on the node reach the API server the same way, at the ``kubernetes``
Service's ClusterIP (port 443), which the node's namespace holds as an address
of its own: there is no kube-proxy on the test node, and this is the one
Service every in-cluster client (the node agent's DaemonSet) needs.

    python -m rlix.devcluster.netns_forward NETNS_PATH PORT [TARGET_HOST] [--also HOST:PORT]...
"""

from __future__ import annotations

import argparse
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


def listen_in_netns(netns_path: str, port: int, host: str = "127.0.0.1") -> socket.socket:
    """A listening socket on ``host``:``port`` inside the namespace ``netns_path``."""
    own = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(netns_path, os.O_RDONLY)
    try:
        _setns(target)
        try:
            return socket.create_server((host, port), reuse_port=False)
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


async def serve_all(listeners: list[socket.socket], target_host: str, port: int) -> None:
    await asyncio.gather(*(serve(sock, target_host, port) for sock in listeners))


def _host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    return host, int(port)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m rlix.devcluster.netns_forward")
    p.add_argument("netns_path")
    p.add_argument("port", type=int)
    p.add_argument("target_host", nargs="?", default="127.0.0.1")
    p.add_argument(
        "--also",
        type=_host_port,
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="another address inside the namespace forwarded to the same target",
    )
    args = p.parse_args(argv)
    # Every listener before any thread exists: setns is per thread.
    listeners = [listen_in_netns(args.netns_path, args.port)]
    listeners += [listen_in_netns(args.netns_path, port, host) for host, port in args.also]
    for sock in listeners:
        host, port = sock.getsockname()[:2]
        print(
            f"forwarding {args.netns_path} {host}:{port} -> {args.target_host}:{args.port}",
            flush=True,
        )
    asyncio.run(serve_all(listeners, args.target_host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
