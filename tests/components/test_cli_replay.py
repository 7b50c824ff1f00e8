"""`rlix replay`: a captured snapshot and a pod in, the policy's verdicts printed."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlix.cli import replay as replay_cli
from rlix.cli.main import main
from rlix.core.policy.placement import PlacementView, filter_nodes, score_nodes, snapshot_to_doc
from rlix.core.snapshot import ClusterSnapshot, Workload
from tests.builders.objects import pod_object
from tests.builders.placement import cluster, node, pod

GiB = 1024

# One node per situation the report must explain.
SNAP = (
    cluster()
    .with_nodes(
        node("train"),
        node("roll"),
        node("empty"),
        node("full"),
        node("off").cordoned(),
        node("small").gpus(8, mib=24 * GiB).product("L4"),
    )
    .with_pods(
        pod("t").job("alpha").role("trainer").gpus(4).memory(40000).phase("training").on("train"),
        pod("r").job("beta").role("rollout").gpus(4).memory(40000).phase("rollout").on("roll"),
        pod("f").job("omega").role("trainer").gpus(8).memory(80000).phase("training").on("full"),
    )
    .build()
)
PENDING = pod("new").job("gamma").role("rollout").gpus(1).memory(30000).phase("rollout").build()


def policy_ranking(snapshot: ClusterSnapshot, w: Workload) -> list[tuple[str, int]]:
    """What the core policy itself says, best first (ties by name, as the extender sorts)."""
    view = PlacementView(snapshot)
    feasible = filter_nodes(view, w, list(snapshot.nodes)).feasible
    scores = score_nodes(view, w, feasible).values()
    return [(s.node, s.score) for s in sorted(scores, key=lambda s: (-s.score, s.node))]


def printed_ranking(text: str) -> list[tuple[str, int]]:
    """(node, score) rows of the printed ranking table, in printed order."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Ranking"))
    rows: list[tuple[str, int]] = []
    for line in lines[start + 2 :]:  # past the title and the column header
        if not line.strip():
            break
        rank, node_name, score, *_ = line.split()
        assert int(rank) == len(rows) + 1
        rows.append((node_name, int(score)))
    return rows


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    snap = tmp_path / "snapshot.json"
    snap.write_text(json.dumps(snapshot_to_doc(SNAP)))
    pod_file = tmp_path / "pod.yaml"
    pod_file.write_text(yaml.safe_dump(pod_object(PENDING)))
    return snap, pod_file


