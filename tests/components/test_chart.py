"""charts/rlix without a cluster: lint, generated CRDs, documented values, the values schema.

Every helm call runs with Helm 3 and with Helm 4: users run either.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlix.devcluster.toolchain import HELM_BINARIES, bin_dir, versions
from rlix.operator.main import parse_args

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
        [
            "--set",
            "operator.podDisruptionBudget.enabled=true",
            "--set",
            "extender.podDisruptionBudget.enabled=true",
            "--set",
            "scheduler.podDisruptionBudget.enabled=true",
        ],
    ],
    ids=["defaults", "servicemonitor", "registry", "pdbs"],
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


def test_the_operators_grace_comes_from_values(helm: Helm) -> None:
    default = _operator_args(helm)
    assert "--top-grace=0.1" in default and "--class-grace=2" in default
    assert "--aging=0" in default  # off unless asked for
    strict = _operator_args(
        helm,
        "--set", "operator.grace.top=0", "--set", "operator.grace.between=0",
        "--set", "operator.grace.aging=2",
    )  # fmt: skip
    assert "--top-grace=0" in strict and "--class-grace=0" in strict and "--aging=2" in strict
    # The operator accepts what the chart renders.
    names = ("--top-grace", "--class-grace", "--aging")
    flags = [a for a in default + strict if a.startswith(names)]
    parsed = parse_args(flags[:3])
    assert (parsed.top_grace, parsed.class_grace, parsed.aging) == (0.1, 2.0, 0.0)
    assert parse_args(flags[3:]).aging == 2.0


def test_the_conductors_settings_come_from_values(helm: Helm) -> None:
    def conductor_flags(args: list[str]) -> list[str]:
        names = ("--max-suspended-seconds", "--suspend-target", "--no-conductor")
        return [a for a in args if a.startswith(names)]

    default = conductor_flags(_operator_args(helm))
    assert default == ["--max-suspended-seconds=600", "--suspend-target=self"]
    # The operator's own defaults: the chart changes nothing unless asked.
    parsed, unset = parse_args(default), parse_args([])
    assert parsed.max_suspended_seconds == unset.max_suspended_seconds
    assert parsed.suspend_target == unset.suspend_target and not parsed.no_conductor
    chosen = conductor_flags(
        _operator_args(
            helm,
            "--set", "operator.conductor.maxSuspendedSeconds=0",
            "--set", "operator.conductor.suspendTarget=gpu:3",
        )
    )  # fmt: skip
    parsed = parse_args(chosen)
    assert (parsed.max_suspended_seconds, str(parsed.suspend_target)) == (0.0, "gpu:3")
    off = conductor_flags(_operator_args(helm, "--set", "operator.conductor.enabled=false"))
    assert off == ["--no-conductor"] and parse_args(off).no_conductor


def _operator_args(helm: Helm, *values: str) -> list[str]:
    (container,) = _workload(_render(helm, *values), "operator")["spec"]["template"]["spec"][
        "containers"
    ]
    return list(container["args"])


def _render(helm: Helm, *values: str, kube_version: str = KUBE_VERSION) -> list[dict[str, Any]]:
    result = helm("template", "t", str(CHART), "--kube-version", kube_version, *values)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def _agent_pod_spec(helm: Helm, *values: str) -> dict[str, Any]:
    """The node agent DaemonSet's pod spec, rendered with ``values``."""
    (agent,) = [d for d in _render(helm, *values) if d["kind"] == "DaemonSet"]
    spec: dict[str, Any] = agent["spec"]["template"]["spec"]
    return spec


def _workload(docs: list[dict[str, Any]], component: str) -> dict[str, Any]:
    (found,) = [
        d
        for d in docs
        if d["kind"] in {"Deployment", "DaemonSet"}
        and d["metadata"]["name"] == f"t-rlix-{component}"
    ]
    return found


