"""Where the locally built control-plane binaries live.

They are built by ``hack/toolchain.sh`` and cached by version outside the
checkout; this module only finds them, so importing it never starts a build.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REQUIRED = (
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "etcd",
    "kwok",
    "kwokctl",
)


# Both Helm majors: the chart is tested with each (``helm`` itself is Helm 4).
HELM_BINARIES = ("helm3", "helm4")


class ToolchainMissingError(RuntimeError):
    """The control-plane binaries are not built yet."""


def repo_root(start: Path | None = None) -> Path | None:
    """The checkout containing ``hack/toolchain.sh``, searching upwards."""
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / "hack" / "toolchain.sh").is_file():
            return candidate
    package_checkout = Path(__file__).resolve().parents[2]
    if (package_checkout / "hack" / "toolchain.sh").is_file():
        return package_checkout
    return None


def bin_dir() -> Path:
    """The toolchain's bin directory; RLIX_TOOLCHAIN_BIN overrides the lookup."""
    override = os.environ.get("RLIX_TOOLCHAIN_BIN")
    if override:
        path = Path(override)
    else:
        root = repo_root()
        if root is None:
            raise ToolchainMissingError(
                "cannot find hack/toolchain.sh; run from an RLix checkout or set RLIX_TOOLCHAIN_BIN"
            )
        out = subprocess.run(
            [str(root / "hack" / "toolchain.sh"), "--print"],
            check=True,
            capture_output=True,
            text=True,
        )
        path = Path(out.stdout.strip())
    missing = [name for name in REQUIRED if not (path / name).is_file()]
    if missing:
        raise ToolchainMissingError(
            f"toolchain in {path} lacks {', '.join(missing)}: run `make toolchain` first"
        )
    return path


def versions(root: Path | None = None) -> dict[str, str]:
    """``hack/versions.env`` as a dict (K8S_VERSION, HELM_VERSION, ...).

    The one place the toolchain's versions are written; tests read the
    Kubernetes version they render the chart for from here, so an upgrade
    edits one file.
    """
    checkout = root or repo_root()
    if checkout is None:
        raise ToolchainMissingError("cannot find hack/versions.env outside an RLix checkout")
    path = checkout / "hack" / "versions.env"
    found: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.isidentifier():
            raise ValueError(f"{path}:{number}: expected KEY=VALUE, got {raw!r}")
        found[key] = value
    return found
