"""Leader election settings: the timing rules the flags must follow."""

from __future__ import annotations

import pytest

from rlix.operator.leadership import ElectionSettings
from rlix.operator.main import election_settings, parse_args


def test_client_go_defaults_are_valid_and_a_leader_notices_loss_before_a_standby_takes_over() -> (
    None
):
    settings = ElectionSettings(namespace="rlix-system")
    assert settings.errors() == []
    worst = settings.renew_deadline_s + settings.retry_period_s + 2 * settings.request_timeout_s
    assert worst < settings.lease_duration_s


def test_a_lease_shorter_than_the_renew_deadline_is_refused_naming_the_flags() -> None:
    errors = ElectionSettings(
        namespace="x", lease_duration_s=10, renew_deadline_s=10, retry_period_s=2
    ).errors()
    assert len(errors) == 1 and "--leader-election-lease-duration" in errors[0]
    errors = ElectionSettings(
        namespace="x", lease_duration_s=30, renew_deadline_s=2, retry_period_s=2
    ).errors()
    assert errors and "--leader-election-renew-deadline" in errors[0]


def test_flags_build_the_settings_with_the_ledger_namespace_by_default() -> None:
    assert election_settings(parse_args([])) is None
    args = parse_args(["--leader-elect", "--ledger-namespace", "rlix-system"])
    settings = election_settings(args)
    assert settings is not None and settings.namespace == "rlix-system"
    assert settings.name == "rlix-operator"
    assert settings.identity != ElectionSettings(namespace="x").identity  # unique per run
    with pytest.raises(SystemExit, match="lease-duration"):
        election_settings(parse_args(["--leader-elect", "--leader-election-lease-duration", "3"]))


def test_scheduler_name_and_metrics_host_come_from_flags() -> None:
    args = parse_args(["--scheduler-name", "gpu-sched", "--metrics-host", "0.0.0.0"])
    assert (args.scheduler_name, args.metrics_host) == ("gpu-sched", "0.0.0.0")
    assert parse_args([]).scheduler_name == "rlix-scheduler"


def test_lease_calls_fail_as_the_retryable_api_exception_never_as_a_transport_error() -> None:
    """The election module retries on ApiException; anything else would end its thread."""
    import threading

    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from rlix.operator.leadership import _BoundedCalls

    configuration = client.Configuration()
    configuration.host = "http://127.0.0.1:9"  # discard port: connection refused
    configuration.retries = 0
    stopped = threading.Event()
    calls = _BoundedCalls(client.ApiClient(configuration), 1.0, stopped)
    with pytest.raises(ApiException) as refused:
        calls.read_namespaced_lease("rlix-operator", "default")
    assert refused.value.status == 0
    stopped.set()  # after a release no renewal may re-take the Lease
    with pytest.raises(ApiException, match="stopped"):
        calls.read_namespaced_lease("rlix-operator", "default")


def test_a_release_waits_for_a_renewal_in_flight_and_no_renewal_runs_after_it() -> None:
    """Seen in CI: a renewal landing between the release's read and write kept the Lease held."""
    import threading

    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from rlix.operator import leadership

    configuration = client.Configuration()
    configuration.host = "http://127.0.0.1:9"  # discard port: every call is refused at once
    configuration.retries = 0
    lead = leadership.Leadership(
        ElectionSettings(namespace="x"), client.ApiClient(configuration), on_lost=lambda: None
    )
    lead.is_leader = True
    calls = lead._calls
    calls.in_flight.acquire()  # a renewal is on the wire
    releasing = threading.Thread(target=lead.release)
    releasing.start()
    releasing.join(0.3)
    assert releasing.is_alive() and lead.is_leader  # the release waits for it
    calls.in_flight.release()
    releasing.join(30)
    assert not releasing.is_alive() and not lead.is_leader
    with pytest.raises(ApiException, match="stopped"):
        calls.read_namespaced_lease("rlix-operator", "x")
