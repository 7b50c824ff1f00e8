"""A call to an API server that never answers fails; it does not hang the operator.

The operator's one loop awaits every call (``rlix.operator.loop``): a request
without a read timeout on a connection that never answers would stop every
admission and reconcile, with nothing logged.
"""

from __future__ import annotations

import asyncio
import socket

import pytest
import urllib3
from kubernetes import client

from rlix.operator.kube import REQUEST_TIMEOUT_S, Kube


def test_every_call_has_a_read_timeout_inside_the_api_servers_own() -> None:
    connect, read = REQUEST_TIMEOUT_S
    assert 0 < connect < read and read > 60  # kube-apiserver's --request-timeout: 60 s


def test_a_server_that_accepts_and_never_answers_fails_the_call() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel completes the handshake; nobody ever reads or writes
        configuration = client.Configuration()
        configuration.host = f"http://127.0.0.1:{silent.getsockname()[1]}"
        configuration.retries = 0
        kube = Kube(client.ApiClient(configuration), workers=1, request_timeout_s=(1.0, 0.5))
        try:

            async def call() -> None:
                # The outer bound only keeps a regression from hanging the suite.
                await asyncio.wait_for(kube.get("/api/v1/namespaces/default"), timeout=60)

            with pytest.raises(urllib3.exceptions.HTTPError):
                asyncio.run(call())
        finally:
            kube.close()
