"""Print a pip constraints file pinning each range of pyproject.toml at its lower bound.

``python hack/lower_bounds.py base cli`` -> ``pydantic==2.9`` ... for the base
dependencies and the ``cli`` extra. ``make deps-lowest`` installs the client
with these constraints in a throwaway venv and runs the client's tests there, so
a lower bound in pyproject.toml is a version that was seen to work. A
requirement without a ``>=`` bound is refused: users' resolvers would then be
free to pick any old release.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_REQUIREMENT = re.compile(r"^(?P<name>[A-Za-z0-9._-]+)(\[[^\]]*\])?\s*(?P<spec>[^;]*)")


def requirements(groups: list[str]) -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found: list[str] = []
    for group in groups:
        if group == "base":
            found += project["dependencies"]
        else:
            found += project["optional-dependencies"][group]
    return found


def lower_bound(requirement: str) -> str:
    """``pydantic>=2.9,<3`` -> ``pydantic==2.9``."""
    match = _REQUIREMENT.match(requirement.strip())
    if not match:
        raise SystemExit(f"unreadable requirement {requirement!r}")
    bounds = [s.strip() for s in match["spec"].split(",") if s.strip().startswith(">=")]
    if len(bounds) != 1:
        raise SystemExit(f"{requirement!r} needs exactly one '>=' lower bound")
    return f"{match['name']}=={bounds[0].removeprefix('>=').strip()}"


def main(argv: list[str]) -> int:
    groups = argv or ["base"]
    for line in sorted({lower_bound(r) for r in requirements(groups)}):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
