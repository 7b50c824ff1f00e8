"""Suspended-pod records: validated, atomic, reloadable, never silently dropped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rlix.agent.parking_state import (
    Manifest,
    ManifestError,
    ParkedEntry,
    StateStore,
    SuspendedPod,
    manifest_from_doc,
)
from rlix.core import agent_protocol as proto

UID = "0f1e2d3c-4b5a-6978-8a9b-acbdcedf0011"


def _pod() -> SuspendedPod:
    m = Manifest(proto.SELF, (ParkedEntry("torch/m0.weight", 4096, "ws64:abc"),))
    return SuspendedPod(UID, "team", "trainer-0", "2026-11-30T03:00:00Z", {4242: m})


def test_round_trip_through_a_new_store(tmp_path: Path) -> None:
    StateStore(tmp_path).save(_pod())
    pods, problems = StateStore(tmp_path).load_all()  # a restarted agent
    assert problems == []
    assert pods[UID].to_doc() == _pod().to_doc()
    assert pods[UID].processes[4242].nbytes == 4096


def test_delete_and_no_temp_files_left(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    store.save(_pod())
    assert [p.name for p in (tmp_path / "suspended").iterdir()] == [f"{UID}.json"]
    store.delete(UID)
    assert store.load_all() == ({}, [])


def test_corrupt_record_is_reported_and_kept(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    bad = tmp_path / "suspended" / f"{UID}.json"
    bad.write_text("{not json")
    pods, problems = store.load_all()
    assert pods == {}
    assert len(problems) == 1 and str(bad) in problems[0]
    assert bad.exists()


def test_uid_is_checked_before_it_becomes_a_path(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a pod UID"):
        StateStore(tmp_path).delete("../../etc/passwd")


BAD_MANIFESTS: list[tuple[Any, str]] = [
    ([], "must be an object"),
    ({"entries": []}, "'where'"),
    ({"where": "host"}, "list 'entries'"),
    ({"where": "host", "entries": [1]}, r"entries\[0\] must be an object"),
    ({"where": "host", "entries": [{"name": "a", "nbytes": 1}]}, "'checksum'"),
    ({"where": "host", "entries": [{"name": "a", "nbytes": -1, "checksum": "x"}]}, "nbytes"),
    (
        {"where": "host", "entries": [{"name": "a", "nbytes": 1, "checksum": "x"}] * 2},
        "unique",
    ),
]


@pytest.mark.parametrize(("doc", "message"), BAD_MANIFESTS)
def test_bad_manifests(doc: Any, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        manifest_from_doc(doc)
