"""docs/objects.md's table is the reader's own data, and every row reads as it says.

The table is generated from ``rlix.core.objects.facts.FACTS``; this test fails if
the docs drift from it, if a row has no samples here, and walks every row with
a good value, a malformed one and an oversized one, both through the row alone
and placed in a whole object read by the one reader.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rlix.core.objects import FACTS, Fact, read_node, read_pod, read_rljob
from rlix.core.objects.facts import Reading
from rlix.core.objects.table import block
from rlix.core.phases import Phase
from rlix.core.snapshot import GPU

DOCS = Path(__file__).resolve().parents[2] / "docs" / "objects.md"
HUGE = "9" * 5000

# (kind, key) -> (good raw value, what it reads as, a malformed raw value)
SAMPLES: dict[tuple[str, str], tuple[Any, Any, Any]] = {
    ("Pod", "rlix.io/job"): ("trainer-a", "trainer-a", 7),
    ("Pod", "rlix.io/role"): ("rollout", "rollout", "r" * 64),
    ("Pod", "rlix.io/preemptible"): ("false", False, "perhaps"),
    ("Pod", "rlix.io/priority"): ("-5", -5, "high"),
    ("Pod", "spec.priority"): (100, 100, 2**31),
    ("Pod", "rlix.io/gang-size"): ("4", 4, "0"),
    ("Pod", "rlix.io/gpu-memory-mib"): ('{"rollout": 100}', {Phase.ROLLOUT: 100}, '{"warmup": 1}'),
    ("Pod", "rlix.io/phase"): ("Weight-Sync", Phase.WEIGHT_SYNC, "warmup"),
    ("Pod", "rlix.io/phase-seconds"): (
        '{"rollout": 240, "weight-sync": 10.5, "idle": 60}',
        {Phase.ROLLOUT: 240.0, Phase.WEIGHT_SYNC: 10.5, Phase.IDLE: 60.0},
        '{"idle": 60}',
    ),
    ("Pod", "rlix.io/suspended"): ("true", True, "maybe"),
    ("Pod", "rlix.io/loads-through-gate"): ("true", True, "maybe"),
    ("Pod", "rlix.io/gpu-indices"): ("0, 3", (0, 3), "a,b"),
    ("Pod", "rlix.io/admitted-node"): ("n1", "n1", ["n1"]),
    ("Pod", "spec.[init]containers[*].resources.{limits,requests}[nvidia.com/gpu]"): (
        "2",
        2,
        "1.5",
    ),
    ("Pod", "rlix.io/claimed-gpus"): ("2", 2, "two"),
    ("Pod", "spec.nodeName"): ("n1", "n1", {"name": "n1"}),
    ("Node", "nvidia.com/gpu.count"): ("8", 8, "-1"),
    ("Node", "status.allocatable[nvidia.com/gpu] (else status.capacity)"): ("32", 32, "lots"),
    ("Node", "nvidia.com/gpu.replicas"): ("4", 4, "0"),
    ("Node", "nvidia.com/gpu.memory"): ("81559", 81559, "80Gi"),
    ("Node", "nvidia.com/gpu.product"): ("H200", "H200", 3),
    ("Node", "rlix.io/nvlink-domain"): ("rack-1", "rack-1", "d" * 64),
    ("Node", "rlix.io/gpus"): (
        '[{"index": 1, "memoryMiB": 10, "usedMiB": 2, "utilization": 0.5}]',
        (GPU(index=1, memory_mib=10, used_mib=2, utilization=0.5),),
        '[{"index": 0, "memoryMiB": 10, "utilization": NaN}]',
    ),
    ("Node", "rlix.io/gpu-claims"): ("true", True, "maybe"),
    ("Node", "rlix.io/memory-overcommit"): ("1.5", 1.5, "0.5"),
    ("Node", "spec.unschedulable"): (True, True, "yes"),
    ("RLJob", "spec.priority"): (10, 10, -1),
    ("RLJob", "spec.preemptibleRollout"): (False, False, "no"),
    ("RLJob", "spec.algorithm"): ("GRPO", "GRPO", "grpo"),
    ("RLJob", "status.state"): ("Running", "Running", "Sleeping"),
    ("RLJob", "status.phase"): ("training", Phase.TRAINING, 3),
    ("RLJob", "status.gpus"): (8, 8, True),
    ("RLJob", "status.iterations"): (12, 12, 1.5),
}


def row_id(fact: Fact[Any]) -> str:
    return f"{fact.kind}:{fact.key}"


def test_the_docs_table_is_generated_from_the_rows() -> None:
    assert block() in DOCS.read_text(), "regenerate docs/objects.md's table from facts.py"


def test_every_row_has_samples() -> None:
    assert {(f.kind, f.key) for f in FACTS} == set(SAMPLES)


@pytest.mark.parametrize("fact", FACTS, ids=row_id)
def test_each_row_reads_good_bad_oversized_and_absent_values(fact: Fact[Any]) -> None:
    good, expected, bad = SAMPLES[(fact.kind, fact.key)]
    reading = Reading(fact.kind, "ns/x")
    assert reading.get(fact, good) == expected
    assert reading.get(fact, None) == fact.default
    assert reading.errors == []
    for malformed in (bad, HUGE, "[" * 100_000):
        assert reading.get(fact, malformed) == fact.on_bad
        error = reading.errors.pop()
        assert (error.kind, error.name, error.where) == (fact.kind, "ns/x", fact.where)
        assert error.why and error.got and HUGE not in str(error)


def _place(fact: Fact[Any], raw: Any) -> dict[str, Any]:
    """An object of the row's kind carrying ``raw`` where the row says."""
    obj: dict[str, Any] = {"metadata": {"name": "x", "namespace": "ns", "labels": {},
                                        "annotations": {}}, "spec": {}, "status": {}}  # fmt: skip
    if fact.source in ("label", "label or annotation"):
        obj["metadata"]["labels"][fact.key] = raw
    elif fact.source == "annotation":
        obj["metadata"]["annotations"][fact.key] = raw
    elif fact.key.startswith("spec.[init]containers"):
        obj["spec"]["containers"] = [{"resources": {"limits": {"nvidia.com/gpu": raw}}}]
    elif fact.key.startswith("status.allocatable"):
        obj["status"]["allocatable"] = {"nvidia.com/gpu": raw}
    else:
        part, field = fact.key.split(".", 1)
        obj[part][field] = raw
    return obj


READERS = {"Pod": read_pod, "Node": read_node, "RLJob": read_rljob}


@pytest.mark.parametrize("fact", FACTS, ids=row_id)
def test_each_row_placed_in_an_object_goes_through_the_one_reader(fact: Fact[Any]) -> None:
    read = READERS[fact.kind]
    good, _, bad = SAMPLES[(fact.kind, fact.key)]
    assert read(_place(fact, good)).errors == ()
    for malformed in (bad, HUGE):
        (error,) = read(_place(fact, malformed)).errors
        assert error.where == fact.where and error.kind == fact.kind
        assert error.name in ("ns/x", "x")


def test_describe_and_the_model_agree_on_unset_fields() -> None:
    facts = read_rljob({"metadata": {"name": "j"}, "spec": {"roles": []}})
    assert (facts.priority, facts.preemptible_rollout, facts.algorithm) == (0, True, "Other")
