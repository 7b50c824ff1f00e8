"""The docs table of every fact RLix reads, generated from ``facts.FACTS``.

docs/objects.md carries this table between two marker lines; a test regenerates
it and fails on any difference, so the documented defaults and bounds are the
ones the reader enforces.
"""

from __future__ import annotations

from rlix.core.objects.facts import FACTS

BEGIN = "<!-- facts table: generated from rlix/core/objects/facts.py -->"
END = "<!-- end of facts table -->"
HEADER = ("object", "where", "key", "type", "unit", "bounds", "default", "a bad value gets")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown() -> str:
    rows = [HEADER, ("---",) * len(HEADER)]
    rows += [
        (
            fact.kind,
            fact.source,
            f"`{fact.key}`",
            fact.parser.type,
            fact.unit,
            fact.parser.bounds,
            fact.default_doc,
            f"{fact.on_bad_doc}, and an error naming the object",
        )
        for fact in FACTS
    ]
    return "\n".join("| " + " | ".join(_cell(c) for c in row) + " |" for row in rows) + "\n"


def block() -> str:
    """The table with its marker lines, as it appears in the docs."""
    return f"{BEGIN}\n{markdown()}{END}\n"
