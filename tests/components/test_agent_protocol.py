"""The agent's line protocol: every malformed message gets a specific error."""

from __future__ import annotations

import json

import pytest

from rlix.core import agent_protocol as proto

BAD = [
    ("not-json", b"hello\n", proto.E_MALFORMED, "not valid JSON"),
    ("not-utf8", b"\xff\xfe\n", proto.E_MALFORMED, "not valid JSON"),
    ("array", b"[1,2]\n", proto.E_MALFORMED, "expected a JSON object"),
    ("no-version", b'{"id":1,"op":"phase","phase":"rollout"}\n', proto.E_VERSION, "None"),
    ("future-version", b'{"v":2,"id":1,"op":"phase"}\n', proto.E_VERSION, "speaks 1"),
    ("no-id", b'{"v":1,"op":"phase","phase":"rollout"}\n', proto.E_MALFORMED, "integer 'id'"),
    ("bool-id", b'{"v":1,"id":true,"op":"status"}\n', proto.E_MALFORMED, "integer 'id'"),
    ("unknown-op", b'{"v":1,"id":3,"op":"teleport"}\n', proto.E_UNKNOWN_OP, "teleport"),
    (
        "forged-pod",
        b'{"v":1,"id":4,"op":"phase","phase":"rollout","pod":"ns/victim"}\n',
        proto.E_BAD_FIELD,
        "peer credentials",
    ),
    ("reply-no-ok", b'{"v":1,"re":5}\n', proto.E_MALFORMED, "boolean 'ok'"),
    ("error-no-body", b'{"v":1,"re":5,"ok":false}\n', proto.E_MALFORMED, "'error' object"),
    ("fds-not-int", b'{"v":1,"id":6,"op":"status","fds":"1"}\n', proto.E_MALFORMED, "'fds'"),
    ("fds-too-many", b'{"v":1,"re":6,"ok":true,"fds":9}\n', proto.E_MALFORMED, "[0, 8]"),
    ("fds-negative", b'{"v":1,"re":6,"ok":true,"fds":-1}\n', proto.E_MALFORMED, "'fds'"),
    ("huge-int", b'{"v":1,"id":' + b"7" * 5000 + b',"op":"status"}\n', proto.E_MALFORMED, "digits"),
    (
        "huge-int-field",
        b'{"v":1,"id":1,"op":"phase","phase":' + b"1" * 30 + b"}\n",
        proto.E_MALFORMED,
        "digits",
    ),
    (
        "long-float",
        b'{"v":1,"re":1,"ok":true,"x":0.' + b"1" * 5000 + b"}\n",
        proto.E_MALFORMED,
        "digits",
    ),
    (
        "deep",
        b'{"v":1,"id":1,"op":"status","x":' + b"[" * 100_000 + b"]" * 100_000 + b"}\n",
        proto.E_MALFORMED,
        "nested deeper than",
    ),
    (
        "deep-objects",
        b'{"v":1,"id":1,"x":' + b'{"a":' * 40 + b"1" + b"}" * 40 + b"}\n",
        proto.E_MALFORMED,
        "nested deeper than",
    ),
    (
        "relocate-on-resume",
        b'{"v":1,"id":7,"op":"resume-pod","pod_uid":"u","target":"host"}\n',
        proto.E_BAD_FIELD,
        "does not take ['target']",
    ),
]


