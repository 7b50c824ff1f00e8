"""The tests' pipe reader (tests.support.lines) sees lines that arrive together."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.lines import Lines

TWO_AT_ONCE = "import sys; sys.stdout.write('parked\\nrestored\\nlast'); sys.stdout.flush()"


def test_two_lines_written_together_are_both_read_and_silence_keeps_a_line() -> None:
    proc = subprocess.Popen([sys.executable, "-c", TWO_AT_ONCE], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        lines = Lines(proc.stdout)
        assert lines.readline(30) == "parked\n"
        # The second line came in the same read: a select on the pipe would now
        # wait for it in vain; here it is already at hand.
        assert not lines.silent_for(0.0)
        assert lines.readline(0.0) == "restored\n"
        assert lines.readline(30) == "last"  # the last line, without its newline
        assert lines.readline(30) == ""  # end of file
        assert not lines.silent_for(0.1)
    finally:
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def test_nothing_said_is_a_timeout() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        lines = Lines(proc.stdout)
        assert lines.silent_for(0.2)
        with pytest.raises(TimeoutError, match=r"no line within 0\.2 s"):
            lines.readline(0.2)
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
