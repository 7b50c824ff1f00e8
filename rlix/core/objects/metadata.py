"""Safe access to the parts every Kubernetes object has.

A watch or a request body can hold anything where a map is expected; these
return an empty map instead of raising, so the per-field parsers decide what is
wrong and say so.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from rlix.core.objects.bounds import ObjectError, describe
from rlix.core.objects.values import NAME_MAX_CHARS

EMPTY: Mapping[str, Any] = {}
# The API server gives every object a lowercase RFC 4122 uuid as its uid (it
# ignores one a client sets), so anything else was never a uid; the agent names
# files by uid, and this keeps a path out of those names.
_UID = re.compile(r"[0-9a-f-]{1,64}")


def part(obj: object, key: str) -> Mapping[str, Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, Mapping) else EMPTY


def strings(obj: object, key: str) -> Mapping[str, Any]:
    """Labels or annotations (values as given; the parsers check their type)."""
    return part(part(obj, "metadata"), key)


def _name_part(kind: str, raw: object, where: str) -> str:
    if not isinstance(raw, str) or not raw or len(raw) > NAME_MAX_CHARS:
        why = f"must be a non-empty string of at most {NAME_MAX_CHARS} characters"
        raise ObjectError(kind=kind, name="?", where=where, got=describe(raw), why=why)
    return raw


def identity(obj: object, kind: str, *, namespaced: bool) -> str:
    """``ns/name`` (or ``name``) of an object; ``ObjectError`` if it has none.

    An object without a usable name cannot even be keyed, so it is the one
    error that refuses the whole object.
    """
    if not isinstance(obj, Mapping):
        raise ObjectError(
            kind=kind, name="?", where="object", got=describe(obj), why="must be a JSON object"
        )
    meta = part(obj, "metadata")
    name = _name_part(kind, meta.get("name"), "metadata.name")
    if not namespaced:
        return name
    ns = _name_part(kind, meta.get("namespace") or "default", "metadata.namespace")
    return f"{ns}/{name}"


def uid(obj: object) -> str:
    raw = part(obj, "metadata").get("uid")
    return raw if isinstance(raw, str) and len(raw) <= NAME_MAX_CHARS else ""


def is_uid(text: str) -> bool:
    """Whether ``text`` can be a Kubernetes object uid (safe as a file name)."""
    return _UID.fullmatch(text) is not None
