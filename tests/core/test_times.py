"""RFC 3339 timestamps: one parser for the operator, the demo and the CLI."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from rlix.core.times import MAX_CHARS, parse_rfc3339


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("2026-12-01T04:31:17Z", datetime(2026, 12, 1, 4, 31, 17, tzinfo=UTC)),
        ("2026-12-01T04:31:17.250000+00:00", datetime(2026, 12, 1, 4, 31, 17, 250000, tzinfo=UTC)),
        (
            "2026-12-01T06:31:17+02:00",
            datetime(2026, 12, 1, 6, 31, 17, tzinfo=timezone(timedelta(hours=2))),
        ),
        ("2026-12-01T04:31:17", datetime(2026, 12, 1, 4, 31, 17, tzinfo=UTC)),  # no offset: UTC
    ],
)
def test_timestamps_read_as_aware_datetimes(raw: str, want: datetime) -> None:
    got = parse_rfc3339(raw)
    assert got == want and got is not None and got.tzinfo is not None


@pytest.mark.parametrize(
    "raw", [None, "", "yesterday", 1733027477, "2026-13-01T00:00:00Z", "9" * (MAX_CHARS + 1)]
)
def test_anything_else_is_none(raw: object) -> None:
    assert parse_rfc3339(raw) is None
