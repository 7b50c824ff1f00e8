"""Parsers for RLix's structured values (memory per phase, GPU lists, phases).

Built on the bounded primitives of ``bounds``; each one is a ``Parser`` whose
``bounds`` text is what the docs table prints, so the table and the code that
enforces it cannot disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from rlix.core.objects.bounds import BadValueError, Parser, integer, json_doc, number, text
from rlix.core.phases import Phase
from rlix.core.rljob import MAX_GPU_MEMORY_MIB
from rlix.core.snapshot import GPU

T = TypeVar("T")

# More GPUs than any node has, and room for NVIDIA time-slicing replicas.
MAX_NODE_GPUS = 1024
MAX_GPU_REPLICAS = 1024
MAX_POD_GPUS = MAX_NODE_GPUS
# An all-phases declaration is five keys of short numbers: ~100 characters.
MEMORY_MAX_CHARS = 1024
# The agent publishes one short object per GPU.
NODE_GPUS_MAX_CHARS = 65_536
# Kubernetes object names (DNS subdomains) are at most 253 characters.
NAME_MAX_CHARS = 253
# Label values are at most 63 characters; the API server enforces it for labels,
# RLix enforces it for the same keys written as annotations.
LABEL_MAX_CHARS = 63

MIB = integer(0, MAX_GPU_MEMORY_MIB, what="integer MiB")
_WHOLE_MIB = integer(1, MAX_GPU_MEMORY_MIB)
_GPU_INDEX = integer(0, MAX_NODE_GPUS - 1)
_UTILIZATION = number(0.0, 1.0)
_PHASES = ", ".join(p.value for p in Phase)


_MEMORY_FORMS = 'must be an integer MiB or a non-empty JSON object like {"rollout": 60000}'


def _memory(raw: object) -> dict[Phase, int]:
    try:
        doc = json_doc(raw, max_chars=MEMORY_MAX_CHARS, max_depth=1)
    except BadValueError as exc:
        if "JSON" not in str(exc):
            raise
        raise BadValueError(f"{_MEMORY_FORMS} ({exc})") from None
    if isinstance(doc, int | str) and not isinstance(doc, bool):
        try:
            mib = _WHOLE_MIB(doc)
        except BadValueError as exc:
            raise BadValueError(f"as one number of MiB, {exc}") from None
        return {phase: mib for phase in Phase if phase is not Phase.IDLE}
    if not isinstance(doc, dict) or not doc:
        raise BadValueError(_MEMORY_FORMS)
    return _per_phase(doc, MIB)


def _per_phase(doc: dict[str, object], parse: Parser[T]) -> dict[Phase, T]:
    """A flat {phase: value} object, each value through ``parse``; errors name the phase."""
    out: dict[Phase, T] = {}
    for key, value in doc.items():
        phase = Phase.parse(key)
        if phase is None:
            raise BadValueError(f"has an unknown phase (known: {_PHASES})")
        try:
            out[phase] = parse(value)
        except BadValueError as exc:
            raise BadValueError(f"[{phase.value}] {exc}") from None
    return out


MEMORY = Parser(
    "integer MiB, or JSON {phase: MiB}",
    f"<= {MEMORY_MAX_CHARS} characters, flat, 1..{MAX_GPU_MEMORY_MIB} MiB (0.. per phase)",
    _memory,
)


# A week: an iteration longer than that is a typo (phaseProfile's own bound).
MAX_PHASE_SECONDS = 7 * 24 * 3600
_SECONDS = number(0.0, MAX_PHASE_SECONDS)
_SECONDS_FORM = 'must be a JSON object like {"rollout": 240, "weight-sync": 10, "idle": 60}'


def _phase_seconds(raw: object) -> dict[Phase, float]:
    doc = json_doc(raw, max_chars=MEMORY_MAX_CHARS, max_depth=1)
    if not isinstance(doc, dict) or not doc:
        raise BadValueError(_SECONDS_FORM)
    out = _per_phase(doc, _SECONDS)
    if not any(s > 0 for phase, s in out.items() if phase is not Phase.IDLE):
        raise BadValueError("must give a phase other than idle more than 0 seconds")
    return out


PHASE_SECONDS = Parser(
    "JSON {phase: seconds}",
    f"<= {MEMORY_MAX_CHARS} characters, flat, 0..{MAX_PHASE_SECONDS} s per phase, a busy phase > 0",
    _phase_seconds,
)


def _indices(raw: object) -> tuple[int, ...]:
    body = text(4 * MAX_NODE_GPUS)(raw)
    return tuple(_GPU_INDEX(part) for part in body.split(",") if part.strip())


GPU_INDICES = Parser(
    "comma-separated GPU indices",
    f"<= {4 * MAX_NODE_GPUS} characters, each 0..{MAX_NODE_GPUS - 1}",
    _indices,
)


def _phase(raw: object) -> Phase:
    phase = Phase.parse(text(32)(raw))
    if phase is None:
        raise BadValueError(f"must be one of {_PHASES}")
    return phase


PHASE = Parser("phase name", "<= 32 characters, one of the phases", _phase)


def _node_gpus(raw: object) -> tuple[GPU, ...]:
    doc = json_doc(raw, max_chars=NODE_GPUS_MAX_CHARS, max_depth=2)
    if not isinstance(doc, list) or len(doc) > MAX_NODE_GPUS:
        raise BadValueError(f"must be a JSON list of at most {MAX_NODE_GPUS} GPU objects")
    gpus = []
    for i, g in enumerate(doc):
        if not isinstance(g, Mapping):
            raise BadValueError(f"[{i}] must be an object")
        try:
            gpus.append(
                GPU(
                    index=_GPU_INDEX(g.get("index")),
                    memory_mib=MIB(g.get("memoryMiB")),
                    used_mib=MIB(g.get("usedMiB", 0)),
                    utilization=_UTILIZATION(g.get("utilization", 0.0)),
                )
            )
        except BadValueError as exc:
            raise BadValueError(f"[{i}] {exc}") from None
    return tuple(gpus)


NODE_GPUS = Parser(
    'JSON [{"index", "memoryMiB", "usedMiB", "utilization"}]',
    f"<= {NODE_GPUS_MAX_CHARS} characters, depth 2, <= {MAX_NODE_GPUS} GPUs",
    _node_gpus,
)