@pytest.mark.parametrize(
    ("values", "named"),
    [
        (["--set", "operater.replicas=2"], "'operater'"),
        (["--set", "operator.replcas=2"], "'replcas'"),
        (["--set", "nodeAgent.image.repo=x"], "'repo'"),
        (["--set", "metrics.serviceMonitor.intervall=1m"], "'intervall'"),
        (["--set", "operator.replicas=two"], "/operator/replicas"),
        (["--set", "extender.image.pullPolicy=Sometimes"], "/extender/image/pullPolicy"),
        (["--set", "nodeAgent.backend=nvlm"], "/nodeAgent/backend"),
        (["--set", "scheduler.extraArgs=--v=4"], "/scheduler/extraArgs"),
        (["--set", "operator.grace.top=-1"], "/operator/grace/top"),
        (["--set", "operator.grace.aging=-1"], "/operator/grace/aging"),
        (["--set", "operator.conductor.suspendTarget=gpu"], "/operator/conductor/suspendTarget"),
        (["--set", "operator.conductor.maxSuspendedSeconds=-5"],
         "/operator/conductor/maxSuspendedSeconds"),
        (["--set", "nodeAgent.phaseGate.maxWaitSeconds=0"], "/nodeAgent/phaseGate/maxWaitSeconds"),
        (["--set", "sharing.builtinMatrix=assumed"], "/sharing/builtinMatrix"),
    ],
    ids=["top-level-typo", "nested-typo", "image-typo", "deep-typo", "type", "enum", "backend",
         "args-not-a-list", "negative-grace", "negative-aging", "suspend-target",
         "negative-max-suspended",
         "phase-gate-no-wait", "unknown-builtin-matrix"],
)  # fmt: skip
def test_schema_refuses_a_misspelt_or_mistyped_value(
    helm: Helm, values: list[str], named: str
) -> None:
    """A typo fails the install naming the key, instead of being silently ignored."""
    result = helm("template", "t", str(CHART), "--kube-version", KUBE_VERSION, *values)
    assert result.returncode != 0, f"{values} was accepted"
    assert "schema" in result.stderr and named in result.stderr, result.stderr


def test_schema_covers_every_value_and_refuses_unknown_keys_everywhere() -> None:
    """Each object the schema describes closes its keys, so no typo slips through a level."""
    schema = json.loads((CHART / "values.schema.json").read_text())

    def walk(node: dict[str, Any], where: str) -> list[str]:
        if node.get("type") != "object" or "properties" not in node:
            return []
        open_here = [where] if node.get("additionalProperties") is not False else []
        return open_here + [
            miss for key, sub in node["properties"].items() for miss in walk(sub, f"{where}.{key}")
        ]

    assert walk(schema, "values") == []
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(defaults) == set(schema["properties"])


