"""charts/rlix without a cluster: lint, generated CRDs, documented values.

Every helm call runs with Helm 3 and with Helm 4: users run either.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from rlix.devcluster.toolchain import HELM_BINARIES, bin_dir, versions

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "rlix"
KUBE_VERSION = versions(ROOT)["K8S_VERSION"]

Helm = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(params=HELM_BINARIES)
def helm(request: pytest.FixtureRequest) -> Helm:
    binary = bin_dir() / str(request.param)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(binary), *args], check=False, capture_output=True, text=True)

    return run


def test_both_helm_majors_are_the_pinned_versions() -> None:
    pinned = versions(ROOT)
    for binary, version in zip(
        HELM_BINARIES, (pinned["HELM_VERSION"], pinned["HELM4_VERSION"]), strict=True
    ):
        out = subprocess.run(
            [str(bin_dir() / binary), "version", "--short"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        assert out.startswith(f"v{version}"), (binary, out)


def test_chart_crds_are_the_generated_ones() -> None:
    generated = sorted(p.name for p in (ROOT / "crds").glob("*.yaml"))
    assert generated, "crds/ holds the generated CRDs"
    for name in generated:
        chart_copy = CHART / "crds" / name
        assert chart_copy.is_file(), f"{name} missing from the chart: run `make generate`"
        assert chart_copy.read_text() == (ROOT / "crds" / name).read_text(), (
            f"charts/rlix/crds/{name} drifted from crds/{name}: run `make generate`"
        )


def test_helm_lint_is_clean(helm: Helm) -> None:
    result = helm("lint", str(CHART), "--strict", "--kube-version", KUBE_VERSION)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_value_is_documented() -> None:
    """Every key in values.yaml has a comment directly above it.

    Leaf maps written inline or nested under a documented key (resources'
    requests/limits, a nodeSelector's labels, toleration list items) count as
    documented by their parent.
    """
    lines = (CHART / "values.yaml").read_text().splitlines()
    undocumented = []
    parents: list[tuple[int, bool]] = []  # (indent, documented) of enclosing keys
    for i, line in enumerate(lines):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        while parents and parents[-1][0] >= indent:
            parents.pop()
        documented = i > 0 and lines[i - 1].strip().startswith("#")
        # Below a documented second-level key (resources, nodeSelector, ...).
        inherited = bool(parents) and parents[-1][0] >= 2 and parents[-1][1]
        if ":" in stripped and not (documented or inherited or stripped.startswith("-")):
            undocumented.append(f"line {i + 1}: {stripped}")
        if stripped.endswith(":"):
            parents.append((indent, documented))
    assert not undocumented, "document these values.yaml keys:\n" + "\n".join(undocumented)


@pytest.mark.parametrize(
    "values",
    [
        [],
        ["--set", "metrics.serviceMonitor.enabled=true"],
        ["--set", "global.imageRegistry=r.example"],
    ],
    ids=["defaults", "servicemonitor", "registry"],
)
def test_chart_renders_valid_yaml(helm: Helm, values: list[str]) -> None:
    result = helm("template", "t", str(CHART), "--kube-version", KUBE_VERSION, *values)
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "DaemonSet", "ClusterRole", "ConfigMap"} <= kinds
    images = [
        c["image"]
        for d in docs
        if d["kind"] in {"Deployment", "DaemonSet"}
        for c in d["spec"]["template"]["spec"]["containers"]
    ]
    if "global.imageRegistry=r.example" in values:
        assert all(i.startswith("r.example/") for i in images), images


def test_operator_mounts_the_socket_dir_the_agent_serves_in(helm: Helm) -> None:
    """One value (nodeAgent.socketDir) for the agent's --socket and the operator's mount."""
    result = helm(
        "template", "t", str(CHART), "--kube-version", KUBE_VERSION,
        "--set", "nodeAgent.socketDir=/var/run/rlix-test",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]

    def args_of(kind: str, name: str) -> list[str]:
        (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
        (container,) = found["spec"]["template"]["spec"]["containers"]
        return list(container["args"])

    assert "--socket=/var/run/rlix-test/agent.sock" in args_of("DaemonSet", "t-rlix-node-agent")
    assert "--agent-socket-dir=/var/run/rlix-test" in args_of("Deployment", "t-rlix-operator")
