"""Every manifest in tests/invalid_manifests is refused by `kubectl apply`, naming the field.

Schema, CEL and webhook layers all answer through the real API server here; the
same corpus runs through the pure rules in tests/core/test_rljob_validation.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e._operator_process import OperatorProcess, operator_with_extender
from e2e.kube import get_json, wait_for

ROOT = Path(__file__).resolve().parent.parent
CORPUS = sorted((ROOT / "tests" / "invalid_manifests").glob("*.yaml"))
PROBE = ROOT / "tests" / "invalid_manifests" / "16-memory-over-any-gpu.yaml"


def header(path: Path, key: str) -> str:
    prefix = f"# {key}: "
    line = next(x for x in path.read_text().splitlines() if x.startswith(prefix))
    return line[len(prefix) :].strip()


@pytest.fixture(scope="module")
def operator(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    yield from operator_with_extender(cluster, tmp_path_factory.mktemp("operator"))


@pytest.fixture(scope="module")
def corpus_namespace(cluster: Any, operator: OperatorProcess) -> Iterator[str]:
    """One namespace for the whole corpus (each case must leave it empty anyway)."""
    name = f"invalid-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", name)

    def webhook_knows_the_nodes() -> bool:
        # A server-side dry run goes through the webhook and stores nothing.
        result = cluster.kubectl(
            "apply", "--dry-run=server", "-n", name, "-f", str(PROBE), check=False
        )
        return bool(result.returncode != 0)

    wait_for("webhook sees the GPU nodes", webhook_knows_the_nodes, timeout_s=60)
    try:
        yield name
    finally:
        cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_apply_is_refused_naming_the_field_and_leaves_nothing(
    cluster: Any, corpus_namespace: str, path: Path
) -> None:
    result = cluster.kubectl("apply", "-n", corpus_namespace, "-f", str(path), check=False)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert header(path, "field") in output, output
    assert get_json(cluster, "rlj", "-n", corpus_namespace)["items"] == []
