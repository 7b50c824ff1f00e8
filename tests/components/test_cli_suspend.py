"""``rlix suspend|resume rljob``: what it asks (the request is all it writes)."""

from __future__ import annotations

import pytest

from rlix.cli.main import build_parser
from rlix.cli.suspend import request_patch
from rlix.core.suspension import ANNOTATION_REQUEST, State, SuspensionRequest


@pytest.mark.parametrize(
    ("verb", "state"), [("suspend", State.SUSPENDED), ("resume", State.RUNNING)]
)
def test_the_verbs_parse_to_a_request_state(verb: str, state: State) -> None:
    args = build_parser().parse_args([verb, "rljob", "grpo", "-n", "research"])
    assert (args.name, args.namespace, args.state) == ("grpo", "research", state)


def test_the_request_is_one_annotation_on_the_rljob() -> None:
    patch = request_patch(State.SUSPENDED, "n1")
    raw = patch["metadata"]["annotations"][ANNOTATION_REQUEST]
    assert SuspensionRequest.parse(raw) == SuspensionRequest(State.SUSPENDED, "n1")
    assert set(patch) == {"metadata"}, "a request never touches the spec"


def test_only_rljobs_can_be_suspended() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["suspend", "pod", "x"])
