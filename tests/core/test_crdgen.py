"""The generated CRD: structural, complete, and in sync with crds/."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlix.core import names
from rlix.core.crdgen import openapi_schema, rljob_crd
from rlix.core.phases import Phase

ROOT = Path(__file__).resolve().parents[2]
CORPUS = sorted((ROOT / "tests" / "invalid_manifests").glob("*.yaml"))
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
ROOT_SCHEMA = openapi_schema()


def walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from walk(child, f"{path}.{name}")
    if "items" in node:
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")


def _has_type(value: Any, kind: str) -> bool:
    if isinstance(value, bool):
        return kind == "boolean"
    expected = {"object": dict, "array": list, "string": str, "integer": int, "boolean": bool}
    if kind == "number":
        return isinstance(value, int | float)
    return isinstance(value, expected.get(kind, object))


def schema_errors(value: Any, node: dict[str, Any], path: str) -> list[str]:
    """A small OpenAPI v3 checker for the keywords crdgen emits (no CEL)."""
    kind = node.get("type")
    if kind is not None and not _has_type(value, kind):
        return [f"{path}: must be of type {kind}"]
    out: list[str] = []
    if "enum" in node and value not in node["enum"]:
        out.append(f"{path}: Unsupported value")
    if "minimum" in node and value < node["minimum"]:
        out.append(f"{path}: should be greater than or equal to {node['minimum']}")
    if "maximum" in node and value > node["maximum"]:
        out.append(f"{path}: should be less than or equal to {node['maximum']}")
    if isinstance(value, str):
        if len(value) > node.get("maxLength", len(value)) or len(value) < node.get("minLength", 0):
            out.append(f"{path}: length out of bounds")
        if "pattern" in node and not re.search(node["pattern"], value):
            out.append(f"{path}: should match {node['pattern']}")
    if isinstance(value, list):
        if not node.get("minItems", 0) <= len(value) <= node.get("maxItems", len(value)):
            out.append(f"{path}: item count out of bounds")
        keys = node.get("x-kubernetes-list-map-keys", [])
        seen: set[tuple[Any, ...]] = set()
        for i, item in enumerate(value):
            out += schema_errors(item, node["items"], f"{path}[{i}]")
            key = tuple(item.get(k) for k in keys) if keys and isinstance(item, dict) else None
            if key is not None and key in seen:
                out.append(f"{path}[{i}]: Duplicate value")
            if key is not None:
                seen.add(key)
    if isinstance(value, dict):
        if len(value) < node.get("minProperties", 0):
            out.append(f"{path}: should have at least {node['minProperties']} properties")
        props = node.get("properties", {})
        for name in node.get("required", []):
            if name not in value:
                out.append(f"{path}.{name}: Required value".lstrip("."))
        for name, child in value.items():
            sub = f"{path}.{name}".lstrip(".")
            if name in props:
                out += schema_errors(child, props[name], sub)
            elif isinstance(node.get("additionalProperties"), dict):
                out += schema_errors(child, node["additionalProperties"], sub)
            elif node.get("x-kubernetes-preserve-unknown-fields"):
                continue  # a pod template's own fields: Pod validation judges them
            elif props:  # `metadata: {type: object}` is checked by the API server itself
                out.append(f'unknown field "{sub}"')
    return out


def test_checked_in_crd_matches_the_models() -> None:
    """`make verify` in test form: crds/ must be regenerated after a model change."""
    on_disk = yaml.safe_load((ROOT / "crds" / "rlix.io_rljobs.yaml").read_text())
    assert on_disk == rljob_crd()


def test_crd_uses_the_shared_names() -> None:
    spec = rljob_crd()["spec"]
    assert spec["group"] == names.GROUP
    assert spec["names"]["shortNames"] == [names.SHORT_NAME]
    (version,) = spec["versions"]
    assert version["name"] == names.VERSION
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns[:3] == ["State", "Phase", "GPUs"] and columns[-1] == "Age"
    assert "Reason" in columns  # why the job is Queued / Failed, without `describe`
    # -o wide only: pods waiting their turn at the phase gate (why a trainer reads idle).
    (waiting,) = [c for c in version["additionalPrinterColumns"] if c["name"] == "Waiting"]
    assert waiting["jsonPath"] == ".status.waitingForTurn" and waiting["priority"] == 1
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert status["waitingForTurn"]["type"] == "integer"


# The only nodes that keep unknown fields: a role's pod template spec and its
# containers, whose full schemas the API server applies when the pod is created.
PASSED_THROUGH = {".spec.roles[].template.spec", ".spec.roles[].template.spec.containers[]"}


def test_schema_is_structural() -> None:
    """No refs, no typed anyOf, a type on every node, unknown fields only in templates."""
    for path, node in walk(ROOT_SCHEMA):
        assert "$ref" not in node and "anyOf" not in node and "title" not in node, path
        if "x-kubernetes-preserve-unknown-fields" in node:
            assert path in PASSED_THROUGH, path
        assert node.get("additionalProperties") is not False, path
        assert "type" in node, f"{path} has no type"
        for name in node.get("x-kubernetes-list-map-keys", []):
            assert name in node["items"]["required"], f"{path}: map key {name} not required"


def test_every_string_and_list_in_spec_is_bounded() -> None:
    """CEL cost estimation and etcd size both need limits on strings and lists."""
    for path, node in walk(ROOT_SCHEMA["properties"]["spec"], "spec"):
        if node["type"] == "string" and "enum" not in node:
            assert "maxLength" in node, path
        if node["type"] == "array":
            assert "maxItems" in node, path


def test_phase_maps_list_exactly_the_shared_phases() -> None:
    role = ROOT_SCHEMA["properties"]["spec"]["properties"]["roles"]["items"]
    assert set(role["properties"]["gpuMemoryMiB"]["properties"]) == {p.value for p in Phase}
    status = ROOT_SCHEMA["properties"]["status"]["properties"]
    assert set(status["phase"]["enum"]) == {p.value for p in Phase}


def test_conditions_follow_the_metav1_shape() -> None:
    condition = ROOT_SCHEMA["properties"]["status"]["properties"]["conditions"]["items"]
    assert {"type", "status", "reason", "lastTransitionTime"} <= set(condition["required"])
    assert "observedGeneration" in condition["properties"]


def _corpus(layer: str) -> list[Path]:
    return [p for p in CORPUS if f"# layer: {layer}\n" in p.read_text()]


@pytest.mark.parametrize("path", _corpus("schema"), ids=lambda p: p.stem)
def test_generated_schema_rejects_schema_level_corpus(path: Path) -> None:
    text = path.read_text()
    field = re.search(r"^# field: (\S+)$", text, re.M)
    assert field is not None
    errors = schema_errors(yaml.safe_load(text), ROOT_SCHEMA, "")
    assert any(field.group(1) in e for e in errors), errors


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_generated_schema_accepts_examples(path: Path) -> None:
    assert schema_errors(yaml.safe_load(path.read_text()), ROOT_SCHEMA, "") == []


def test_template_passes_pod_fields_through_but_not_a_misspelt_containers() -> None:
    example = yaml.safe_load((ROOT / "examples" / "grpo-trl.yaml").read_text())
    template = example["spec"]["roles"][0]["template"]
    template["spec"]["affinity"] = {"nodeAffinity": {}}  # any PodSpec field passes
    assert schema_errors(example, ROOT_SCHEMA, "") == []
    template["spec"]["containres"] = template["spec"].pop("containers")
    template["metadata"]["name"] = "ignored"
    errors = schema_errors(example, ROOT_SCHEMA, "")
    assert "spec.roles[0].template.spec.containers: Required value" in errors, errors
    assert 'unknown field "spec.roles[0].template.metadata.name"' in errors, errors
