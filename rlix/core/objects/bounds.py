"""Bounded parsers for the values RLix reads off Kubernetes objects.

Anyone who can create a pod can write any annotation, so every value is read
as hostile: its length is checked *before* it is parsed (``int()`` of a
5,000-digit string costs quadratic time and, above 4,300 digits, raises a
``ValueError`` that is not ours), JSON is size- and depth-bounded, and numbers
are range-checked. A parser either returns a value or raises ``BadValueError`` with
a sentence that says why; the reader turns that into a per-object
``ObjectError`` naming the object and the field, so one bad object never
disturbs the view of another.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

_DIGITS = re.compile(r"[+-]?[0-9]+")
# Whitespace around a number is tolerated, not unbounded padding.
_PADDING = 8


class BadValueError(ValueError):
    """A value that does not parse; the message says why (without the value)."""


class ObjectError(ValueError):
    """One field of one Pod, Node or RLJob cannot be read.

    ``got`` describes the value's class and size, never the whole value: a
    hostile value can be megabytes, and it ends up in logs and events.
    """

    def __init__(self, *, kind: str, name: str, where: str, got: str, why: str) -> None:
        self.kind, self.name, self.where, self.got, self.why = kind, name, where, got, why
        super().__init__(f"{kind} {name}: {where}: {why}; got {got}")


def describe(raw: object) -> str:
    """The class and size of ``raw``, with a short prefix of it (safe to log)."""
    if raw is None:
        return "null"
    if isinstance(raw, bool):
        return f"boolean {str(raw).lower()}"
    if isinstance(raw, int):
        bits = raw.bit_length()
        if bits <= 64:
            return f"integer {raw}"
        return f"an integer of about {int(bits * math.log10(2)) + 1} digits"
    if isinstance(raw, float):
        return f"number {raw!r}"
    if isinstance(raw, str):
        if len(raw) <= 40:
            return f"string {raw!r}"
        return f"a string of {len(raw)} characters starting {raw[:16]!r}"
    if isinstance(raw, Mapping):
        return f"a JSON object of {len(raw)} keys"
    if isinstance(raw, list | tuple):
        return f"a JSON list of {len(raw)} items"
    return f"a value of type {type(raw).__name__}"


@dataclass(frozen=True, slots=True)
class Parser(Generic[T_co]):
    """A named, bounded parse step; ``bounds`` is what the docs table prints."""

    type: str
    bounds: str
    parse: Callable[[object], T_co]

    def __call__(self, raw: object) -> T_co:
        return self.parse(raw)


def _check_text(raw: object, max_chars: int) -> str:
    if not isinstance(raw, str):
        raise BadValueError("must be a string")
    if len(raw) > max_chars:
        raise BadValueError(f"longer than {max_chars} characters")
    return raw


def text(max_chars: int) -> Parser[str]:
    return Parser("string", f"<= {max_chars} characters", lambda raw: _check_text(raw, max_chars))


def integer(low: int, high: int, *, what: str = "integer") -> Parser[int]:
    """An integer in ``low..high``, given as a JSON number or a decimal string."""
    digits = max(len(str(low)), len(str(high)))

    def parse(raw: object) -> int:
        if isinstance(raw, bool):
            raise BadValueError("must be an integer, not a boolean")
        if isinstance(raw, str):
            if len(raw) > digits + _PADDING or not _DIGITS.fullmatch(raw.strip()):
                raise BadValueError(f"must be a decimal integer of at most {digits} digits")
            value = int(raw.strip())
        elif isinstance(raw, int):
            value = raw
        else:
            raise BadValueError("must be an integer")
        if not low <= value <= high:
            raise BadValueError(f"must be in {low}..{high}")
        return value

    return Parser(what, f"{low}..{high}", parse)


def number(low: float, high: float) -> Parser[float]:
    def parse(raw: object) -> float:
        if isinstance(raw, bool) or not isinstance(raw, int | float):
            raise BadValueError("must be a number")
        value = float(raw)
        if not math.isfinite(value) or not low <= value <= high:
            raise BadValueError(f"must be a finite number in {low:g}..{high:g}")
        return value

    return Parser("number", f"{low:g}..{high:g}", parse)


_TRUE, _FALSE = ("true", "yes", "1"), ("false", "no", "0")


def _flag(raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and len(raw) <= 5 + _PADDING:
        value = raw.strip().lower()
        if value in _TRUE:
            return True
        if value in _FALSE:
            return False
    raise BadValueError('must be "true" or "false"')


FLAG: Parser[bool] = Parser("boolean", '"true"/"false" (also yes/no, 1/0)', _flag)


def json_doc(raw: object, *, max_chars: int, max_depth: int) -> Any:
    """Parse JSON text of at most ``max_chars`` characters and ``max_depth`` levels.

    The length is checked first, so the parser never sees a 4,300-digit number
    or a megabyte of brackets; the depth is checked on the result, without
    recursion, because the C parser already refused anything deeper than the
    interpreter's recursion limit (``RecursionError``, caught here).
    """
    body = _check_text(raw, max_chars)
    try:
        doc = json.loads(body)
    except RecursionError:
        raise BadValueError("is JSON nested too deeply") from None
    except ValueError:
        raise BadValueError("is not JSON") from None
    check_depth(doc, max_depth)
    return doc


def check_depth(doc: Any, max_depth: int) -> None:
    """Raise ``BadValueError`` when ``doc`` nests more than ``max_depth`` containers."""
    stack: list[tuple[Any, int]] = [(doc, 0)]
    while stack:
        value, depth = stack.pop()
        children: Iterable[Any]
        if isinstance(value, dict):
            children = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth + 1 > max_depth:
            raise BadValueError(f"nests deeper than {max_depth} levels")
        stack.extend((child, depth + 1) for child in children)
