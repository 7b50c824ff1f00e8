"""RFC 3339 timestamps as the API server and RLix's own annotations write them."""

from __future__ import annotations

from datetime import UTC, datetime

# Longer is not a timestamp (and a hostile annotation gets no parser time).
MAX_CHARS = 64


def parse_rfc3339(raw: object) -> datetime | None:
    """An aware datetime (UTC when the text has no offset); None if absent or malformed."""
    if not isinstance(raw, str) or not raw or len(raw) > MAX_CHARS:
        return None
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
