"""The chart's HA, metrics and scheduler-name wiring, checked against the real CLIs.

The rendered args are parsed by the operator's and the agent's own argument
parsers, so a flag the chart passes but the binary does not know fails here,
not in a cluster; the dashboard's queries are checked against the series the
components' own metric registries define.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

from rlix.agent.main import build_parser as agent_parser
from rlix.agent.metrics import AgentMetrics
from rlix.agent.simulated_gpus import SimulatedBackend
from rlix.devcluster.toolchain import bin_dir
from rlix.extender.metrics import ExtenderMetrics
from rlix.operator.main import election_settings, parse_args
from rlix.operator.metrics import Metrics

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "rlix"


def render(*values: str) -> list[dict[str, Any]]:
    result = subprocess.run(
        [str(bin_dir() / "helm"), "template", "t", str(CHART), "--kube-version", "1.35.4",
         "--namespace", "rlix-system", *values],
        check=False, capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def container(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (c,) = find(docs, kind, name)["spec"]["template"]["spec"]["containers"]
    return dict(c)


def test_scheduler_name_reaches_the_operator_and_the_scheduler_profile() -> None:
    docs = render("--set", "scheduler.name=gpu-sched")
    args = parse_args(container(docs, "Deployment", "t-rlix-operator")["args"])
    assert args.scheduler_name == "gpu-sched"
    config = next(
        yaml.safe_load(v)
        for d in docs
        if d["kind"] == "ConfigMap"
        for v in (d.get("data") or {}).values()
        if "KubeSchedulerConfiguration" in v
    )
    assert [p["schedulerName"] for p in config["profiles"]] == ["gpu-sched"]
    # The client rate the throughput benchmark ran with, not kube-scheduler's 50/100.
    assert config["clientConnection"] == {"qps": 200, "burst": 400}
    # No managedResources: DRA pods request a claim, not nvidia.com/gpu, and
    # kube-scheduler would not send them to the extender at all.
    assert all("managedResources" not in e for e in config["extenders"])


def test_operator_replicas_elect_a_leader_on_a_lease_they_may_write() -> None:
    docs = render("--set", "operator.replicas=2")
    assert find(docs, "Deployment", "t-rlix-operator")["spec"]["replicas"] == 2
    args = parse_args(container(docs, "Deployment", "t-rlix-operator")["args"])
    settings = election_settings(args)
    assert settings is not None and settings.namespace == "rlix-system"
    assert (settings.lease_duration_s, settings.renew_deadline_s) == (15, 10)
    rules = find(docs, "Role", "t-rlix-operator")["rules"]
    assert {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
            "verbs": ["get", "create", "update"]} in rules  # fmt: skip
    assert args.metrics_host == "0.0.0.0"  # the Service reaches it

    off = render("--set", "operator.leaderElection.enabled=false")
    assert (
        election_settings(parse_args(container(off, "Deployment", "t-rlix-operator")["args"]))
        is None
    )


def test_node_agent_serves_metrics_behind_a_headless_service() -> None:
    docs = render("--set", "metrics.serviceMonitor.enabled=true")
    agent = container(docs, "DaemonSet", "t-rlix-node-agent")
    args = agent_parser().parse_args(agent["args"])
    assert (args.metrics_port, args.metrics_host) == (9465, "0.0.0.0")
    assert agent["ports"] == [{"name": "metrics", "containerPort": 9465}]
    service = find(docs, "Service", "t-rlix-node-agent")
    assert service["spec"]["clusterIP"] == "None"
    monitor = find(docs, "ServiceMonitor", "t-rlix-node-agent")
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"


def exported_series() -> set[str]:
    """Every sample name the operator, extender and node agent can expose."""
    backend = SimulatedBackend(gpu_count=1, memory_mib=1000)
    agent = AgentMetrics("n")
    agent.watch(backend.gpus, list)
    registries: list[CollectorRegistry] = [
        Metrics().registry,
        ExtenderMetrics().registry,
        agent.registry,
    ]
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}
    names = set()
    for registry in registries:
        for family in registry.collect():
            names.add(family.name)
            names.update(family.name + s for s in suffixes.get(family.type, ()))
    return names


def test_dashboard_loads_and_every_query_names_an_exported_series() -> None:
    dashboard = json.loads((CHART / "dashboards" / "rlix.json").read_text())
    exported = exported_series()
    panels = {p["title"]: p for p in dashboard["panels"]}
    for wanted in ("GPU idle %", "Parked bytes", "Phase timeline of job $job"):
        assert wanted in panels, sorted(panels)
    queries = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    queries += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    for query in queries:
        named = set(re.findall(r"\brlix_[a-z_]+", query))
        assert named, f"query names no RLix series: {query}"
        assert named <= exported, f"{query}: not exported: {sorted(named - exported)}"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
