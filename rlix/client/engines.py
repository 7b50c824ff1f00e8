"""Offload hooks for inference engines, found by duck typing (never imported).

vLLM's ``LLM.sleep(level)`` / ``wake_up()`` and SGLang's
``release_memory_occupation()`` / ``resume_memory_occupation()`` park the
engine's weights and drop its KV cache with the engine's own machinery, which
knows about memory we cannot see (CUDA graphs, the KV block pool).

Integrity: the engine restores its weights itself and exposes no checksum, so
the parked entry carries the checksum ``engine:<kind>``, a marker the agent
compares like any other. It proves the engine said it restored, not the bytes:
docs/node-agent.md says so, and a trainer that needs byte-level proof for an
engine's weights can register them with ``register_torch`` as well.
"""

from __future__ import annotations

from typing import Any

from rlix.client.hooks import Parked, Restored


class EngineHook:
    def __init__(self, name: str, engine: Any, *, sleep_level: int = 1) -> None:
        self.name = name
        self._engine = engine
        self._level = sleep_level
        self.kind = engine_kind(engine)
        if self.kind is None:
            raise TypeError(
                f"{type(engine).__name__} has neither sleep()/wake_up() (vLLM) nor "
                "release_memory_occupation()/resume_memory_occupation() (SGLang)"
            )

    def offload(self) -> Parked:
        if self.kind == "vllm":
            self._engine.sleep(level=self._level)
        else:
            self._engine.release_memory_occupation()
        return {"engine": (0, f"engine:{self.kind}")}

    def restore(self) -> Restored:
        if self.kind == "vllm":
            self._engine.wake_up()
        else:
            self._engine.resume_memory_occupation()
        return {"engine": f"engine:{self.kind}"}


def engine_kind(engine: Any) -> str | None:
    if callable(getattr(engine, "sleep", None)) and callable(getattr(engine, "wake_up", None)):
        return "vllm"
    if callable(getattr(engine, "release_memory_occupation", None)) and callable(
        getattr(engine, "resume_memory_occupation", None)
    ):
        return "sglang"
    return None
