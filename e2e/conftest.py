"""Tier 3: a real control plane started by the test session itself.

One local cluster (kwokctl binary runtime: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, kwok) plus a second kube-scheduler
serving ``rlix-scheduler`` is started once per session, and every test gets a
fresh namespace. Nothing here fakes the API server or the scheduler.

Tier 4 (kind) runs the same tests against an existing cluster when
RLIX_E2E_KUBECONFIG names its kubeconfig; tests that need the local extender
port are skipped there with the reason printed.

If the local cluster cannot start, the session FAILS: this tier never skips in
CI. Teardown runs on success, failure, Ctrl-C and SIGTERM; a session killed
with SIGKILL is cleaned up by the next one (stale clusters are reaped).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Generator, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from e2e.failure_report import cluster_report
from e2e.kube import new_namespace
from rlix.devcluster import processes, realnode
from rlix.devcluster.cluster import (
    ClusterOptions,
    DevCluster,
    ExistingCluster,
    default_workdir,
    reap_stale_clusters,
)
from rlix.devcluster.toolchain import bin_dir

E2E_PREFIX = "rlix-e2e-"
NODES = 4
GPUS = 8
GPU_MEMORY_MIB = 81920


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.cluster)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    """On a real-cluster test's failure, attach the cluster's state (``failure_report``)."""
    outcome = yield
    report = outcome.get_result()
    funcargs = getattr(item, "funcargs", {})
    if not report.failed or call.when == "teardown" or "cluster" not in funcargs:
        return
    log = getattr(funcargs.get("operator"), "log", None)  # where the test runs an operator
    logs = [log, log.with_name("extender.log")] if isinstance(log, Path) else []
    report.sections.append(
        ("cluster state at the failure", cluster_report(funcargs["cluster"], logs))
    )


def _raise_on_sigterm(signum: int, frame: FrameType | None) -> None:
    # Turn SIGTERM into an exception so pytest unwinds and fixtures tear down.
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.fixture(scope="session")
def cluster() -> Iterator[DevCluster | ExistingCluster]:
    tools = bin_dir()
    external = os.environ.get("RLIX_E2E_KUBECONFIG")
    if external:
        os.environ["KUBECONFIG"] = external
        yield ExistingCluster(Path(external), tools)
        return

    workdir = default_workdir()
    reap_stale_clusters(workdir, tools, prefix=E2E_PREFIX)
    options = ClusterOptions(
        name=f"{E2E_PREFIX}{os.getpid()}",
        nodes=NODES,
        gpus=GPUS,
        gpu_memory_mib=GPU_MEMORY_MIB,
        extender_port=processes.free_port(),
        workdir=workdir,
    )
    dev = DevCluster(options, tools)
    previous = signal.signal(signal.SIGTERM, _raise_on_sigterm)
    try:
        dev.up()  # raises (and so fails the session) when the cluster cannot start
        os.environ["KUBECONFIG"] = str(dev.kubeconfig)
        yield dev
    finally:
        try:
            dev.down()
        finally:
            signal.signal(signal.SIGTERM, previous)
            os.environ.pop("KUBECONFIG", None)
            print(f"\n[e2e] cluster {options.name} torn down", file=sys.stderr)


@pytest.fixture
def local_cluster(cluster: DevCluster | ExistingCluster) -> DevCluster:
    """The session's own control plane; tier 4 (kind) skips tests that need it."""
    if not isinstance(cluster, DevCluster):
        pytest.skip("needs the session's local control plane (extender port on 127.0.0.1)")
    return cluster


@pytest.fixture(scope="session")
def real_node(cluster: DevCluster | ExistingCluster) -> Iterator[realnode.RealNode]:
    """A real kubelet node (containerd, runc, our images) joined to the session's cluster.

    Started the first time a ``realnode`` test asks for it. If it cannot start,
    every test that needs it FAILS with the reason (missing packages, a kubelet
    that never got Ready, with its log): this tier never skips silently.
    """
    if not isinstance(cluster, DevCluster):
        pytest.skip("the real-node tier adds its node to the session's local control plane")
    node = cluster.real_node()
    failure = ""
    try:
        node.up()
    except realnode.RealNodeError as err:
        failure = str(err)
        node.down()
    if failure:
        pytest.fail(f"the real node did not start: {failure}", pytrace=False)
    try:
        yield node
    finally:
        node.down()


@pytest.fixture
def namespace(cluster: DevCluster | ExistingCluster) -> Iterator[str]:
    name = new_namespace(cluster)
    try:
        yield name
    finally:
        cluster.kubectl(
            "delete",
            "namespace",
            name,
            "--wait=false",
            "--ignore-not-found",
            check=False,
        )
