"""What `pip install rlix` asks of a user's environment: the license, one version,
ranges (not pins) where the package lands in someone else's image, and the
lower bounds `make deps-lowest` installs."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

import rlix

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
EXTRAS: dict[str, list[str]] = PROJECT["optional-dependencies"]

# Installed into users' environments: trainer images, laptops.
USER_FACING = {"base": PROJECT["dependencies"]} | {
    name: EXTRAS[name] for name in ("cli", "trl", "rllib", "test-torch", "demo")
}
# Installed only into RLix's own images: exact pins keep those images reproducible.
SERVER = ("operator", "extender", "agent")


def _lower_bounds() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lower_bounds", ROOT / "hack" / "lower_bounds.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_license_file_is_apache_2_as_the_metadata_says() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert PROJECT["license"] == "Apache-2.0"
    assert PROJECT["license-files"] == ["LICENSE"]


def test_the_version_is_set_once() -> None:
    """pyproject reads rlix.__version__; the chart's appVersion (the image tag) follows it."""
    assert "version" not in PROJECT and PROJECT["dynamic"] == ["version"]
    dynamic = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["dynamic"]
    assert dynamic["version"] == {"attr": "rlix.__version__"}
    chart = yaml.safe_load((ROOT / "charts" / "rlix" / "Chart.yaml").read_text())
    assert chart["appVersion"] == rlix.__version__
    Version(rlix.__version__)  # a valid PEP 440 version


def test_the_base_install_is_the_client_only() -> None:
    assert [Requirement(r).name for r in PROJECT["dependencies"]] == ["pydantic"]


@pytest.mark.parametrize("group", list(USER_FACING))
def test_user_facing_requirements_are_ranges_with_a_lower_bound(group: str) -> None:
    for line in USER_FACING[group]:
        req = Requirement(line)
        operators = {s.operator for s in req.specifier}
        assert "==" not in operators and "~=" not in operators, f"{group}: {line} pins"
        assert ">=" in operators, f"{group}: {line} has no tested lower bound"


@pytest.mark.parametrize("group", ["trl", "rllib", "test-torch"])
def test_framework_extras_stop_at_the_next_major(group: str) -> None:
    for line in EXTRAS[group]:
        req = Requirement(line)
        (upper,) = [s for s in req.specifier if s.operator == "<"]
        (lower,) = [s for s in req.specifier if s.operator == ">="]
        assert Version(upper.version).major == Version(lower.version).major + 1, line


@pytest.mark.parametrize("group", SERVER)
def test_server_extras_pin_exactly(group: str) -> None:
    for line in EXTRAS[group]:
        assert {s.operator for s in Requirement(line).specifier} == {"=="}, f"{group}: {line}"


def test_constraints_pin_versions_inside_the_ranges() -> None:
    """constraints.txt (the dev venv, CI) must satisfy what users are promised."""
    pinned = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            pinned[name.lower()] = Version(version)
    for group, lines in USER_FACING.items():
        for line in lines:
            req = Requirement(line)
            assert req.name.lower() in pinned, f"{req.name} ({group}) missing from constraints.txt"
            assert pinned[req.name.lower()] in req.specifier, f"constraints.txt: {req.name}"


def test_lower_bounds_are_what_deps_lowest_installs() -> None:
    module = _lower_bounds()
    assert module.lower_bound("pydantic>=2.9,<3") == "pydantic==2.9"
    assert module.lower_bound("ray[rllib]>=2.60,<3") == "ray==2.60"
    with pytest.raises(SystemExit, match="lower bound"):
        module.lower_bound("kopf==1.45.2")
    base_and_cli = module.requirements(["base", "cli"])
    assert all(re.match(r"^[\w.-]+==[\d.]+$", module.lower_bound(r)) for r in base_and_cli)
