"""Drive a trainer script (one JSON line per event on stdout, commands on stdin)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.lines import Lines


class Run:
    def __init__(self, script: Path, workdir: Path, *args: str) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}
        env.pop("RLIX_AGENT_SOCKET", None)
        self.stderr = workdir / "stderr.txt"
        with self.stderr.open("w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(script), str(workdir), *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env=env,
            )
        assert self.proc.stdout is not None
        self.lines = Lines(self.proc.stdout)

    def say(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def read(self, timeout: float = 180.0) -> dict[str, Any]:
        while True:
            try:
                line = self.lines.readline(timeout)
            except TimeoutError:
                raise TimeoutError(
                    f"trainer said nothing: {self.stderr.read_text()[-3000:]}"
                ) from None
            if not line:
                raise EOFError(f"trainer exited: {self.stderr.read_text()[-3000:]}")
            if line.startswith('{"'):  # ours; frameworks print their own lines too
                msg: dict[str, Any] = json.loads(line)
                return msg

    def ask(self, cmd: str) -> dict[str, Any]:
        self.say(cmd)
        return self.read()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()
