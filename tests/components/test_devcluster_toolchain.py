"""hack/versions.env as the tests read it: one place for the toolchain's versions."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlix.devcluster.toolchain import versions

ROOT = Path(__file__).resolve().parents[2]


def test_the_checkout_pins_every_version_the_toolchain_builds() -> None:
    pinned = versions(ROOT)
    for key in ("K8S_VERSION", "K8S_STAGING_VERSION", "ETCD_VERSION", "KWOK_VERSION",
                "HELM_VERSION", "HELM4_VERSION", "CONTAINERD_VERSION"):  # fmt: skip
        assert pinned.get(key), f"hack/versions.env lacks {key}"
    # The staging modules are published as v0.<minor>.<patch> of the release.
    assert pinned["K8S_STAGING_VERSION"] == "0." + pinned["K8S_VERSION"].split(".", 1)[1]
    assert pinned["HELM_VERSION"].startswith("3.") and pinned["HELM4_VERSION"].startswith("4.")


def test_a_line_that_is_not_key_value_names_the_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "hack").mkdir()
    (tmp_path / "hack" / "versions.env").write_text("# comment\nK8S_VERSION=1.37.2\nexport X\n")
    with pytest.raises(ValueError, match=r"versions.env:3: expected KEY=VALUE"):
        versions(tmp_path)


def test_a_young_cluster_without_an_owner_is_not_reaped(tmp_path: Path) -> None:
    """Another session may be creating it: its owner is written after kwokctl is done."""
    from rlix.devcluster.cluster import reap_stale_clusters

    being_created = tmp_path / "clusters" / "rlix-e2e-1"
    being_created.mkdir(parents=True)
    said: list[str] = []
    assert (
        reap_stale_clusters(tmp_path, tmp_path / "no-bin", prefix="rlix-e2e-", log=said.append) == 0
    )
    assert being_created.is_dir()
    assert said and "no owner recorded yet" in said[0]
