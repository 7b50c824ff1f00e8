"""RLix: phase-aware GPU scheduling for RL post-training.

``import rlix`` is the client library a trainer uses::

    import rlix

    with rlix.loading():  # the first allocation waits for room at the phase gate
        model, opt = build()
    rlix.register_torch(modules=[model], optimizers=[opt])
    for step in range(steps):
        with rlix.phase("rollout"):
            ...
        with rlix.phase("training"):
            ...

It must stay cheap to import (no pydantic, no torch: those load only when a
function needs them), so components live in subpackages imported by their own
entry points. Without a node agent (``RLIX_AGENT_SOCKET`` unset) every call is
a no-op, so the same script runs outside RLix unchanged.
"""

from rlix.client.api import (
    active_replicas,
    agent_connected,
    cap_torch_memory,
    configure,
    loading,
    memory_budget_mib,
    phase,
    register_engine,
    register_offload,
    register_torch,
    report_usage,
    safe_point,
    suspended,
    watch_active_replicas,
)
from rlix.core.phases import Phase

__version__ = "0.1.0.dev0"

__all__ = [
    "Phase",
    "__version__",
    "active_replicas",
    "agent_connected",
    "cap_torch_memory",
    "configure",
    "loading",
    "memory_budget_mib",
    "phase",
    "register_engine",
    "register_offload",
    "register_torch",
    "report_usage",
    "safe_point",
    "suspended",
    "watch_active_replicas",
]
