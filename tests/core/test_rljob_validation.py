"""Every invalid manifest in the corpus is refused, and the refusal names the field.

The same corpus is applied to a real API server in e2e/test_invalid_manifests.py;
here it runs through the pure rules the webhook and the operator share.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rlix.core.snapshot import ClusterSnapshot, Node
from rlix.core.validation import Capacity, field_path, validate_manifest

ROOT = Path(__file__).resolve().parents[2]
CORPUS = sorted((ROOT / "tests" / "invalid_manifests").glob("*.yaml"))
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
# The local test cluster: 4 nodes x 8 H100 80GB.
CAPACITY = Capacity(max_gpu_memory_mib=81920, max_gpus_per_node=8, total_gpus=32)


def expectation(path: Path) -> dict[str, str]:
    """The ``# field:`` / ``# layer:`` header each corpus file carries."""
    header: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        key, sep, value = line[1:].partition(":")
        if sep and key.strip() in ("field", "layer"):
            header[key.strip()] = value.strip()
    return header


def test_corpus_is_big_enough_and_covers_every_layer() -> None:
    assert len(CORPUS) >= 25
    layers = {expectation(p)["layer"] for p in CORPUS}
    assert layers == {"schema", "cel", "webhook"}


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_invalid_manifest_is_rejected_naming_the_field(path: Path) -> None:
    errors = validate_manifest(yaml.safe_load(path.read_text()), CAPACITY)
    field = expectation(path)["field"]
    assert errors, f"{path.name} was accepted"
    assert any(e.path.startswith(field) for e in errors), [str(e) for e in errors]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_examples_are_valid_on_the_test_cluster(path: Path) -> None:
    assert validate_manifest(yaml.safe_load(path.read_text()), CAPACITY) == []


def test_webhook_rules_need_the_cluster() -> None:
    """Without capacity the cluster-aware rules cannot fire: the job waits instead."""
    path = next(p for p in CORPUS if expectation(p)["layer"] == "webhook")
    assert validate_manifest(yaml.safe_load(path.read_text()), None) == []


def test_capacity_comes_from_schedulable_gpu_nodes_only() -> None:
    snapshot = ClusterSnapshot.of(
        [
            Node("a", gpu_count=8, gpu_memory_mib=81920),
            Node("b", gpu_count=4, gpu_memory_mib=143771),
            Node("cordoned", gpu_count=16, gpu_memory_mib=200000, schedulable=False),
            Node("cpu", gpu_count=0, gpu_memory_mib=0),
        ]
    )
    assert Capacity.of(snapshot) == Capacity(143771, 8, 12)
    assert Capacity.of(ClusterSnapshot.of([Node("cpu", 0, 0)])) is None


def test_field_path_renders_like_kubernetes() -> None:
    assert field_path(("spec", "roles", 0, "gpuMemoryMiB", "rollout")) == (
        "spec.roles[0].gpuMemoryMiB.rollout"
    )


def _with_template(**spec: object) -> dict[str, object]:
    manifest = yaml.safe_load((ROOT / "examples" / "grpo-trl.yaml").read_text())
    manifest["spec"]["roles"][0]["template"]["spec"].update(spec)
    return manifest


def test_every_example_is_valid() -> None:
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        assert validate_manifest(yaml.safe_load(path.read_text()), CAPACITY) == [], path.name


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"schedulerName": "default-scheduler"}, "template.spec.schedulerName"),
        ({"restartPolicy": "Always"}, "template.spec.restartPolicy"),
        ({"hostname": "x"}, "template.spec.hostname"),
        ({"subdomain": "x"}, "template.spec.subdomain"),
        ({"priorityClassName": "high"}, "template.spec.priorityClassName"),
        ({"priority": 5}, "template.spec.priority"),
        ({"volumes": [{"name": "rlix-agent-socket", "emptyDir": {}}]}, "template.spec.volumes"),
    ],
)
def test_template_contradicting_rlix_is_refused_naming_the_field(
    spec: dict[str, object], field: str
) -> None:
    errors = validate_manifest(_with_template(**spec), CAPACITY)
    assert [e.path for e in errors if e.path.startswith("spec.roles[0]." + field)], errors


def test_template_may_name_rlixs_own_scheduler_and_restart_policy() -> None:
    manifest = _with_template(schedulerName="rlix-scheduler", restartPolicy="Never")
    assert validate_manifest(manifest, CAPACITY) == []


def test_template_labels_in_rlixs_domain_are_refused() -> None:
    manifest = _with_template()
    manifest["spec"]["roles"][0]["template"]["metadata"]["labels"]["rlix.io/role"] = "x"
    (error,) = validate_manifest(manifest, CAPACITY)
    assert error.path == "spec.roles[0].template.metadata.labels[rlix.io/role]"


def test_template_with_short_form_fields_is_refused() -> None:
    manifest = _with_template()
    manifest["spec"]["roles"][0]["command"] = ["python"]
    errors = validate_manifest(manifest, CAPACITY)
    assert any(e.path == "spec.roles[0].template" and "command" in e.message for e in errors)
