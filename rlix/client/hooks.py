"""Offload hooks: what a process knows how to move off the GPU and back.

A hook parks its memory and reports each parked piece as ``(nbytes, checksum)``
under a name; on restore it brings everything back and reports the checksums
it computes over the restored memory. The agent compares those with the ones
recorded at suspend time, so a restore that is not bit for bit is refused
loudly instead of training on corrupted weights.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

# name -> (nbytes, checksum) at park time; name -> checksum after restore.
Parked = Mapping[str, tuple[int, str]]
Restored = Mapping[str, str]


class OffloadHook(Protocol):
    name: str

    def offload(self) -> Parked: ...

    def restore(self) -> Restored: ...


@dataclass(slots=True)
class CallableHook:
    """A hook from two plain functions (``rlix.register_offload``)."""

    name: str
    offload_fn: Callable[[], Parked | None]
    restore_fn: Callable[[], Restored | None]

    def offload(self) -> Parked:
        return self.offload_fn() or {}

    def restore(self) -> Restored:
        return self.restore_fn() or {}


class HookRegistry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hooks: dict[str, OffloadHook] = {}

    def add(self, hook: OffloadHook) -> None:
        if not hook.name or "/" in hook.name:
            raise ValueError(f"hook name must be non-empty and contain no '/': {hook.name!r}")
        with self._lock:
            if hook.name in self._hooks:
                raise ValueError(f"an offload hook named {hook.name!r} is already registered")
            self._hooks[hook.name] = hook

    def remove(self, name: str) -> None:
        with self._lock:
            self._hooks.pop(name, None)

    def names(self) -> list[str]:
        with self._lock:
            return list(self._hooks)

    def hooks(self) -> list[OffloadHook]:
        with self._lock:
            return list(self._hooks.values())
