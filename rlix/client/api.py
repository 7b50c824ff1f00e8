"""The functions ``import rlix`` exposes; see :mod:`rlix.client.runtime` for the
suspend semantics.

The runtime is created on first use, and only then is ``RLIX_AGENT_SOCKET``
read: importing rlix never touches the environment or a socket.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from rlix.client.hooks import CallableHook, Parked, Restored
from rlix.core.phases import Phase

if TYPE_CHECKING:
    from rlix.client.runtime import Runtime
    from rlix.core.suspension import ActiveReplicas

SOCKET_ENV = "RLIX_AGENT_SOCKET"

_lock = threading.Lock()
# The process-wide runtime, created on first use (the runtime module, with its
# socket and threading imports, loads only then).
_state: dict[str, Runtime] = {}


def _get() -> Runtime:
    with _lock:
        if "runtime" not in _state:
            from rlix.client.runtime import Runtime

            _state["runtime"] = Runtime(os.environ.get(SOCKET_ENV) or None)
        return _state["runtime"]


def configure(socket_path: str | None) -> None:
    """Connect to the agent at ``socket_path`` (None: no-op mode) instead of
    reading ``RLIX_AGENT_SOCKET``. Call before the first phase."""
    from rlix.client.runtime import Runtime

    with _lock:
        old = _state.get("runtime")
        if old is not None and old.link is not None:
            old.link.close()
        _state["runtime"] = Runtime(socket_path)


def phase(name: str | Phase, *, safe_points: bool = False) -> AbstractContextManager[Phase]:
    """``with rlix.phase("rollout"):`` -- report the phase; a pending suspend
    takes effect before the block starts, never inside it.

    ``safe_points=True``: this block calls ``rlix.safe_point()`` between its
    steps (e.g. after each optimizer step). Where the node agent parks at its
    phase gate, a partner's weight sync that does not fit beside this pod may
    then park it at its next safe point, for the sync's seconds, instead of
    waiting for the whole phase to end; the agent brings it back, bit for
    bit, once the sync has left. Promise it only where safe points come
    often: the sync waits for the next one."""
    return _get().phase(name, safe_points=safe_points)


def loading() -> AbstractContextManager[Phase]:
    """``with rlix.loading():`` around the pod's first allocation: loading the
    model onto the GPU, an engine preallocating its KV cache.

    Reported as a weight sync (the weights arriving). Where the node agent
    parks at its phase gate, the load goes in only where the pod's declared
    peak (``rlix.io/gpu-memory-mib``) fits beside the pods working on its GPUs
    (those it declares, ``rlix.io/gpu-indices``, which the operator writes
    on pods whose GPUs a claim pins), after the partners that do not work
    are parked; until then this call waits. Without such a gate it is
    ``rlix.phase("weight-sync")``."""
    return _get().loading()


def safe_point() -> None:
    """Inside a long phase: let a pending suspend happen here."""
    _get().safe_point()


def register_offload(
    name: str,
    offload: Callable[[], Parked | None],
    restore: Callable[[], Restored | None],
) -> None:
    """Register two functions that park and restore some device memory.

    ``offload`` returns ``{piece: (nbytes, checksum)}``; ``restore`` returns
    ``{piece: checksum}`` computed over the restored memory. The agent refuses a
    resume whose checksums differ from those taken at suspend time.
    """
    _get().register(CallableHook(name, offload, restore))


def register_torch(
    *,
    modules: Iterable[Any] = (),
    optimizers: Iterable[Any] = (),
    tensors: Iterable[Any] = (),
    name: str = "torch",
    reserve_bytes: int | None = None,
) -> Any:
    """Park these modules' parameters, gradients and buffers and the optimizers'
    state in a preallocated (pinned) host pool on suspend; returns the hook."""
    from rlix.client.torch_offload import TorchOffload

    hook = TorchOffload(
        name, modules=modules, optimizers=optimizers, tensors=tensors, reserve_bytes=reserve_bytes
    )
    _get().register(hook)
    return hook


def register_engine(engine: Any, *, name: str = "engine", sleep_level: int = 1) -> None:
    """Let a vLLM (sleep/wake_up) or SGLang (release/resume_memory_occupation)
    engine park itself on suspend."""
    from rlix.client.engines import EngineHook

    _get().register(EngineHook(name, engine, sleep_level=sleep_level))


def report_usage(*, gpu: int, memory_mib: int, utilization: float) -> None:
    """Tell the agent what this process holds on GPU ``gpu`` (simulated GPUs only).

    Real GPUs are measured by NVML and the agent refuses the report there; on
    kwok/CI nodes the simulated backend's memory and utilisation follow these
    reports. A no-op without an agent, like every other call.
    """
    link = _get().link
    if link is not None:
        from rlix.core import agent_protocol as proto

        link.notify(proto.OP_USAGE, gpu=gpu, memory_mib=memory_mib, utilization=utilization)


def agent_connected() -> bool:
    link = _get().link
    return link is not None and link.connected.is_set()


def suspended() -> bool:
    return _get().suspended


def memory_budget_mib() -> int | None:
    """The per-GPU device memory (MiB) this pod declared for its peak phase: its
    GPU claim's share, which the node agent holds it to (None outside RLix)."""
    from rlix.client.budget import memory_budget_mib as read

    return read()


def cap_torch_memory(device: Any = None) -> float | None:
    """Cap torch's allocator on ``device`` at the budget; returns the fraction set
    (None without a budget or a CUDA device). See :mod:`rlix.client.budget`."""
    from rlix.client.budget import cap_torch_memory as cap

    return cap(device)


def active_replicas(*, timeout_s: float = 5.0) -> ActiveReplicas | None:
    """Which replicas of this job's rollout role (its elastic one) run now.

    ``ActiveReplicas(role, replicas, min_replicas, active, suspended)``, the
    indices as in the pod names (``<job>-<role>-<index>``). Route rollout work
    only to ``active``; with none active (the whole rollout parked for a
    higher-priority job), wait at safe points until one is back. None without
    an agent, when the job has no rollout role, or before the conductor has
    said (treat it as "all").
    """
    link = _get().link
    if link is None:
        return None
    from rlix.client.replicas import ask

    return ask(link, timeout_s)


def watch_active_replicas(
    callback: Callable[[ActiveReplicas | None], None], *, interval_s: float = 1.0
) -> Callable[[], None]:
    """Call ``callback`` now and whenever the active replicas change (polled
    every ``interval_s`` on a daemon thread); returns a function that stops it.
    Without an agent the callback is called once, with None."""
    link = _get().link
    if link is None:
        callback(None)
        return lambda: None
    from rlix.client.replicas import Watch

    return Watch(link, callback, interval_s).stop
