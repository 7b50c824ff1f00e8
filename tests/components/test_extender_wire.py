"""The wire format matches the Go structs kube-scheduler encodes and decodes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rlix.extender import wire
from rlix.extender.main import build_parser

# Field names of k8s.io/kube-scheduler/extender/v1 types.go (no json tags there).
GO_FIELDS = {
    "ExtenderArgs": ["Pod", "Nodes", "NodeNames"],
    "ExtenderFilterResult": [
        "Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error",
    ],
    "HostPriority": ["Host", "Score"],
    "ExtenderPreemptionArgs": ["Pod", "NodeNameToVictims", "NodeNameToMetaVictims"],
    "ExtenderPreemptionResult": ["NodeNameToMetaVictims"],
    "MetaVictims": ["Pods", "NumPDBViolations"],
    "MetaPod": ["UID"],
}  # fmt: skip


def test_results_use_exactly_the_go_field_names() -> None:
    result = wire.filter_result(["a"], {"b": "why"}, {"c": "never"})
    assert list(result) == GO_FIELDS["ExtenderFilterResult"]
    assert list(wire.priority_list({"a": 3})[0]) == GO_FIELDS["HostPriority"]
    pre = wire.preemption_result({"n": (["u1"], 2)})
    assert list(pre) == GO_FIELDS["ExtenderPreemptionResult"]
    assert list(pre["NodeNameToMetaVictims"]["n"]) == GO_FIELDS["MetaVictims"]
    assert list(pre["NodeNameToMetaVictims"]["n"]["Pods"][0]) == GO_FIELDS["MetaPod"]


def _types_go() -> Path | None:
    roots = sorted(Path.home().glob("go/pkg/mod/k8s.io/kube-scheduler@v*/extender/v1/types.go"))
    return roots[-1] if roots else None


@pytest.mark.skipif(_types_go() is None, reason="kube-scheduler Go module not in GOMODCACHE")
def test_go_source_still_has_these_fields_without_json_tags() -> None:
    path = _types_go()
    assert path is not None
    source = path.read_text()
    for struct, fields in GO_FIELDS.items():
        body = re.search(rf"type {struct} struct {{(.*?)\n}}", source, re.S)
        assert body, struct
        declared = re.findall(r"^\s+([A-Z]\w*)\s+\S", body.group(1), re.M)
        assert declared == fields, struct
        assert "json:" not in body.group(1)


def test_full_victims_are_read_by_pod_uid() -> None:
    body = {
        "Pod": {"metadata": {"name": "p"}},
        "NodeNameToVictims": {"n": {"Pods": [{"metadata": {"uid": "u1"}}], "NumPDBViolations": 1}},
    }
    args = wire.parse_preemption(json.dumps(body).encode())
    assert args.victims == {"n": (["u1"], 1)}


def test_help_explains_the_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--port", "--host", "--kubeconfig", "--no-watch", "nodeCacheCapable"):
        assert flag in out
    args = build_parser().parse_args(["--no-watch", "--port", "9999"])
    assert (args.host, args.port, args.no_watch) == ("127.0.0.1", 9999, True)


@pytest.mark.parametrize(
    "scores",
    [{}, {"gpu-0": 10, "gpu-1": 0}, {'we"ird\\node': 3, "n\u00f6de-\u2603": 7, "tab\there": 1}],
)
def test_encoded_priority_list_is_what_json_dumps_writes(scores: dict[str, int]) -> None:
    items = wire.priority_list(scores)
    compact = json.dumps(items, separators=(",", ":")).encode()
    assert wire.encode_priority_list(items) == compact
    assert json.loads(wire.encode_priority_list(items)) == items


@pytest.mark.parametrize(
    "names",
    [["a", 1], ["a", None], ["a", "x" * (wire.NAME_MAX_CHARS + 1)], "not-a-list"],
)
def test_node_names_must_all_be_short_strings(names: object) -> None:
    body = json.dumps({"Pod": {}, "NodeNames": names}).encode()
    with pytest.raises(wire.WireError, match="NodeNames"):
        wire.parse_args(body)


def test_node_names_at_the_length_limit_are_read() -> None:
    names = ["a", "x" * wire.NAME_MAX_CHARS]
    args = wire.parse_args(json.dumps({"Pod": {}, "NodeNames": names}).encode())
    assert args.node_names == names
