"""What the policy has already worked out about one node's load: a typed table per question.

A ``NodeLoad`` is immutable and replaced only when a watch event touches its
node, so an answer derived from it alone stays true for as long as it lives.
The extender asks the same questions of thousands of nodes per call (can these
GPUs hold 30 GiB, what would this pod's shape score here), so ``loads`` and
``scoring`` keep their answers here, each question in its own table with its
own key and value types.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TypeVar

from rlix.core.phases import Phase

__all__ = ["MEMO_LIMIT", "LoadMemo", "ShapeKey", "SharedTerms", "key_id"]

MEMO_LIMIT = 64  # answers kept per node load, all tables together (a few per pod shape)

# A pod shape as scoring sees it: (phase, per-GPU demand in MiB, GPUs, the
# pod's job where this node holds peers of it, else "", and what the sharing
# rules read of the pod: its priority, traits, peak and the rules themselves).
ShapeKey = tuple[Phase | None, int, int, str, object]
# (complement, interleave, packing, chosen GPU indices, pair) of a shape on one
# node; pair is None unless the rules carry an interference matrix and the
# chosen GPUs are shared: then (expected pair progress, the partner jobs).
SharedTerms = tuple[float, float, float, tuple[int, ...], tuple[float, frozenset[str]] | None]

# Interned question keys: how many are kept before the table starts over.
KEY_IDS_LIMIT = 4096

K = TypeVar("K")
V = TypeVar("V")


@dataclass(slots=True)
class LoadMemo:
    # demand MiB (0 = a whole GPU) -> positions of the GPUs that can hold it
    holdable: dict[int, tuple[int, ...]] = field(default_factory=dict)
    # (demand MiB, job) -> the same, without GPUs already holding a pod of the job
    holdable_for_job: dict[tuple[int, str], tuple[int, ...]] = field(default_factory=dict)
    # (demand, job, priority, traits, peak, rules) -> GPU sets a pod may take (sharing rules)
    groups: dict[tuple[object, ...], tuple[tuple[int, ...], ...]] = field(default_factory=dict)
    # the pod's phase -> (complement, interleave) against each GPU's residents
    pairs: dict[Phase | None, tuple[tuple[float, float], ...]] = field(default_factory=dict)
    # a shape -> its load-dependent score terms; None: the shape does not fit
    terms: dict[ShapeKey, SharedTerms | None] = field(default_factory=dict)
    # key_id(shape) -> the locality-free part of its score, or under rule 5 a shared
    # placement's (pair progress, partner jobs); None: it does not fit
    base: dict[int, float | tuple[float, frozenset[str]] | None] = field(default_factory=dict)
    # key_id((demand, job if the node holds it else "", priority, pair traits,
    # rules)) -> the most GPUs such a pod could take here (``NodeLoad.room_for``)
    room: dict[int, int] = field(default_factory=dict)
    # (the room question's key_id, GPUs, peak MiB) -> (fits, reason, resolvable):
    # the filter's verdict, with its sentence, for a pod the room did not admit
    verdicts: dict[tuple[int, int, int], tuple[bool, str, bool]] = field(default_factory=dict)
    jobs: frozenset[str] | None = None  # jobs with a pod on the node
    size: int = 0  # answers stored in the tables since the last clear

    def __len__(self) -> int:
        return self.size

    def remember(self, table: dict[K, V], key: K, value: V) -> V:
        """Store ``value`` in ``table`` (one of this memo's) and return it.

        Bounded: an idle node's load can live for days while pods of ever new
        shapes ask about it, so a full memo starts over.
        """
        if self.size >= MEMO_LIMIT:
            self.clear()
        table[key] = value
        self.size += 1
        return value

    def clear(self) -> None:
        for table in (
            self.holdable,
            self.holdable_for_job,
            self.groups,
            self.pairs,
            self.terms,
            self.base,
            self.room,
            self.verdicts,
        ):
            table.clear()
        self.jobs = None
        self.size = 0


_key_ids: dict[Hashable, int] = {}
_next_id = itertools.count(1)


def key_id(key: Hashable) -> int:
    """A small int that stands for ``key`` in the memo tables keyed by int.

    The filter and the scorer ask one question of hundreds of nodes per call;
    its key holds the ``SharingRules``, whose hash is Python code, and a tuple
    rehashes its items on every lookup. Interned once per call, the per-node
    lookups hash an int. Ids are never reused (the counter only grows), so
    starting the table over costs only misses, never a wrong answer.
    """
    found = _key_ids.get(key)
    if found is None:
        if len(_key_ids) >= KEY_IDS_LIMIT:
            _key_ids.clear()
        found = _key_ids[key] = next(_next_id)
    return found