@pytest.mark.parametrize(
    ("kube_version", "tag"),
    [("1.35.4", "v1.35.4"), ("1.34.2", "v1.34.2"), ("v1.33.1+k3s1", "v1.33.1")],
)
def test_scheduler_image_is_the_kubernetes_registrys_at_the_clusters_version(
    helm: Helm, kube_version: str, tag: str
) -> None:
    docs = _render(helm, kube_version=kube_version)
    (container,) = _workload(docs, "scheduler")["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"registry.k8s.io/kube-scheduler:{tag}"

    pinned = _render(
        helm, "--set", "scheduler.image.tag=v1.35.0", "--set", "global.imageRegistry=m.example"
    )
    (container,) = _workload(pinned, "scheduler")["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "m.example/kube-scheduler:v1.35.0"


COMPONENTS = {"operator": "operator", "extender": "extender", "scheduler": "scheduler",
              "nodeAgent": "node-agent"}  # fmt: skip


@pytest.mark.parametrize("key", list(COMPONENTS))
def test_every_component_takes_the_common_pod_settings(helm: Helm, key: str) -> None:
    component = COMPONENTS[key]
    docs = _render(helm,
        "--set", f"{key}.podLabels.team=infra",
        "--set", f"{key}.podAnnotations.note=hello",
        "--set", f"{key}.priorityClassName=rlix-critical",
        "--set", f"{key}.image.tag=t1",
        "--set", f"{key}.image.pullPolicy=Always",
        "--set", f"{key}.serviceAccount.name=custom-sa",
        "--set", f"{key}.serviceAccount.annotations.iam=role",
        "--set-json", f'{key}.extraArgs=["--extra-flag"]',
        "--set-json", f'{key}.nodeSelector={{"pool":"rlix"}}',
        "--set-json", f'{key}.resources={{"requests":{{"cpu":"1"}}}}',
        "--set", "global.imagePullSecrets[0].name=regcred",
    )  # fmt: skip
    workload = _workload(docs, component)
    template = workload["spec"]["template"]
    pod = template["spec"]
    (container,) = pod["containers"]
    assert template["metadata"]["labels"]["team"] == "infra"
    assert template["metadata"]["annotations"]["note"] == "hello"
    assert pod["priorityClassName"] == "rlix-critical"
    assert pod["serviceAccountName"] == "custom-sa"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["nodeSelector"]["pool"] == "rlix"
    assert container["image"].endswith(":t1") and container["imagePullPolicy"] == "Always"
    assert (container.get("args") or container.get("command"))[-1] == "--extra-flag"
    assert container["resources"]["requests"]["cpu"] == "1"
    (account,) = [
        d for d in docs if d["kind"] == "ServiceAccount" and d["metadata"]["name"] == "custom-sa"
    ]
    assert account["metadata"]["annotations"] == {"iam": "role"}
    bound = [
        d for d in docs
        if d["kind"] in {"ClusterRoleBinding", "RoleBinding"}
        and d["metadata"]["name"].startswith(f"t-rlix-{component}")
    ]  # fmt: skip
    assert bound and all(b["subjects"][0]["name"] == "custom-sa" for b in bound)

    # An existing account: the chart creates none and binds the one named.
    existing = _render(helm, "--set", f"{key}.serviceAccount.create=false", "--set",
                       f"{key}.serviceAccount.name=theirs")  # fmt: skip
    assert not [d for d in existing if d["kind"] == "ServiceAccount"
                and d["metadata"]["name"] in {"theirs", f"t-rlix-{component}"}]  # fmt: skip
    assert (
        _workload(existing, component)["spec"]["template"]["spec"]["serviceAccountName"] == "theirs"
    )


def test_security_contexts_are_non_root_except_the_agent(helm: Helm) -> None:
    docs = _render(helm)
    for component in ("operator", "extender", "scheduler"):
        pod = _workload(docs, component)["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert pod["securityContext"]["runAsNonRoot"] is True, component
        assert container["securityContext"]["allowPrivilegeEscalation"] is False, component
        assert container["securityContext"]["readOnlyRootFilesystem"] is True, component
        assert container["livenessProbe"] and container["readinessProbe"], component
    agent = _workload(docs, "node-agent")["spec"]["template"]["spec"]
    assert agent["hostPID"] is True and agent["priorityClassName"] == "system-node-critical"
    assert agent["containers"][0]["securityContext"] == {"privileged": True}


def test_pod_disruption_budgets_select_their_component(helm: Helm) -> None:
    docs = _render(helm,
        "--set", "extender.podDisruptionBudget.enabled=true",
        "--set", "extender.podDisruptionBudget.maxUnavailable=50%",
        "--set", "operator.podDisruptionBudget.enabled=true",
    )  # fmt: skip
    pdbs = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "PodDisruptionBudget"}
    assert set(pdbs) == {"t-rlix-extender", "t-rlix-operator"}
    assert pdbs["t-rlix-extender"]["maxUnavailable"] == "50%"
    assert "minAvailable" not in pdbs["t-rlix-extender"]
    assert pdbs["t-rlix-operator"]["minAvailable"] == 1
    for name, spec in pdbs.items():
        selector = _workload(docs, name.removeprefix("t-rlix-"))["spec"]["selector"]
        assert spec["selector"] == selector
    assert not [d for d in _render(helm) if d["kind"] == "PodDisruptionBudget"]


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (["--set", "nodeAgent.dra.enabled=false"], ["--no-dra"]),
        (
            [],
            [
                "--memory-overcommit=1",
                "--kubelet-plugin",
                "--kubelet-dir=/var/lib/kubelet",
                "--cdi-dir=/var/run/cdi",
            ],
        ),
        (
            [
                "--set",
                "nodeAgent.dra.memoryOvercommit=1.5",
                "--set",
                "nodeAgent.dra.vendorCdiDevice=nvidia.com/gpu={uuid}",
            ],
            [
                "--memory-overcommit=1.5",
                "--kubelet-plugin",
                "--kubelet-dir=/var/lib/kubelet",
                "--cdi-dir=/var/run/cdi",
                "--vendor-cdi-device=nvidia.com/gpu={uuid}",
            ],
        ),
    ],
    ids=["whole-gpus", "default-dra", "dra-nvidia"],
)
def test_the_agent_is_the_dra_driver_unless_told_not_to(
    helm: Helm, values: list[str], expected: list[str]
) -> None:
    """The DeviceClass, slices and the kubelet plugin (its sockets at the
    kubelet's paths, CDI specs where the runtime reads them) with
    nodeAgent.dra.enabled, the default (docs/dra.md)."""
    result = helm("template", "t", str(CHART), "--kube-version", KUBE_VERSION, *values)
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    classes = [d["metadata"]["name"] for d in docs if d["kind"] == "DeviceClass"]
    assert classes == (["gpu.rlix.io"] if "--no-dra" not in expected else [])
    (agent,) = [d for d in docs if d["kind"] == "DaemonSet"]
    args = agent["spec"]["template"]["spec"]["containers"][0]["args"]
    words = ("dra", "overcommit", "kubelet", "cdi")
    assert [a for a in args if any(w in a for w in words)] == expected
    pod = agent["spec"]["template"]["spec"]
    host_paths = {v["hostPath"]["path"] for v in pod["volumes"]}
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    plugin_paths = {
        "/var/lib/kubelet/plugins_registry",
        "/var/lib/kubelet/plugins/gpu.rlix.io",
        "/var/run/cdi",
    }
    if "--no-dra" in expected:
        assert not plugin_paths & (host_paths | mounts)
    else:
        assert plugin_paths <= host_paths and plugin_paths <= mounts
    (role,) = [
        d
        for d in docs
        if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "t-rlix-node-agent"
    ]
    assert any("resourceslices" in r["resources"] for r in role["rules"])
    assert {
        "resources": ["resourceclaims"],
        "verbs": ["get"],
        "apiGroups": ["resource.k8s.io"],
    } in role["rules"]