@pytest.mark.parametrize(("line", "code", "text"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_malformed_lines_raise_specific_errors(line: bytes, code: str, text: str) -> None:
    with pytest.raises(proto.ProtocolError) as info:
        proto.decode(line)
    assert info.value.code == code
    assert text in info.value.message


def test_error_keeps_the_message_id_when_one_was_readable() -> None:
    with pytest.raises(proto.ProtocolError) as info:
        proto.decode(b'{"v":1,"id":9,"op":"nope"}\n')
    assert info.value.msg_id == 9


def test_overlong_line_is_refused_before_parsing() -> None:
    line = b'{"v":1,"id":1,"op":"status","x":"' + b"a" * proto.MAX_LINE_BYTES + b'"}\n'
    with pytest.raises(proto.ProtocolError, match="longer than"):
        proto.decode(line)


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    line = b'{"v":1,"id":1,"op":"phase","phase":"' + b"[{" * 1000 + b'\\"]"}\n'
    msg = proto.decode(line)
    assert isinstance(msg, proto.Request) and msg.args["phase"].startswith("[{")


def test_request_and_reply_round_trip() -> None:
    req = proto.decode(proto.encode_request(7, proto.OP_PHASE, phase="rollout"))
    assert req == proto.Request(id=7, op="phase", args={"phase": "rollout"})
    rep = proto.decode(proto.encode_reply(7, since="2026-01-01T00:00:00Z"))
    assert rep == proto.Reply(re=7, ok=True, body={"since": "2026-01-01T00:00:00Z"})
    err = proto.decode(proto.encode_error(7, proto.E_FORBIDDEN, "no"))
    assert isinstance(err, proto.Reply)
    assert (err.ok, err.error_code, err.error_message) == (False, "forbidden", "no")


def test_lines_are_single_line_json() -> None:
    line = proto.encode_request(1, proto.OP_HELLO, hooks=["a\nb"])
    assert line.count(b"\n") == 1
    assert json.loads(line)["hooks"] == ["a\nb"]


def test_field_validators() -> None:
    req = proto.Request(id=1, op="usage", args={"gpu": True, "memory_mib": -1})
    with pytest.raises(proto.ProtocolError, match="'gpu' in"):
        proto.require_number(req, "gpu", low=0, high=8)
    with pytest.raises(proto.ProtocolError, match="'memory_mib' in"):
        proto.require_number(req, "memory_mib", low=0, high=8)
    with pytest.raises(proto.ProtocolError, match="non-empty string 'phase'"):
        proto.require_str(req, "phase")


def test_descriptor_counts_travel_in_the_envelope_not_the_body() -> None:
    req = proto.decode(proto.encode_request(3, proto.OP_SUSPEND, nfds=0, target="host"))
    assert isinstance(req, proto.Request)
    assert req.nfds == 0 and dict(req.args) == {"target": "host"}
    rep = proto.decode(proto.encode_reply(3, nfds=1, manifest={}, export={}))
    assert isinstance(rep, proto.Reply)
    assert rep.nfds == 1 and "fds" not in rep.body
    assert rep.fds == ()  # the reader attaches the descriptors themselves


@pytest.mark.parametrize(
    ("value", "parsed"),
    [(None, "self"), ("self", "self"), ("host", "host"), ("gpu:0", "gpu:0"), ("gpu:07", "gpu:7")],
)
def test_suspend_targets(value: object, parsed: str) -> None:
    target = proto.parse_target(value)
    assert str(target) == parsed
    assert proto.Location.parse(parsed) == target  # one parse, one spelling both ways


@pytest.mark.parametrize(
    ("text", "place", "gpu", "agent_holds"),
    [
        ("self", proto.Place.SELF, None, False),
        ("driver-checkpoint", proto.Place.DRIVER, None, False),
        ("exported", proto.Place.EXPORTED, None, False),
        ("host", proto.Place.HOST, None, True),
        ("gpu:3", proto.Place.GPU, 3, True),
    ],
)
def test_every_location_has_one_spelling(
    text: str, place: proto.Place, gpu: int | None, agent_holds: bool
) -> None:
    loc = proto.Location.parse(text)
    assert (loc.place, loc.gpu, loc.agent_holds, str(loc)) == (place, gpu, agent_holds, text)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "gpu",
        "gpu:",
        "gpu:x",
        "gpu:-1",
        "gpu:1024",
        "gpu:" + "0" * 5000,
        "disk",
        1,
        "exported",
        "driver-checkpoint",
        "relocated-host",
    ],
)
def test_bad_suspend_targets_say_what_is_allowed(value: object) -> None:
    with pytest.raises(proto.ProtocolError, match="'target' must be 'self'") as err:
        proto.parse_target(value)
    assert err.value.code == proto.E_BAD_FIELD


def test_suspend_and_resume_reasons_are_a_closed_set_defaulting_to_manual() -> None:
    assert proto.parse_reason(None) is proto.Reason.MANUAL
    assert proto.parse_reason("preemption") is proto.Reason.PREEMPTION
    with pytest.raises(proto.ProtocolError, match="'reason' must be one of") as err:
        proto.parse_reason("because")
    assert err.value.code == proto.E_BAD_FIELD
    request = proto.decode(
        proto.encode_request(1, proto.OP_RESUME_POD, pod_uid="u", reason="lending")
    )
    assert isinstance(request, proto.Request) and request.args["reason"] == "lending"
