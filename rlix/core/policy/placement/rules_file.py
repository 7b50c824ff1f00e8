"""The interference matrix a deployment decides sharing with, read from a file once.

The extender (where a pod may go), the operator (which gangs to admit where,
which to park) and the node agent's phase gate (who works now on a shared GPU)
read the same file, the JSON ``make gpu-check`` writes (``hack/gpu-interference.py``),
so the component that places a pod, the one that admits its gang and the one
that gates its phases judge a pair the same way. Without a file the extender
and the operator keep ``DEFAULT_RULES`` (rules 1-3: any two jobs of one
priority may share a GPU), the phase gate the shipped H200 measurement.
Instead of a file, ``--interference time-slicing`` names the built-in bound
(``sharing.TIME_SLICING_CELLS``: what time slices allow on any GPU), for a
cluster that has measured no matrix of its own.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from rlix.core.policy.placement.sharing import (
    BUSY_SHAPES,
    TIME_SLICING_CELLS,
    Cells,
    SharingRules,
)

log = logging.getLogger(__name__)

# The file's tables: how the GPUs were shared while it was measured.
MODES: Final = ("time_slicing", "mps")
NOISE: Final = 0.01  # measured coefficients this far below 0 are rounding, not speed-ups
# Matrices that ship with RLix, by the name ``--interference`` takes instead of
# a file (a file of that name: give it a path, ./time-slicing). Each holds only
# for the mode named with it.
BUILTIN: Final = {"time-slicing": (TIME_SLICING_CELLS, "time_slicing")}

# What ``--interference`` names: a matrix file, or a built-in's name.
Source = Path | str


def cells_from_document(doc: Mapping[str, object], mode: str = "time_slicing") -> Cells:
    """The ``mode`` table of a hack/gpu-interference.py document (already parsed).

    A missing cell, a non-number or a coefficient below -NOISE is an error
    naming the cell: a malformed file must not silently become "no interference".
    """
    if mode not in MODES:
        raise ValueError(f"interference mode {mode!r}: expected one of {', '.join(MODES)}")
    block = doc.get(mode)
    if not isinstance(block, Mapping) or not isinstance(block.get("slowdown"), Mapping):
        raise ValueError(f"interference document has no {mode}.slowdown table")
    table = block["slowdown"]
    cells = []
    for a in BUSY_SHAPES:
        row = table.get(str(a))
        if not isinstance(row, Mapping):
            raise ValueError(f"interference document: {mode}.slowdown.{a} is missing")
        for b in BUSY_SHAPES:
            value = row.get(str(b))
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"interference document: {mode}.slowdown.{a}.{b} is not a number")
            if value < -NOISE:
                raise ValueError(f"interference document: {mode}.slowdown.{a}.{b} = {value} < 0")
            cells.append((a, b, max(0.0, float(value))))
    return tuple(cells)


def document_from_json(text: str) -> dict[str, object]:
    """A matrix file's text as a document; ValueError (saying why) for text that is
    not a JSON object. Callers read the file and name it."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    return doc


def read_matrix(path: Path, mode: str = "time_slicing") -> Cells:
    """The cells of ``path``'s ``mode`` table; ValueError naming the file and why."""
    try:
        return cells_from_document(document_from_json(path.read_text(encoding="utf-8")), mode)
    except (OSError, ValueError) as exc:
        raise ValueError(f"--interference {path}: {exc}") from None


def source(text: str) -> Source:
    """``--interference``'s value: a built-in's name as given, anything else a path."""
    return text if text in BUILTIN else Path(text)


def builtin_cells(name: str, mode: str) -> Cells:
    """A built-in matrix; ValueError where the GPUs are shared another way than
    the one it holds for (the time-slicing bound says nothing of MPS)."""
    cells, holds_for = BUILTIN[name]
    if mode != holds_for:
        raise ValueError(
            f"--interference {name} holds only for --interference-mode {holds_for}, not "
            f"{mode}: under {mode} measure the GPUs' own matrix (`make gpu-check`) and "
            "give its file"
        )
    return cells


def rules_from(path: Source | None, mode: str, *, default: SharingRules) -> SharingRules:
    """``default`` deciding with the matrix ``path`` names (``default`` itself without one)."""
    if path is None:
        return default
    if isinstance(path, str):
        return dataclasses.replace(default, interference=builtin_cells(path, mode))
    return dataclasses.replace(default, interference=read_matrix(path, mode))


