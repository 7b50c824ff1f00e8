"""Which pip extra provides a missing import, so a bare ``pip install rlix``
answers ``rlix top`` with the install line instead of a traceback.
"""

from __future__ import annotations

# Top-level module -> the extra of pyproject.toml that installs it.
EXTRA_OF = {
    "kubernetes": "cli",
    "rich": "cli",
    "yaml": "cli",
    "kopf": "operator",
    "fastapi": "extender",
    "uvicorn": "extender",
    "pynvml": "agent",
    "matplotlib": "bench",
}


def missing_extra_message(command: str, err: ModuleNotFoundError) -> str | None:
    """The hint for ``err``, or None when no extra provides the missing module."""
    module = (err.name or "").split(".", 1)[0]
    extra = EXTRA_OF.get(module)
    if extra is None:
        return None
    return (
        f"rlix {command}: needs the Python package {module!r}, which the base install "
        f"leaves out.\nInstall the {extra!r} extra: pip install 'rlix[{extra}]'"
    )
