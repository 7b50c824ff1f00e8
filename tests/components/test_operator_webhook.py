"""Webhook review logic and the certificates the API server must trust."""

from __future__ import annotations

import ssl
from pathlib import Path

import yaml
from cryptography import x509

from rlix.core.validation import Capacity
from rlix.operator.certificates import make_certificates
from rlix.operator.dry_runs import dry_run_pods
from rlix.operator.reconciling import backoff_s
from rlix.operator.webhook import review

ROOT = Path(__file__).resolve().parents[2]
CAPACITY = Capacity(max_gpu_memory_mib=81920, max_gpus_per_node=8, total_gpus=32)


def test_review_refuses_what_the_cluster_cannot_hold_naming_the_field() -> None:
    bad = yaml.safe_load((ROOT / "tests/invalid_manifests/16-memory-over-any-gpu.yaml").read_text())
    (error,) = review(bad, None, CAPACITY)
    assert error.startswith("spec.roles[1].gpuMemoryMiB.rollout: 90000 MiB")


def test_review_accepts_examples_and_metadata_only_updates() -> None:
    good = yaml.safe_load((ROOT / "examples/ppo-rllib.yaml").read_text())
    assert review(good, None, CAPACITY) == []
    small = Capacity(max_gpu_memory_mib=40000, max_gpus_per_node=4, total_gpus=8)
    assert review(good, None, small)  # a new job that can never fit is refused...
    labelled = {**good, "metadata": {**good["metadata"], "labels": {"team": "a"}}}
    assert review(labelled, good, small) == []  # ...an accepted one stays editable


def test_certificates_chain_to_the_ca_and_name_the_listen_address(tmp_path: Path) -> None:
    files = make_certificates(tmp_path, ["127.0.0.1", "localhost"])
    ca = x509.load_pem_x509_certificate(files.ca.read_bytes())
    cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
    cert.verify_directly_issued_by(ca)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(files.cert, files.key)  # the pair matches
    assert files.key.stat().st_mode & 0o077 == 0


def test_backoff_doubles_and_is_capped() -> None:
    assert [backoff_s(n, base_s=1) for n in (1, 2, 3, 4)] == [1, 2, 4, 8]
    assert backoff_s(30, base_s=1, cap_s=300) == 300


def test_dry_run_covers_templated_roles_with_what_exists_before_the_job() -> None:
    manifest = yaml.safe_load((ROOT / "examples/verl-colocated.yaml").read_text())
    manifest["metadata"]["namespace"] = "team-a"
    pods = dry_run_pods(manifest, agent_socket_dir="/run/rlix", scheduler_name="gpu-sched")
    # The short-form actor is typed through; only the templated reward role runs.
    assert [(i, p["metadata"]["name"]) for i, p in pods] == [(1, "verl-gsm8k-reward-0")]
    (_, pod) = pods[0]
    assert pod["metadata"]["namespace"] == "team-a"
    assert "ownerReferences" not in pod["metadata"]  # the job has no UID yet
    assert "priorityClassName" not in pod["spec"]  # created with the job's first pods
    # The operator's --scheduler-name (the chart's scheduler.name), not a constant.
    assert pod["spec"]["schedulerName"] == "gpu-sched"


def test_no_dry_run_for_a_manifest_the_rules_already_refuse() -> None:
    manifest = yaml.safe_load((ROOT / "examples/verl-colocated.yaml").read_text())
    manifest["spec"]["roles"][1]["template"]["spec"]["hostname"] = "x"
    assert dry_run_pods(manifest, agent_socket_dir="/run/rlix", scheduler_name="s") == []
