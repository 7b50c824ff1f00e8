"""What this node's pods declare in their annotations, for the phase gate.

The agent's conducting loop lists the node's pods every pass anyway; the gate
reads what it needs from that listing (each pod's cycle, its memory peak), so
no new call reaches the API server. The gate reads it at every event it
decides on, so each distinct declaration is parsed once, and kept while a pod
listed now still carries it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from rlix.agent.conducting import NodePod

T = TypeVar("T")


class Declared(Generic[T]):
    """Pod uid -> what it declares, from the node's pods as last listed.

    ``key``: what of a pod its declaration depends on (None: it declares
    nothing); ``parse``: the declaration (None: none, or malformed; it is
    parsed, and any warning logged, once per key)."""

    def __init__(
        self,
        key: Callable[[NodePod], Hashable | None],
        parse: Callable[[NodePod], T | None],
    ) -> None:
        self._key = key
        self._parse = parse
        self._listing: Callable[[], Sequence[NodePod]] = tuple
        self._parsed: dict[Hashable, T | None] = {}

    def follow(self, listing: Callable[[], Sequence[NodePod]]) -> None:
        """Read pods from ``listing`` (the conducting loop's last listing)."""
        self._listing = listing

    def __call__(self) -> dict[str, T]:
        out: dict[str, T] = {}
        parsed: dict[Hashable, T | None] = {}
        for pod in self._listing():
            key = self._key(pod)
            if key is None:
                continue
            if key in parsed:
                value = parsed[key]
            elif key in self._parsed:
                value = parsed[key] = self._parsed[key]
            else:
                value = parsed[key] = self._parse(pod)
            if value is not None:
                out[pod.uid] = value
        self._parsed = parsed  # only the keys listed pods carry now
        return out