def test_printed_ranking_is_the_policys_ranking(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    snap, pod_file = files
    assert main(["replay", str(snap), str(pod_file)]) == 0
    out = capsys.readouterr().out
    expected = policy_ranking(SNAP, PENDING)
    assert printed_ranking(out) == expected
    # The scenario itself: beside the training pod first, never beside the rollout.
    assert [n for n, _ in expected][:2] == ["train", "roll"]
    assert "Best node: train" in out
    assert "Pod default/new: 3 of 6 nodes feasible" in out


def test_every_rejected_node_is_explained(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    snap, pod_file = files
    assert main(["replay", str(snap), str(pod_file)]) == 0
    out = capsys.readouterr().out
    rejected = {
        line.split()[0]: line for line in out.split("Rejected by filter:")[1].splitlines()[2:]
    }
    assert set(rejected) == {"full", "off", "small"}
    assert "preemption may help" in rejected["full"] and "only 0 of 8 GPUs" in rejected["full"]
    assert "unresolvable" in rejected["off"] and "node is cordoned" in rejected["off"]
    assert "node's GPUs have 24.0 GiB (L4)" in rejected["small"]


def test_the_report_says_its_sharing_rules_and_a_matrix_can_be_asked_about(
    files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The snapshot (no ``sharingRules``: an extender without a matrix) puts the
    rollout on GPU 0 of the training node, beside the trainer (GPUs 0-3).
    Asked with the H200 matrix, that pair delivers 0.95 GPUs of progress, so
    the pod takes a GPU nobody holds (4) there and on the rollout node. A
    snapshot that says it was taken with that matrix replays the same."""
    snap, pod_file = files
    assert main(["replay", str(snap), str(pod_file)]) == 0
    assert "Sharing rules: 1-3, no interference matrix" in capsys.readouterr().out
    assert main(["replay", str(snap), str(pod_file), "--json"]) == 0
    shared = {r["node"]: r["gpus"] for r in json.loads(capsys.readouterr().out)["ranking"]}
    assert shared["train"] == [0]

    matrix = Path(__file__).resolve().parents[2] / "bench/results/gpu_interference.json"
    args = ["replay", str(snap), str(pod_file), "--interference", str(matrix)]
    assert main([*args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {r["node"]: r["gpus"] for r in report["ranking"]} == {
        "train": [4],
        "roll": [4],
        "empty": [0],
    }
    assert report["sharingRules"]["interference"]["memory"]["compute"] == 2.17
    assert main(args) == 0
    assert "Sharing rules: 1-5 with an interference matrix (a pair shares where it " in (
        capsys.readouterr().out
    )

    # The built-in bound refuses the same undeclared pair (one GPU's progress
    # together), so the pod takes the same empty GPUs.
    bound = ["replay", str(snap), str(pod_file), "--interference", "time-slicing", "--json"]
    assert main(bound) == 0
    asked = json.loads(capsys.readouterr().out)
    assert asked["ranking"] == report["ranking"]
    assert asked["sharingRules"]["interference"]["memory"]["compute"] == 1.0

    said = tmp_path / "with-matrix.json"
    doc = {**json.loads(snap.read_text()), "sharingRules": report["sharingRules"]}
    said.write_text(json.dumps(doc))
    assert main(["replay", str(said), str(pod_file), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ranking"] == report["ranking"]


def test_json_output_and_stdin_snapshot(
    files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    snap, pod_file = files
    monkeypatch.setattr("sys.stdin", io.StringIO(snap.read_text()))
    assert main(["replay", "-", str(pod_file), "--json", "--nodes", "train,roll,off"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["node"] for r in report["ranking"]] == ["train", "roll"]
    assert [r["score"] for r in report["ranking"]] == [s for _, s in policy_ranking(SNAP, PENDING)][
        :2
    ]
    assert report["unresolvable"] == {"off": "node is cordoned"}
    assert report["boundTo"] is None


def test_a_bound_pod_is_replayed_as_if_pending(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Captured after binding: the pod sits in the snapshot on "train"; counting it
    # against itself would change the answer, so its own entry is left out.
    bound = SNAP.with_workload(replace(PENDING, node="train"))
    snap = tmp_path / "snapshot.json"
    snap.write_text(json.dumps(snapshot_to_doc(bound)))
    pod_file = tmp_path / "pod.json"
    pod_file.write_text(json.dumps(pod_object(PENDING)))
    assert main(["replay", str(snap), str(pod_file)]) == 0
    out = capsys.readouterr().out
    assert "bound to train in the snapshot" in out
    assert printed_ranking(out) == policy_ranking(SNAP, PENDING)


class _SnapshotServer:
    def __init__(self, doc: dict[str, Any]) -> None:
        body = json.dumps(doc).encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status = 200 if self.path == "/debug/snapshot" else 404
                self.send_response(status)
                self.send_header("Content-Length", str(len(body) if status == 200 else 0))
                self.end_headers()
                if status == 200:
                    self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def snapshot_server() -> Iterator[_SnapshotServer]:
    server = _SnapshotServer(snapshot_to_doc(SNAP))
    server.thread.start()
    try:
        yield server
    finally:
        server.server.shutdown()
        server.server.server_close()
        server.thread.join(timeout=5)


def test_from_url_fetches_debug_snapshot(
    files: tuple[Path, Path], snapshot_server: _SnapshotServer, capsys: pytest.CaptureFixture[str]
) -> None:
    _, pod_file = files
    assert main(["replay", "--from-url", snapshot_server.url, str(pod_file)]) == 0
    assert printed_ranking(capsys.readouterr().out) == policy_ranking(SNAP, PENDING)


def test_snapshot_url_accepts_a_base_or_a_full_url() -> None:
    assert replay_cli.snapshot_url("127.0.0.1:8888") == "http://127.0.0.1:8888/debug/snapshot"
    full = "http://h:1/debug/snapshot"
    assert replay_cli.snapshot_url(full) == full


@pytest.mark.parametrize(
    ("make_args", "message"),
    [
        (lambda s, p: ["replay", str(s)], "expected SNAPSHOT and POD"),
        (lambda s, p: ["replay", str(s.parent / "nope.json"), str(p)], "cannot read snapshot"),
        (lambda s, p: ["replay", str(p), str(p)], "is not JSON"),
        (lambda s, p: ["replay", "--from-url", "http://127.0.0.1:1", str(p)], "cannot fetch"),
    ],
)
def test_bad_input_is_a_readable_error(
    files: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
    make_args: Any,
    message: str,
) -> None:
    snap, pod_file = files
    assert main(make_args(snap, pod_file)) in (1, 2)
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_bad_pod_annotation_names_the_field(
    files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snap, _ = files
    bad = pod_object(PENDING)
    bad["metadata"]["annotations"]["rlix.io/gpu-memory-mib"] = "lots"
    pod_file = tmp_path / "bad.yaml"
    pod_file.write_text(yaml.safe_dump(bad))
    assert main(["replay", str(snap), str(pod_file)]) == 1
    assert "rlix.io/gpu-memory-mib" in capsys.readouterr().err
