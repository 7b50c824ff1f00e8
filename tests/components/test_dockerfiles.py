"""The Dockerfiles (for users with Docker) agree with pyproject.toml and the chart:
the extra each installs, the console script it runs, the user it runs as, and the
repository name the chart pulls."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
import yaml

from rlix.devcluster import component_images

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VALUES = yaml.safe_load((ROOT / "charts" / "rlix" / "values.yaml").read_text())

# Dockerfile directory -> (pyproject extra, console script, chart values key)
COMPONENTS = {
    "operator": ("operator", "rlix-operator", "operator"),
    "extender": ("extender", "rlix-extender", "extender"),
    "node-agent": ("agent", "rlix-node-agent", "nodeAgent"),
}


@pytest.mark.parametrize("directory", list(COMPONENTS))
def test_dockerfile_matches_pyproject_and_chart(directory: str) -> None:
    extra, script, key = COMPONENTS[directory]
    text = (ROOT / directory / "Dockerfile").read_text()
    assert extra in PYPROJECT["project"]["optional-dependencies"]
    assert f"pip install --no-cache-dir '.[{extra}]'" in text
    (entrypoint,) = re.findall(r"^ENTRYPOINT (.+)$", text, re.M)
    assert json.loads(entrypoint) == [script]
    assert script in PYPROJECT["project"]["scripts"]
    # The files the build reads: the license is part of the package metadata.
    assert re.search(r"^COPY pyproject.toml README.md LICENSE \./$", text, re.M)
    # `docker build ... -t <repository>:dev` names what the chart pulls by default.
    (tagged,) = re.findall(r"-t ([\w.-]+):dev", text)
    assert tagged == VALUES[key]["image"]["repository"]
    # Python of the image = the Python the package is typed and tested for.
    python = PYPROJECT["tool"]["mypy"]["python_version"]
    assert re.search(rf"^FROM python:{re.escape(python)}\.\d+-slim", text, re.M)


@pytest.mark.parametrize("directory", list(COMPONENTS))
def test_image_user_matches_the_charts_security_context(directory: str) -> None:
    """Non-root images run as the chart's runAsUser; the agent alone runs as root."""
    key = COMPONENTS[directory][2]
    text = (ROOT / directory / "Dockerfile").read_text()
    users = re.findall(r"^USER (\d+):(\d+)$", text, re.M)
    pod = VALUES[key]["podSecurityContext"]
    if VALUES[key]["securityContext"].get("privileged"):
        assert not users and not pod, "the privileged agent runs as root"
    else:
        assert users == [(str(pod["runAsUser"]), str(pod["runAsGroup"]))]
        assert pod["runAsNonRoot"] is True


# Dockerfile directory -> chart values key, for the `make images` recipe.
DIRECTORIES = {directory: key for directory, (_, _, key) in COMPONENTS.items()}


@pytest.mark.parametrize("directory", list(COMPONENTS))
def test_dockerfile_matches_the_make_images_recipe(directory: str) -> None:
    """hack/images.sh builds from rlix.devcluster.component_images; the Dockerfile
    must install the same extra, run the same entrypoint as the same user, and be
    tagged with the same repository, or the two images would differ."""
    image = component_images.COMPONENTS[DIRECTORIES[directory]]
    text = (ROOT / directory / "Dockerfile").read_text()
    assert f"pip install --no-cache-dir '.[{image.extra}]'" in text
    (entrypoint,) = re.findall(r"^ENTRYPOINT (.+)$", text, re.M)
    assert json.loads(entrypoint) == [image.entrypoint]
    users = re.findall(r"^USER (\S+)$", text, re.M)
    assert users == ([image.user] if image.user else [])
    if image.user:
        # Named in /etc/passwd, as hack/images.sh does: kopf calls getpass.getuser().
        uid = image.user.split(":")[0]
        assert re.search(rf"useradd --uid {uid} --user-group ", text), directory
    (tagged,) = re.findall(r"-t ([\w.-]+):dev", text)
    assert tagged == image.repository
    # The recipe's one payload carries every component's extra.
    assert image.extra in component_images.PAYLOAD_EXTRAS


def test_the_recipe_covers_every_chart_component_with_an_image() -> None:
    """Every component the chart runs from an RLix image has a recipe entry, and
    the scheduler image carries the chart's default repository and user."""
    rlix_images = {
        key for key in VALUES if isinstance(VALUES[key], dict) and "image" in VALUES[key]
    }
    assert set(component_images.COMPONENTS) == rlix_images - {"scheduler"}
    assert set(DIRECTORIES.values()) == set(component_images.COMPONENTS)
    scheduler = VALUES["scheduler"]
    assert scheduler["image"]["repository"] == component_images.SCHEDULER_REPOSITORY
    pod = scheduler["podSecurityContext"]
    assert f"{pod['runAsUser']}:{pod['runAsGroup']}" == component_images.SCHEDULER_USER
    for key, image in component_images.COMPONENTS.items():
        assert VALUES[key]["image"]["repository"] == image.repository
        assert image.entrypoint in PYPROJECT["project"]["scripts"]
        assert image.extra in PYPROJECT["project"]["optional-dependencies"]
        pod = VALUES[key]["podSecurityContext"]
        assert image.user == (f"{pod['runAsUser']}:{pod['runAsGroup']}" if pod else "")
