"""Integrations of the RLix client library with RL training frameworks.

Each integration lives in its own module and imports its framework lazily, so
``import rlix.integrations`` stays as cheap as ``import rlix``:

* :mod:`rlix.integrations.trl`: TRL's online trainers (GRPO, RLOO), one line:
  ``rlix.integrations.trl.attach(trainer)``. Install with ``pip install rlix[trl]``.
* :mod:`rlix.integrations.rllib`: Ray RLlib, new API stack:
  ``config.callbacks(rlix.integrations.rllib.RLixCallbacks)``. Install with
  ``pip install rlix[rllib]``.

Integrations use only rlix's public client API (``rlix.phase``,
``rlix.register_torch``, ``rlix.safe_point``), never the agent or operator.
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager
from typing import Any

import rlix

__all__ = ["PhaseSwitcher"]


class PhaseSwitcher:
    """Hold exactly one ``rlix.phase`` block open and switch it from hooks.

    Frameworks call us from callbacks (``on_step_begin``, ``on_step_end``, ...),
    not around a ``with`` statement, so the block is entered and left by hand.
    Switching leaves the old block and enters the new one: that instant is a
    phase boundary, where a pending suspend may take effect. While a block is
    open, the registered tensors are never moved under the trainer's feet;
    :meth:`safe_point` is the only other place a suspend can land.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._block: AbstractContextManager[Any] | None = None
        self.current: str | None = None

    def switch(self, name: str) -> None:
        """Enter phase ``name`` (a no-op if it is already the current one)."""
        with self._lock:
            if name == self.current:
                return
            if rlix.Phase.parse(name) is None:  # fail before leaving the current phase
                valid = ", ".join(p.value for p in rlix.Phase)
                raise ValueError(f"unknown phase {name!r}; valid phases: {valid}")
            block = rlix.phase(name)
            self.close()
            block.__enter__()
            self._block, self.current = block, name

    def close(self) -> None:
        """Leave the open block, if any (the process is then at a boundary)."""
        with self._lock:
            block, self._block, self.current = self._block, None, None
            if block is not None:
                block.__exit__(None, None, None)

    def safe_point(self) -> None:
        """Let a pending suspend happen here; the open block stays open."""
        rlix.safe_point()
