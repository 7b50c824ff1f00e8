"""The one recipe for the component images ``make images`` builds (``hack/images.sh``).

Each RLix component image is the real node's image (Debian minbase, python3,
the project's wheel: ``rlix.devcluster.node_payload``) with one payload layer
holding every component's extra, tagged once per component with that
component's entrypoint and user. The scheduler image is the toolchain's own
kube-scheduler binary (the cluster's version) alone.

The Dockerfiles (for users with Docker) are checked against this table by
tests/components/test_dockerfiles.py: same extra, entrypoint and user, so the
two ways of building cannot drift apart.

    python -m rlix.devcluster.component_images  # "<repository> <extra> <entrypoint> <user>"
"""

from __future__ import annotations

import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class ComponentImage:
    """One RLix image: what the chart pulls and how the container starts."""

    repository: str  # the chart's default <component>.image.repository
    extra: str  # the pyproject extra the component needs
    entrypoint: str  # the console script the container runs
    user: str  # "uid:gid", or "" for root (the privileged node agent)


# Chart values key -> image. Non-root (65532, the chart's runAsUser) where the
# chart runs the pod non-root; the node agent is privileged and root on purpose
# (charts/rlix/values.yaml says why).
COMPONENTS: dict[str, ComponentImage] = {
    "operator": ComponentImage("rlix-operator", "operator", "rlix-operator", "65532:65532"),
    "extender": ComponentImage("rlix-extender", "extender", "rlix-extender", "65532:65532"),
    "nodeAgent": ComponentImage("rlix-node-agent", "agent", "rlix-node-agent", ""),
}
# The payload shared by every component image: each component's extra, plus the
# CLI (`rlix agent status` is run in the agent's container).
PAYLOAD_EXTRAS: tuple[str, ...] = (*sorted({c.extra for c in COMPONENTS.values()}), "cli")
# The scheduler image: the chart's default repository, the binary's own user.
SCHEDULER_REPOSITORY = "kube-scheduler"
SCHEDULER_USER = "65532:65532"


def main() -> int:
    for image in COMPONENTS.values():
        print(image.repository, image.extra, image.entrypoint, image.user or "-")
    return 0


if __name__ == "__main__":
    sys.exit(main())
