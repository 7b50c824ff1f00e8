"""What goes into the real node's image besides Debian: the project's wheel and
its runtime dependencies, laid out as a ``dist-packages`` tree.

``hack/node-images.sh`` calls this to build the payload and to name the image
by content: the key hashes every file of the wheel and of each dependency, not
the zip archives (a rebuilt wheel carries new timestamps but the same files),
so a warm run with unchanged sources reuses the cached image.

Dependencies are copied from the running interpreter's environment (the
project's venv, Python 3.11 like Debian 12's python3) instead of being fetched
again: the image then runs exactly the versions the tests run.

    python -m rlix.devcluster.node_payload OUT_DIR   # prints the content key
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*")


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


def runtime_requirements(wheel: Path) -> list[str]:
    """Distribution names the wheel needs at run time (no extras), transitively."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode()
    pending = [_requirement_name(line) for line in _base_requirements(text.splitlines())]
    seen: list[str] = []
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.append(name)
        requires = metadata.distribution(name).requires or []
        pending.extend(_requirement_name(r) for r in _base_requirements(requires, prefix=""))
    return sorted(seen)


def _base_requirements(lines: list[str], prefix: str = "Requires-Dist:") -> list[str]:
    """Requirements without an ``extra ==`` marker (the others belong to extras)."""
    out = []
    for line in lines:
        if not line.startswith(prefix):
            continue
        req = line[len(prefix) :].strip()
        if "extra ==" in req.replace("extra==", "extra =="):
            continue
        out.append(req)
    return out


def _requirement_name(requirement: str) -> str:
    match = _NAME.match(requirement.strip())
    if match is None:
        raise ValueError(f"cannot read a distribution name from requirement {requirement!r}")
    return match.group(0)


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
            _add(digest, str(rel), source.read_bytes())
            dest = target / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, dest)
    return digest.hexdigest()[:16]


def _add(digest: hashlib._Hash, name: str, data: bytes) -> None:
    digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m rlix.devcluster.node_payload OUT_DIR", file=sys.stderr)
        return 2
    source = Path(__file__).resolve().parents[2]
    target = Path(argv[0])
    with tempfile.TemporaryDirectory(prefix="rlix-wheel-") as tmp:
        wheel = build_wheel(source, Path(tmp))
        print(lay_out(wheel, runtime_requirements(wheel), target))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