def from_args(args: argparse.Namespace, *, default: SharingRules) -> SharingRules:
    """The rules ``add_arguments``' flags ask for, with the start-up log line said;
    ValueError (naming the file and why) for a matrix that cannot be read."""
    rules = with_gate_flags(
        rules_from(args.interference, args.interference_mode, default=default), args
    )
    log.info("%s", describe(rules, args.interference, args.interference_mode))
    return rules


def with_gate_flags(rules: SharingRules, args: argparse.Namespace) -> SharingRules:
    """``rules`` as the nodes' phase gate runs: ``--park-at-gate`` (rule 6 by
    turns) or ``--no-phase-gate`` (pairs judged as they drift); ValueError
    for both."""
    parks, no_gate = getattr(args, "park_at_gate", False), getattr(args, "no_phase_gate", False)
    if parks and no_gate:
        raise ValueError(
            "--park-at-gate says the node agents park at their phase gate, --no-phase-gate "
            "that they run none: give one"
        )
    if parks:
        return dataclasses.replace(rules, parks_at_gate=True)
    if no_gate:
        return dataclasses.replace(rules, phase_gate=False)
    return rules


def origin(path: Source | None, mode: str) -> str:
    """Where a component's matrix comes from, for its start-up log."""
    if isinstance(path, str):
        return f"the built-in {path} bound (no measurement: two busy phases split a GPU)"
    if path is not None:
        return f"{path} ({mode})"
    return "the shipped H200 measurement"


def describe(rules: SharingRules, path: Source | None, mode: str) -> str:
    """One line for a component's start-up log: which rules it decides with."""
    if rules.interference is None:
        return (
            "sharing rules 1-3 (no interference matrix: any two jobs of one priority "
            f"may share a GPU, at most {rules.max_jobs_per_gpu} per GPU)"
        )
    fit = (
        "both peaks fit one GPU, or, for a pair that takes turns (the nodes park at the "
        "gate), the larger peak and a CUDA context"
        if rules.parks_at_gate
        else "both peaks fit one GPU"
    )
    gate = (
        "taking turns where the nodes' phase gate would make them"
        if rules.phase_gate
        else "as its pods drift (the nodes run no phase gate)"
    )
    return (
        f"sharing rules 1-6 with the interference matrix from {origin(path, mode)}: a pair shares "
        f"only where it delivers >= {rules.min_pair_progress:.2f} GPUs of progress, {gate}, "
        f"and {fit}"
    )


def add_arguments(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    effect: str,
    *,
    park_at_gate: bool = True,
) -> None:
    """``--interference FILE``, ``--interference-mode`` and (``park_at_gate``)
    ``--park-at-gate``; ``effect`` says what the matrix changes in this
    component and what it does without one. The node agent has a
    ``--park-at-gate`` of its own (it is the one that parks)."""
    parser.add_argument(
        "--interference",
        type=source,
        default=None,
        metavar="FILE",
        help=f"the interference matrix, the JSON `make gpu-check` writes for the "
        f"cluster's GPUs (bench/results/gpu_interference.json is an H200's), or "
        f"time-slicing: the built-in bound for GPUs shared by time slices when none was "
        f"measured (two busy phases split a GPU; only idle phases make a pair pay): {effect}",
    )
    parser.add_argument(
        "--interference-mode",
        choices=MODES,
        default="time_slicing",
        help="which of the file's tables: how the GPUs are shared (default: %(default)s)",
    )
    if park_at_gate:
        parser.add_argument(
            "--park-at-gate",
            action="store_true",
            help="the node agents park at the phase gate (their --phase-gate "
            "--park-at-gate; chart: nodeAgent.phaseGate.parkAtGate): with a matrix, two "
            "pods that take turns need room on a GPU for the larger of their peaks and a "
            "CUDA context, not for both peaks (sharing rule 6 by turns), and the conductor "
            "parks no such pair for overflow. Give it to the extender and the operator "
            "together, and only where every GPU node's agent parks at the gate; on "
            "gpu-claims nodes the claims still sum both peaks, so the nodes need memory "
            "overcommit for it (docs/node-agent.md, 'Parking at the gate')",
        )
        parser.add_argument(
            "--no-phase-gate",
            action="store_true",
            help="the node agents run no phase gate (chart: nodeAgent.phaseGate.enabled "
            "false): with a matrix, rule 5 judges a pair of pods that idle part of their "
            "cycle as they run then, drifting in and out of each other's busy phases, not "
            "as the gate would make them take turns (docs/extender.md, 'Sharing rules')",
        )
