"""``rlix.active_replicas()``: the trainer asks the node agent which replicas run.

The agent here is the real program (``--no-kube``): it answers the op from a
pod's process, and has no roster for it (only its conducting loop, fed by the
API server, fills one; e2e/test_conductor.py shows that path). What the loop
puts in the book, and what the socket then answers, is tested below with the
loop's own pod lister.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import rlix
from rlix.agent.rosters import Rosters
from rlix.client.replicas import Watch, ask
from rlix.client.runtime import Runtime
from rlix.core import agent_protocol as proto
from rlix.core.suspension import ANNOTATION_ACTIVE_REPLICAS, ActiveReplicas
from tests.support.agent_fakes import AgentProcess

UID = "eeeeeeee-0000-4000-8000-00000000000a"


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    with AgentProcess(tmp_path, pods={UID: "t/p-gen-0"}) as agent:
        agent.put_in_pod(os.getpid(), UID)
        rt = Runtime(str(agent.socket))
        link = rt.link
        assert link is not None and link.connected.wait(20), agent.log_text()
        try:
            yield rt
        finally:
            link.close()


def test_without_an_agent_there_is_no_roster_and_the_callback_hears_none_once() -> None:
    rlix.configure(None)
    assert rlix.active_replicas() is None
    heard: list[object] = []
    stop = rlix.watch_active_replicas(heard.append)
    stop()
    assert heard == [None]


def test_the_agent_answers_a_pod_and_says_none_for_a_job_it_has_no_roster_for(
    runtime: Runtime,
) -> None:
    link = runtime.link
    assert link is not None
    reply = link.request(proto.OP_ACTIVE_REPLICAS).result(20)
    assert reply.ok and reply.body == {"activeReplicas": None}, reply
    assert ask(link, timeout_s=20) is None


def test_a_watch_reports_the_first_answer_and_stops(runtime: Runtime) -> None:
    assert runtime.link is not None
    heard = threading.Event()
    answers: list[ActiveReplicas | None] = []

    def callback(roster: ActiveReplicas | None) -> None:
        answers.append(roster)
        heard.set()

    watch = Watch(runtime.link, callback, interval_s=0.05)
    try:
        assert heard.wait(20)
    finally:
        watch.stop()
    assert answers[0] is None


def test_the_book_holds_what_the_pods_carry_and_forgets_what_they_drop() -> None:
    roster = ActiveReplicas("gen", 3, 1, (0, 1), (2,))
    book = Rosters()
    book.update({"a": {ANNOTATION_ACTIVE_REPLICAS: roster.to_json()}, "b": {}})
    assert book.of("a") == roster and book.of("b") is None
    book.update({"a": {ANNOTATION_ACTIVE_REPLICAS: "{not json"}})
    assert book.of("a") is None, "a malformed roster reads as none"
    book.update({})
    assert book.of("a") is None
