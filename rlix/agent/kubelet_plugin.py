"""The kubelet half of the ``gpu.rlix.io`` DRA driver: plugin registration and
the DRA service, over gRPC on two unix sockets.

How the kubelet finds and calls us (kubernetes pkg/kubelet/pluginmanager and
pkg/kubelet/cm/dra/plugin, v1.37):

1. its plugin watcher sees a socket appear under ``<kubelet root>/plugins_registry``
   and calls ``pluginregistration.Registration/GetInfo`` on it; we answer type
   ``DRAPlugin``, our driver name, the DRA service's socket (under
   ``<kubelet root>/plugins/gpu.rlix.io``) and the services we serve
   (``v1.DRAPlugin``, the newest the 1.37 kubelet accepts), then it reports the
   outcome with ``NotifyRegistrationStatus``;
2. before starting a pod whose claim names our devices it calls
   ``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources`` on the DRA
   socket and hands the returned CDI device ids to the runtime; after the pod is
   gone, ``NodeUnprepareResources``.

The DRA socket is served before the registration socket appears, so the kubelet
never registers an endpoint nobody answers. Errors of one claim go back in that
claim's ``error`` field (the kubelet retries the pod), not as a gRPC failure
that would fail every claim of the call. The services are registered by name
with generic handlers over the generated messages: no generated stub code.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable
from concurrent import futures
from pathlib import Path
from typing import Any, Final, TypeVar

import grpc

from rlix.agent.claim_preparing import ClaimPreparer
from rlix.agent.kubelet_api import dra_v1_pb2 as dra_pb
from rlix.agent.kubelet_api import pluginregistration_v1_pb2 as reg_pb
from rlix.core import dra

log = logging.getLogger(__name__)

PLUGIN_TYPE: Final = "DRAPlugin"  # pluginregistration/v1 constants.go
DRA_SERVICE: Final = "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
DRA_SERVICE_VERSION: Final = "v1.DRAPlugin"  # dra/v1 types.go: what GetInfo advertises
REGISTRATION_SERVICE: Final = "pluginregistration.Registration"
_SUN_PATH_MAX: Final = 107  # sockaddr_un.sun_path, less its terminating NUL
_T = TypeVar("_T")


def registration_socket(kubelet_dir: Path) -> Path:
    return kubelet_dir / "plugins_registry" / f"{dra.DRIVER}-reg.sock"


def dra_socket(kubelet_dir: Path) -> Path:
    return kubelet_dir / "plugins" / dra.DRIVER / "dra.sock"


class DraService:
    """NodePrepareResources / NodeUnprepareResources over :class:`ClaimPreparer`."""

    def __init__(self, preparer: ClaimPreparer) -> None:
        self._preparer = preparer

    def prepare(
        self, request: dra_pb.NodePrepareResourcesRequest, context: Any
    ) -> dra_pb.NodePrepareResourcesResponse:
        response = dra_pb.NodePrepareResourcesResponse()
        prepared = _answer_each(
            request.claims,
            response.claims,
            "preparing",
            lambda claim: self._preparer.prepare(claim.namespace, claim.name, claim.uid),
        )
        for out, devices in prepared:
            for device in devices:
                pb_device = out.devices.add(
                    pool_name=device.pool,
                    device_name=device.device,
                    cdi_device_ids=list(device.cdi_ids),
                )
                if device.request:
                    pb_device.request_names.append(device.request)
                if device.share_id is not None:
                    pb_device.share_id = device.share_id
        return response

    def unprepare(
        self, request: dra_pb.NodeUnprepareResourcesRequest, context: Any
    ) -> dra_pb.NodeUnprepareResourcesResponse:
        response = dra_pb.NodeUnprepareResourcesResponse()
        _answer_each(
            request.claims,
            response.claims,
            "unpreparing",
            lambda claim: self._preparer.unprepare(claim.uid),
        )
        return response


def _answer_each(
    claims: Iterable[dra_pb.Claim],
    answers: Any,
    doing: str,
    action: Callable[[dra_pb.Claim], _T],
) -> list[tuple[Any, _T]]:
    """``action`` on each claim in turn, its answer keyed by the claim's uid in
    ``answers``; one claim's failure becomes that claim's error (the kubelet
    retries its pod), never a failure of the others. Returns each answer that
    succeeded with what ``action`` returned for it."""
    done: list[tuple[Any, _T]] = []
    for claim in claims:
        out = answers[claim.uid]
        try:
            result = action(claim)
        except Exception as exc:  # one claim's failure is that claim's answer
            log.warning(
                "%s claim %s/%s (uid %s) failed: %s",
                doing,
                claim.namespace,
                claim.name,
                claim.uid,
                exc,
            )
            out.error = f"{dra.DRIVER}: {exc}"
            continue
        done.append((out, result))
    return done


class Registration:
    """What the kubelet's plugin watcher asks on the registration socket."""

    def __init__(self, endpoint: Path) -> None:
        self._endpoint = endpoint
        self.registered: bool | None = None  # None until the kubelet reports
        self.error = ""

    def get_info(self, request: reg_pb.InfoRequest, context: Any) -> reg_pb.PluginInfo:
        return reg_pb.PluginInfo(
            type=PLUGIN_TYPE,
            name=dra.DRIVER,
            endpoint=str(self._endpoint),
            supported_versions=[DRA_SERVICE_VERSION],
        )

    def notify(
        self, request: reg_pb.RegistrationStatus, context: Any
    ) -> reg_pb.RegistrationStatusResponse:
        self.registered, self.error = request.plugin_registered, request.error
        if request.plugin_registered:
            log.info("the kubelet registered the %s DRA plugin", dra.DRIVER)
        else:
            log.error("the kubelet refused the %s DRA plugin: %s", dra.DRIVER, request.error)
        return reg_pb.RegistrationStatusResponse()


