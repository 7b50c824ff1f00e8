"""examples/plain_pytorch_loop.py run unchanged behind a Wiretap; started by test_plain_loop.py.

    python _plain_loop_run.py WORKDIR AGENT_SOCKET [EXAMPLE ARGS...]

Waits for one stdin line (the test puts this PID in a pod), points rlix at a
Wiretap in front of the agent, runs the example through runpy, and at exit
prints the phases the example reported as one JSON line.
"""

from __future__ import annotations

import atexit
import json
import runpy
import sys
from pathlib import Path

from _wiretap import Wiretap

import rlix

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "plain_pytorch_loop.py"


def report_phases(tap: Wiretap) -> None:
    rlix.configure(None)  # close the link, so the tap has read every message sent
    print(json.dumps({"event": "phases", "phases": tap.phases()}), flush=True)


def main() -> None:
    workdir, sock, *args = sys.argv[1:]
    sys.stdin.readline()  # the test has put this PID in a pod
    tap = Wiretap(sock, workdir + "/tap.sock")
    rlix.configure(tap.path)
    atexit.register(report_phases, tap)
    sys.argv = [str(EXAMPLE), *args]
    runpy.run_path(str(EXAMPLE), run_name="__main__")


if __name__ == "__main__":
    main()