def test_the_device_class_is_left_out_where_the_cluster_has_it(helm: Helm) -> None:
    """Helm refuses to install over an object it does not own: the value skips it."""
    result = helm(
        "template", "t", str(CHART), "--kube-version", KUBE_VERSION,
        "--set", "nodeAgent.dra.enabled=true", "--set", "nodeAgent.dra.createDeviceClass=false",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    kinds = [d["kind"] for d in yaml.safe_load_all(result.stdout) if d]
    assert "DeviceClass" not in kinds and "DaemonSet" in kinds


def test_mps_runs_the_daemon_through_the_agent_with_the_directory_the_operator_mounts(
    helm: Helm,
) -> None:
    from rlix.core import mps

    off = _agent_pod_spec(helm)
    assert "--mps" not in off["containers"][0]["args"]
    assert all(v["name"] != "mps" for v in off["volumes"])
    on = _agent_pod_spec(helm, "--set", "nodeAgent.mps.enabled=true")
    container = on["containers"][0]
    assert "--mps" in container["args"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "mps")
    volume = next(v for v in on["volumes"] if v["name"] == "mps")
    # The agent's default --mps-dir is where the operator points its clients.
    assert mount["mountPath"] == volume["hostPath"]["path"] == mps.MPS_DIR


def test_the_phase_gate_value_gives_the_agent_arguments_it_accepts_and_its_matrix(
    helm: Helm,
) -> None:
    from rlix.agent.main import _argument_error, build_parser

    off = _agent_pod_spec(helm, "--set", "nodeAgent.phaseGate.enabled=false")["containers"][0]
    assert not [a for a in off["args"] if "phase-gate" in a or "interference" in a]
    # On by default (since 2026-12-07), with the chart's built-in bound.
    args = build_parser().parse_args(
        [*_agent_pod_spec(helm)["containers"][0]["args"], "--node-name=n"]
    )
    assert args.phase_gate and args.interference == "time-slicing" and not args.park_at_gate
    on = _agent_pod_spec(
        helm,
        "--set", "nodeAgent.phaseGate.enabled=true",
        "--set", "nodeAgent.phaseGate.maxWaitSeconds=120",
        "--set", "nodeAgent.phaseGate.interferenceConfigMap=h200-matrix",
    )  # fmt: skip
    container = on["containers"][0]
    args = build_parser().parse_args([*container["args"], "--node-name=n"])
    assert _argument_error(args) is None
    assert args.phase_gate and args.phase_gate_max_wait == 120.0
    assert not args.park_at_gate
    parking = _agent_pod_spec(
        helm,
        "--set", "nodeAgent.phaseGate.enabled=true",
        "--set", "nodeAgent.phaseGate.parkAtGate=true",
    )  # fmt: skip
    parks = build_parser().parse_args([*parking["containers"][0]["args"], "--node-name=n"])
    assert _argument_error(parks) is None and parks.phase_gate and parks.park_at_gate
    mount = next(m for m in container["volumeMounts"] if m["name"] == "interference")
    volume = next(v for v in on["volumes"] if v["name"] == "interference")
    assert volume["configMap"]["name"] == "h200-matrix" and mount["readOnly"]
    assert args.interference == Path(mount["mountPath"]) / "interference.json"
    # Without a ConfigMap the gate decides with the chart's built-in bound, as
    # placement does; with that off, with the matrix the agent ships.
    default = _agent_pod_spec(helm, "--set", "nodeAgent.phaseGate.enabled=true")
    assert all(v["name"] != "interference" for v in default["volumes"])
    args = build_parser().parse_args([*default["containers"][0]["args"], "--node-name=n"])
    assert args.phase_gate and args.interference == "time-slicing"
    assert args.phase_gate_max_wait == 600.0
    shipped = _agent_pod_spec(
        helm, "--set", "nodeAgent.phaseGate.enabled=true", "--set", "sharing.builtinMatrix="
    )
    args = build_parser().parse_args([*shipped["containers"][0]["args"], "--node-name=n"])
    assert args.phase_gate and args.interference is None


def _pod_spec(docs: list[dict[str, Any]], component: str) -> dict[str, Any]:
    spec: dict[str, Any] = _workload(docs, component)["spec"]["template"]["spec"]
    return spec


def _matrix_of(spec: dict[str, Any]) -> tuple[str | None, list[str]]:
    """The ConfigMap a pod mounts at the path its first container's
    --interference names, and that container's interference arguments."""
    (container,) = spec["containers"]
    given = [a for a in container["args"] if a.startswith("--interference")]
    mounts = {m["name"]: m for m in container.get("volumeMounts", [])}
    if "interference" not in mounts:
        return None, given
    volume = next(v for v in spec["volumes"] if v["name"] == "interference")
    assert mounts["interference"]["readOnly"]
    file = f"{mounts['interference']['mountPath']}/interference.json"
    assert f"--interference={file}" in given, given
    return volume["configMap"]["name"], given


def _parsed(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each sharing component's container args, parsed by the component's own parser."""
    from rlix.agent.main import build_parser as agent_parser
    from rlix.extender.main import build_parser as extender_parser
    from rlix.operator.main import parse_args as operator_args

    args = {
        c: _pod_spec(docs, c)["containers"][0]["args"]
        for c in ("extender", "operator", "node-agent")
    }
    return {
        "extender": extender_parser().parse_args(args["extender"]),
        "operator": operator_args(args["operator"]),
        "node-agent": agent_parser().parse_args([*args["node-agent"], "--node-name=n"]),
    }


def test_one_sharing_matrix_reaches_the_extender_the_operator_and_the_gate(helm: Helm) -> None:
    """Placement, admission and the phase gate judge a pair with the same file;
    the gate may have one of its own. Every argument list parses with the
    component's own parser, so a flag the chart writes is one it accepts."""
    docs = _render(
        helm, "--set", "nodeAgent.phaseGate.enabled=true", "--set", "sharing.builtinMatrix="
    )
    for component in ("extender", "operator", "node-agent"):
        assert _matrix_of(_pod_spec(docs, component)) == (None, []), component

    docs = _render(
        helm,
        "--set", "sharing.interferenceConfigMap=cluster-matrix",
        "--set", "sharing.interferenceMode=mps",
        "--set", "nodeAgent.phaseGate.enabled=true",
    )  # fmt: skip
    for component in ("extender", "operator", "node-agent"):
        name, given = _matrix_of(_pod_spec(docs, component))
        assert name == "cluster-matrix", component
        assert "--interference-mode=mps" in given, component
    parsed = _parsed(docs)
    assert parsed["extender"].interference_mode == "mps"
    # Placement and admission count pairs by turns only where the agents park at the gate.
    assert not parsed["extender"].park_at_gate and not parsed["operator"].park_at_gate
    parking = _parsed(
        _render(
            helm,
            "--set", "nodeAgent.phaseGate.enabled=true",
            "--set", "nodeAgent.phaseGate.parkAtGate=true",
        )
    )  # fmt: skip
    assert all(parking[c].park_at_gate for c in ("extender", "operator", "node-agent"))
    gate_off = _parsed(
        _render(
            helm,
            "--set", "nodeAgent.phaseGate.enabled=false",
            "--set", "nodeAgent.phaseGate.parkAtGate=true",
        )
    )  # fmt: skip
    assert not any(gate_off[c].park_at_gate for c in ("extender", "operator", "node-agent"))
    # Without the gate placement and admission judge a pair as its pods
    # drift; with it (the chart's default), as the gate makes them take turns.
    default = _parsed(_render(helm))
    assert not default["extender"].no_phase_gate and not default["operator"].no_phase_gate
    assert gate_off["extender"].no_phase_gate and gate_off["operator"].no_phase_gate
    assert not parsed["extender"].no_phase_gate and not parsed["operator"].no_phase_gate
    assert not parking["extender"].no_phase_gate and not parking["operator"].no_phase_gate
    assert str(parsed["operator"].interference).endswith("/interference.json")
    assert parsed["node-agent"].interference_mode == "mps"

    # The gate's own ConfigMap wins for the gate alone; without the gate the
    # agent reads no matrix (--interference is the gate's).
    docs = _render(
        helm,
        "--set", "sharing.interferenceConfigMap=cluster-matrix",
        "--set", "nodeAgent.phaseGate.enabled=true",
        "--set", "nodeAgent.phaseGate.interferenceConfigMap=gate-matrix",
    )  # fmt: skip
    assert _matrix_of(_pod_spec(docs, "node-agent"))[0] == "gate-matrix"
    assert _matrix_of(_pod_spec(docs, "extender"))[0] == "cluster-matrix"
    docs = _render(
        helm,
        "--set", "sharing.interferenceConfigMap=cluster-matrix",
        "--set", "nodeAgent.phaseGate.enabled=false",
    )  # fmt: skip
    assert _matrix_of(_pod_spec(docs, "node-agent")) == (None, [])
    assert _matrix_of(_pod_spec(docs, "operator"))[0] == "cluster-matrix"


def test_by_default_the_built_in_time_slicing_bound_reaches_every_component_without_a_volume(
    helm: Helm,
) -> None:
    # The chart's default: no value to set (the gate is on by default too).
    docs = _render(helm)
    for component in ("extender", "operator", "node-agent"):
        spec = _pod_spec(docs, component)
        assert _matrix_of(spec) == (None, ["--interference=time-slicing"]), component
        assert all(v["name"] != "interference" for v in spec.get("volumes", [])), component
    for component, parsed in _parsed(docs).items():
        assert parsed.interference == "time-slicing", component

    # A measured matrix wins, for the gate too; without the gate the agent reads none.
    docs = _render(
        helm,
        "--set", "sharing.builtinMatrix=time-slicing",
        "--set", "sharing.interferenceConfigMap=cluster-matrix",
    )  # fmt: skip
    assert _matrix_of(_pod_spec(docs, "extender"))[0] == "cluster-matrix"
    assert _matrix_of(_pod_spec(docs, "node-agent"))[0] == "cluster-matrix"
    docs = _render(
        helm,
        "--set", "sharing.interferenceConfigMap=cluster-matrix",
        "--set", "nodeAgent.phaseGate.enabled=false",
    )  # fmt: skip
    assert _matrix_of(_pod_spec(docs, "node-agent")) == (None, [])

    # The bound is time-slicing's: under MPS the chart refuses it, saying why.
    result = helm(
        "template", "t", str(CHART), "--kube-version", KUBE_VERSION,
        "--set", "sharing.builtinMatrix=time-slicing", "--set", "sharing.interferenceMode=mps",
    )  # fmt: skip
    assert result.returncode != 0
    assert "holds only for sharing.interferenceMode time_slicing, not mps" in result.stderr
    # An unknown name: test_schema_refuses_a_misspelt_or_mistyped_value.


def test_a_sharing_mode_the_components_do_not_know_is_refused(helm: Helm) -> None:
    result = helm(
        "template", "t", str(CHART), "--kube-version", KUBE_VERSION,
        "--set", "sharing.interferenceMode=mig",
    )  # fmt: skip
    assert result.returncode != 0
    assert "sharing" in result.stderr and "interferenceMode" in result.stderr


@pytest.mark.parametrize(
    ("values", "said"),
    [
        (
            [],
            [
                "the built-in time-slicing bound (no measurement)",
                "make gpu-check",
                # The default overcommit: parking frees nothing a waiting job could use.
                "at nodeAgent.dra.memoryOvercommit=1, a parked pod still holds its GPU",
                "its ParkingFreesNothing event says so",
            ],
        ),
        (
            ["nodeAgent.dra.memoryOvercommit=1.5"],
            ["rollouts are parked in place for it", "published at 1.5x its physical memory"],
        ),
        (
            ["nodeAgent.dra.enabled=false"],
            ["on whole GPUs", "nodeAgent.dra.enabled=true with nodeAgent.dra.memoryOvercommit=1.5"],
        ),
        (
            ["operator.conductor.enabled=false", "nodeAgent.dra.memoryOvercommit=2"],
            ["the conductor is off (operator.conductor.enabled=false), so nobody is parked"],
        ),
        (["sharing.builtinMatrix="], ["rules 1-3 only (no interference matrix)"]),
        (
            ["sharing.interferenceConfigMap=rlix-interference"],
            ["the interference matrix in configmap/rlix-interference, its time_slicing table."],
        ),
        (
            ["nodeAgent.mps.enabled=true"],
            ["the built-in time-slicing bound", "give the matrix's mps table"],
        ),
        (
            ["sharing.interferenceConfigMap=m", "sharing.interferenceMode=mps"],
            ["its mps table.", "nodeAgent.mps.enabled is false"],
        ),
        (
            [
                "nodeAgent.mps.enabled=true",
                "sharing.interferenceConfigMap=m",
                "sharing.interferenceMode=mps",
            ],
            ["the interference matrix in configmap/m, its mps table."],
        ),
    ],
)
def test_the_install_notes_say_which_sharing_rules_it_decides_with_and_what_parking_frees(
    values: list[str], said: list[str]
) -> None:
    """And what a higher-priority job that finds its GPUs full gets. Rendered by
    a client dry run of helm 4 (helm 3's install asks a cluster for its version
    even then, and `helm template` leaves NOTES.txt out)."""
    sets = [arg for v in values for arg in ("--set", v)]
    out = subprocess.run(
        [str(bin_dir() / "helm4"), "install", "t", str(CHART), "--dry-run=client", *sets],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    notes = out[out.index("Sharing (who may share a GPU") : out.index("Check it:")]
    for line in said:
        assert line in " ".join(notes.split()), (values, notes)
    # A note on a mismatch only where MPS and the table disagree.
    mps_on = "nodeAgent.mps.enabled=true" in values
    mps_table = "sharing.interferenceMode=mps" in values
    assert ("Note:" in notes) == (mps_on != mps_table), (values, notes)