def _handler(service: str, methods: dict[str, tuple[Any, Any, Any]]) -> Any:
    return grpc.method_handlers_generic_handler(
        service,
        {
            name: grpc.unary_unary_rpc_method_handler(
                call, request_deserializer=request.FromString, response_serializer=serialize
            )
            for name, (call, request, serialize) in methods.items()
        },
    )


def _serve(socket: Path, handler: Any) -> Any:
    if len(str(socket).encode()) > _SUN_PATH_MAX:
        raise OSError(
            f"{socket}: a unix socket path has at most {_SUN_PATH_MAX} bytes "
            "(use a shorter --kubelet-dir)"
        )
    socket.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        socket.unlink()  # a socket left by an agent that was killed
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="rlix-dra"))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"unix://{socket}")  # raises RuntimeError when it cannot
    server.start()
    return server


class KubeletPlugin:
    """Both servers, started and stopped together."""

    def __init__(self, preparer: ClaimPreparer, *, kubelet_dir: Path) -> None:
        self.dra_socket = dra_socket(kubelet_dir)
        self.registration_socket = registration_socket(kubelet_dir)
        self.service = DraService(preparer)
        self.registration = Registration(self.dra_socket)
        self._servers: list[Any] = []

    def start(self) -> None:
        service, registration = self.service, self.registration
        self._servers.append(
            _serve(
                self.dra_socket,
                _handler(
                    DRA_SERVICE,
                    {
                        "NodePrepareResources": (
                            service.prepare,
                            dra_pb.NodePrepareResourcesRequest,
                            dra_pb.NodePrepareResourcesResponse.SerializeToString,
                        ),
                        "NodeUnprepareResources": (
                            service.unprepare,
                            dra_pb.NodeUnprepareResourcesRequest,
                            dra_pb.NodeUnprepareResourcesResponse.SerializeToString,
                        ),
                    },
                ),
            )
        )
        self._servers.append(
            _serve(
                self.registration_socket,
                _handler(
                    REGISTRATION_SERVICE,
                    {
                        "GetInfo": (
                            registration.get_info,
                            reg_pb.InfoRequest,
                            reg_pb.PluginInfo.SerializeToString,
                        ),
                        "NotifyRegistrationStatus": (
                            registration.notify,
                            reg_pb.RegistrationStatus,
                            reg_pb.RegistrationStatusResponse.SerializeToString,
                        ),
                    },
                ),
            )
        )
        log.info(
            "serving the kubelet's DRA plugin API: registration %s, service %s",
            self.registration_socket,
            self.dra_socket,
        )

    def stop(self) -> None:
        """Stop serving; removing the registration socket deregisters the plugin."""
        for server in reversed(self._servers):
            server.stop(grace=2).wait()
        self._servers.clear()
        for socket in (self.registration_socket, self.dra_socket):
            with contextlib.suppress(FileNotFoundError):
                socket.unlink()
