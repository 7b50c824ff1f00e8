"""The node's CUDA MPS control daemon, run and watched by the agent (``--mps``).

The configuration (directories, command, client env) is ``rlix.core.mps``;
this module makes it true on the node: creates the directories, starts the
daemon in the foreground, labels the node ``rlix.io/mps: "true"`` while it runs
(MPS roles are placed only there), and when the daemon dies takes the label
away, says why, and starts it again. On shutdown the daemon is asked to quit
(which ends its servers once their clients are gone) and the label is removed.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

from rlix.core import mps

log = logging.getLogger(__name__)


class MpsUnavailableError(RuntimeError):
    """The node cannot run MPS (no control binary); the agent says so and runs without."""


class MpsSupervisor:
    def __init__(
        self,
        paths: mps.MpsPaths,
        *,
        label: Callable[[bool], None],
        binary: str = mps.CONTROL_BINARY,
        restart_s: float = 5.0,
    ) -> None:
        self.paths = paths
        self._label = label
        self._binary = binary
        self._restart_s = restart_s
        self._proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def _env(self) -> dict[str, str]:
        return {**os.environ, **mps.daemon_env(self.paths)}

    def prepare(self) -> None:
        """The directories, and the control binary; raises MpsUnavailableError naming what lacks."""
        if shutil.which(self._binary) is None:
            raise MpsUnavailableError(
                f"{self._binary} not found on PATH: MPS needs NVIDIA's driver utilities "
                "in the agent's image (or the host's, mounted)"
            )
        for path, mode in (
            (self.paths.pipe, 0o755),
            (self.paths.log, 0o755),
            (self.paths.shm, 0o1777),
        ):
            Path(path).mkdir(parents=True, exist_ok=True)
            os.chmod(path, mode)  # shm like /dev/shm: every client user writes there

    def start(self) -> None:
        log_file = Path(self.paths.log) / "agent-daemon.out"
        with log_file.open("ab") as out:
            self._proc = subprocess.Popen(
                mps.daemon_command(self.paths, self._binary),
                env=self._env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.starts += 1
        log.info(
            "MPS control daemon started (pid %d, pipes in %s)", self._proc.pid, self.paths.pipe
        )

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def run(self, stop: threading.Event, interval_s: float = 1.0) -> None:
        """Keep the daemon up and the label true while it is; until ``stop``."""
        labelled = False
        while not stop.is_set():
            if self.running():
                if not labelled:
                    self._label(True)
                    labelled = True
            else:
                if labelled:
                    self._label(False)
                    labelled = False
                if self._proc is not None:  # it ran, and exited
                    log.error(
                        "MPS control daemon exited with %s; node not labelled %s, restarting "
                        "in %.0f s (its log: %s)",
                        self._proc.returncode,
                        mps.NODE_LABEL_MPS,
                        self._restart_s,
                        self.paths.log,
                    )
                    if stop.wait(self._restart_s):
                        break
                self.start()
            stop.wait(interval_s)
        self.shutdown(labelled)

    def shutdown(self, labelled: bool = True) -> None:
        """Ask the daemon to quit, then make sure it did; drop the label."""
        if labelled:
            self._label(False)
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        try:
            subprocess.run(
                [self._binary], input=b"quit\n", env=self._env(), timeout=10, check=False
            )
            proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait(timeout=10)
