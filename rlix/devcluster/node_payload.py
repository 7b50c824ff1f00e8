"""What goes into the real node's image besides Debian: the project's wheel and
its runtime dependencies, laid out as a ``dist-packages`` tree.

``hack/node-images.sh`` calls this to build the payload and to name the image
by content: the key hashes every file of the wheel and of each dependency, not
the zip archives (a rebuilt wheel carries new timestamps but the same files),
so a warm run with unchanged sources reuses the cached image.

Dependencies are copied from the running interpreter's environment (the
project's venv, Python 3.11 like Debian 12's python3) instead of being fetched
again: the image then runs exactly the versions the tests run.

    python -m rlix.devcluster.node_payload OUT_DIR [EXTRA,...]   # prints the content key

OUT_DIR receives ``dist-packages`` (for /usr/lib/python3/dist-packages) and
``bin`` (the console scripts, for /usr/local/bin).
"""

from __future__ import annotations

import configparser
import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement


def build_wheel(source: Path, out: Path) -> Path:
    """``pip wheel`` of the checkout, without dependencies or build isolation."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(out),
            str(source),
        ],
        check=True,
    )
    wheels = sorted(out.glob("rlix-*.whl"))
    if len(wheels) != 1:
        raise RuntimeError(f"expected one rlix wheel in {out}, found {[w.name for w in wheels]}")
    return wheels[0]


# The image runs the node agent (simulated GPUs) and `rlix agent` besides trainers.
EXTRAS = ("agent", "cli")
# Left out, with their own dependencies unless something else needs them:
# cuda-core/cuda-bindings are feature-detected by the agent and useless on a node
# without a GPU (~47 MiB with numpy); aiohttp serves only kubernetes.aio.
LEFT_OUT = frozenset({"cuda-core", "cuda-bindings", "aiohttp"})
# Files of kept distributions that nothing in rlix imports: kubernetes.aio, the
# asyncio twin of the client (~62 MiB of the client's ~117 MiB).
LEFT_OUT_PATHS = ("kubernetes/aio/",)


def left_out(extras: tuple[str, ...]) -> frozenset[str]:
    """``LEFT_OUT`` for an image with ``extras``: the operator's kopf talks to the
    API server through aiohttp, so an image with the operator keeps it."""
    return LEFT_OUT - {"aiohttp"} if "operator" in extras else LEFT_OUT


def runtime_requirements(wheel: Path, extras: tuple[str, ...] = EXTRAS) -> list[str]:
    """Distribution names the wheel needs at run time with ``extras``, transitively,
    for this interpreter (markers are evaluated: Debian 12's python3 is 3.11, as
    the venv's), less ``left_out(extras)``."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode()
    pending = requirement_names(text.splitlines(), extras=extras)
    seen: list[str] = []
    while pending:
        name = pending.pop()
        if _canonical(name) in seen or _canonical(name) in left_out(extras):
            continue
        seen.append(_canonical(name))
        requires = metadata.distribution(name).requires or []
        pending.extend(requirement_names(requires, prefix="", extras=()))
    return sorted(seen)


def requirement_names(
    lines: list[str], *, prefix: str = "Requires-Dist:", extras: tuple[str, ...]
) -> list[str]:
    """The distributions ``lines`` require for the base install plus ``extras``
    (a requirement whose environment marker is false here is not required)."""
    out = []
    for line in lines:
        if not line.startswith(prefix):
            continue
        req = Requirement(line[len(prefix) :].strip())
        wanted = req.marker is None or any(
            req.marker.evaluate({"extra": extra}) for extra in ("", *extras)
        )
        if wanted:
            out.append(req.name)
    return out


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lay_out(wheel: Path, deps: list[str], target: Path) -> str:
    """Unpack the wheel and copy ``deps`` into ``target``; return the content key."""
    digest = hashlib.sha256()
    target.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as z:
        for info in sorted(z.infolist(), key=lambda i: i.filename):
            if info.is_dir():
                continue
            data = z.read(info)
            _add(digest, info.filename, data)
            dest = target / info.filename
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
    for name in deps:
        dist = metadata.distribution(name)
        for rel in sorted(dist.files or [], key=str):
            source = Path(str(dist.locate_file(rel)))
            if ".." in rel.parts or "__pycache__" in rel.parts or not source.is_file():
                continue  # console scripts live outside site-packages; bytecode is rebuilt
            if str(rel).startswith(LEFT_OUT_PATHS):
                continue
            _add(digest, str(rel), source.read_bytes())
            dest = target / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, dest)
    return digest.hexdigest()[:16]


def _add(digest: hashlib._Hash, name: str, data: bytes) -> None:
    digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())


def console_scripts(wheel: Path, target: Path) -> list[str]:
    """Write the wheel's console scripts (``rlix``, ``rlix-node-agent``, ...) into
    ``target`` as Debian's python3 runs them; return their names. They follow
    from the wheel's entry_points.txt, which the content key already covers."""
    with zipfile.ZipFile(wheel) as z:
        entry = next(n for n in z.namelist() if n.endswith(".dist-info/entry_points.txt"))
        text = z.read(entry).decode()
    parser = configparser.ConfigParser(delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(text)
    target.mkdir(parents=True, exist_ok=True)
    names = []
    scripts = parser.items("console_scripts") if parser.has_section("console_scripts") else []
    for name, value in scripts:
        module, _, func = value.strip().partition(":")
        script = target / name
        script.write_text(
            f"#!/usr/bin/python3\nimport sys\nfrom {module} import {func}\nsys.exit({func}())\n"
        )
        script.chmod(0o755)
        names.append(name)
    return names


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print("usage: python -m rlix.devcluster.node_payload OUT_DIR [EXTRA,...]", file=sys.stderr)
        return 2
    source = Path(__file__).resolve().parents[2]
    out = Path(argv[0])
    # The component images (hack/images.sh) name their extras; the node image takes EXTRAS.
    extras = tuple(argv[1].split(",")) if len(argv) == 2 else EXTRAS
    with tempfile.TemporaryDirectory(prefix="rlix-wheel-") as tmp:
        wheel = build_wheel(source, Path(tmp))
        key = lay_out(wheel, runtime_requirements(wheel, extras), out / "dist-packages")
        console_scripts(wheel, out / "bin")
    print(key)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
