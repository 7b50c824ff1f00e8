"""kubectl habits of the CLI: -n/-A and the context's namespace, -o json|yaml|wide,
shell completion run by a real bash, and a bare install naming the extra to add."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console

from rlix.cli import describe, scope, top
from rlix.cli.completion import bash_script
from rlix.cli.main import build_parser, main
from rlix.views.kube import ClusterView
from tests.components.test_cli_views import lent, node, pod, rljob, ts

ROOT = Path(__file__).resolve().parents[2]


def _kubeconfig(tmp_path: Path, current_namespace: str | None) -> Path:
    """A kubeconfig with two contexts; only reading it, no server is contacted."""
    context: dict[str, Any] = {"cluster": "c", "user": "u"}
    if current_namespace is not None:
        context["namespace"] = current_namespace
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [
            {"name": "here", "context": context},
            {"name": "there", "context": {"cluster": "c", "user": "u", "namespace": "team-b"}},
        ],
        "current-context": "here",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def _args(argv: list[str]) -> argparse.Namespace:
    return build_parser().parse_args(argv)


@pytest.mark.parametrize(
    ("current", "flags", "want"),
    [
        ("team-a", [], "team-a"),  # the context's namespace, as kubectl
        (None, [], "default"),  # a context without one: default
        ("team-a", ["-n", "other"], "other"),
        ("team-a", ["--namespace", "other"], "other"),
        ("team-a", ["-A"], None),
        ("team-a", ["--all-namespaces"], None),
        ("team-a", ["--context", "there"], "team-b"),
    ],
)
def test_namespace_is_chosen_as_kubectl_does(
    tmp_path: Path, current: str | None, flags: list[str], want: str | None
) -> None:
    config = str(_kubeconfig(tmp_path, current))
    args = _args(["top", "--kubeconfig", config, *flags])
    assert scope.namespace_of(args) == want


def test_describe_uses_the_context_namespace_and_has_no_all_namespaces(tmp_path: Path) -> None:
    config = str(_kubeconfig(tmp_path, "team-a"))
    assert scope.namespace_of(_args(["describe", "rljob", "j", "--kubeconfig", config])) == "team-a"
    with pytest.raises(SystemExit):
        _args(["describe", "rljob", "j", "-A"])


def test_namespace_and_all_namespaces_exclude_each_other(capsys: Any) -> None:
    with pytest.raises(SystemExit):
        _args(["top", "-n", "x", "-A"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_unknown_context_is_named(tmp_path: Path) -> None:
    config = str(_kubeconfig(tmp_path, "team-a"))
    with pytest.raises(ValueError, match="'nowhere'"):
        scope.namespace_of(_args(["top", "--kubeconfig", config, "--context", "nowhere"]))


def _view() -> ClusterView:
    return ClusterView(
        rljobs=[rljob("grpo", "Running")],
        pods=[
            pod("grpo-policy-0", "grpo", memory={"training": 60000}),
            pod("grpo-rollout-0", "grpo", suspended=True, memory={"rollout": 30000}),
        ],
        nodes=[node("n0", 8, [0.9, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])],
    )


def test_top_data_is_what_the_table_shows() -> None:
    data = top.frame_data(_view())
    (job,) = data["rljobs"]
    assert job["name"] == "grpo" and job["namespace"] == "ns" and job["state"] == "Running"
    # The job's status says 6 GPUs; the suspended rollout pod parks 30000 MiB x 2 GPUs.
    assert job["gpus"] == 6 and job["suspended"] == 1 and job["parkedMib"] == 60000
    (n,) = data["nodes"]
    assert n["name"] == "n0" and n["gpus"] == 8 and n["idleGpus"] == 7
    assert data["summary"]["suspendedPods"] == 1
    json.dumps(data)  # plain data all the way down


def _table(view: ClusterView, *, wide: bool) -> str:
    out = StringIO()
    Console(file=out, width=250).print(top.render(view, wide=wide))
    return out.getvalue()


def test_wide_adds_columns() -> None:
    narrow, wide = _table(_view(), wide=False), _table(_view(), wide=True)
    assert "PARKED" not in narrow and "MEM FREE" not in narrow
    assert "PARKED" in wide and "MEM FREE" in wide
    assert "58.6 GiB" in wide  # the 60000 MiB parked, in the job's PARKED column
    assert "612 GiB" in wide  # 640 GiB of HBM on n0, 28 GiB in use


def test_top_shows_who_is_suspended_why_for_whom_and_since_when() -> None:
    view = _view()
    tail = pod("grpo-rollout-1", "grpo", memory={"rollout": 30000})
    lent(tail, generation=1, done=True)
    view = ClusterView(rljobs=view.rljobs, pods=[*view.pods, tail], nodes=view.nodes)
    table = _table(view, wide=False)
    assert "Suspensions" in table and "SUSPENSION" in table
    (line,) = [row for row in table.splitlines() if "grpo-rollout-1" in row]
    for cell in ("parked", "Lend", "ns/high", ts(120), "3.0 GiB"):
        assert cell in line, (cell, line)
    (data,) = top.frame_data(view)["suspensions"]
    assert data["pods"] == ["grpo-rollout-1"] and data["parkedBytes"] == 3 << 30
    assert data["reason"] == "Lend" and data["requester"] == "ns/high"
    assert "Suspensions" not in _table(_view(), wide=False), "nothing parked: no table"


def test_describe_data_carries_the_object_pods_and_events() -> None:
    job = rljob("grpo", "Running")
    events = [{"type": "Normal", "reason": "Admitted", "message": "ok", "lastTimestamp": "t"}]
    data = describe.describe_data(job, [pod("grpo-policy-0", "grpo")], events)
    assert data["rljob"] == job
    assert data["pods"] == [
        {"name": "grpo-policy-0", "node": "n0", "status": "Running", "phase": "rollout",
         "waitingForTurn": None, "suspended": False}
    ]  # fmt: skip
    assert data["events"][0]["reason"] == "Admitted"
    assert yaml.safe_load(yaml.safe_dump(data)) == data


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        ([""], "top"),
        (["to"], "top"),
        (["top", "-o", ""], "json yaml wide"),
        (["top", "--all"], "--all-namespaces"),
        (["describe", "r"], "rljob rljobs"),
        (["describe", "rljob", "x", "-o", ""], "json yaml"),
        (["cluster", "st"], "status"),
        (["completion", ""], "bash zsh"),
    ],
)
def test_bash_completes_commands_options_and_choices(argv: list[str], want: str) -> None:
    """The generated script, sourced by a real bash, completes what the parser accepts."""
    bash = shutil.which("bash")
    assert bash, "bash is needed for this test"
    script = bash_script(build_parser(), ("rlix", "kubectl-rlix"))
    words = " ".join(f"'{w}'" for w in ["rlix", *argv])
    probe = (
        f"{script}\nCOMP_WORDS=({words}); COMP_CWORD={len(argv)}; _rlix_complete; "
        'echo "${COMPREPLY[*]}"'
    )
    result = subprocess.run(
        [bash, "--norc", "-c", probe], capture_output=True, text=True, check=True
    )
    got = result.stdout.split()
    assert set(want.split()) <= set(got), got
    if argv[-1]:
        assert all(w.startswith(argv[-1]) for w in got), got


def test_completion_command_prints_scripts(capsys: Any) -> None:
    assert main(["completion", "bash"]) == 0
    assert "complete -F _rlix_complete rlix kubectl-rlix" in capsys.readouterr().out
    assert main(["completion", "zsh"]) == 0
    assert capsys.readouterr().out.startswith("autoload -U +X bashcompinit && bashcompinit\n")


def _bare_install(argv: list[str], missing: list[str]) -> subprocess.CompletedProcess[str]:
    """Run the CLI in a fresh interpreter where ``missing`` cannot be imported, as in a
    plain ``pip install rlix`` (sys.modules[name] = None makes every import of it fail)."""
    code = (
        "import sys\n"
        f"for name in {missing!r}:\n"
        "    sys.modules[name] = None\n"
        "from rlix.cli.main import main\n"
        f"sys.exit(main({argv!r}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("argv", "missing"),
    [
        (["top", "--once"], ["rich"]),
        (["top", "--once", "-n", "x"], ["kubernetes"]),
        (["describe", "rljob", "j", "-n", "x"], ["kubernetes"]),
        (["top", "--once", "-A", "-o", "yaml"], ["kubernetes", "yaml"]),
    ],
)
def test_bare_install_names_the_extra_instead_of_a_traceback(
    argv: list[str], missing: list[str]
) -> None:
    result = _bare_install(argv, missing)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert f"rlix {argv[0]}: needs the Python package" in result.stderr
    assert "pip install 'rlix[cli]'" in result.stderr


def test_bare_install_still_answers_help_and_version() -> None:
    """The parser imports no extra: --help works in the base install."""
    for argv in (["--help"], ["top", "--help"], ["--version"]):
        result = _bare_install(argv, ["kubernetes", "rich", "yaml"])
        assert result.returncode == 0, result.stderr
