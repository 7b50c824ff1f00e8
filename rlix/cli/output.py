"""``-o json|yaml|wide``: the same facts a command prints as a table, for scripts.

json and yaml print plain data (the rows a table shows, with numbers as
numbers); wide prints the table with more columns. The keys are camelCase, as
the API server's own objects are.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

FORMATS = ("json", "yaml", "wide")


def add_output_flag(parser: argparse.ArgumentParser, formats: tuple[str, ...] = FORMATS) -> None:
    parser.add_argument(
        "-o",
        "--output",
        choices=formats,
        help="print " + "|".join(formats) + " instead of the table",
    )


def camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part.title() for part in rest)


def camel_keys(value: Any) -> Any:
    """snake_case dataclass fields -> camelCase keys, recursively."""
    if isinstance(value, dict):
        return {camel(str(k)): camel_keys(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [camel_keys(v) for v in value]
    return value


def emit(data: Any, fmt: str) -> None:
    """Write ``data`` to stdout as json or yaml."""
    if fmt == "json":
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")
    elif fmt == "yaml":
        import yaml

        sys.stdout.write(yaml.safe_dump(data, sort_keys=False))
    else:
        raise ValueError(f"no plain-data output format {fmt!r} (json, yaml)")
