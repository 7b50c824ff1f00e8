"""Every table under bench/results is one that a make target writes again.

README says `make bench` writes every number it quotes to bench/results, each
file with the command that produced it. The simulator's tables name that
command; a sensitivity run added by hand (the aging tables were, for a while)
would otherwise sit there with nothing to reproduce it.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
# The targets that write bench/results (the GPU tier writes its own, by hand, elsewhere).
WRITERS = ("bench", "bench-scale", "chaos")


def recipes(makefile: str) -> dict[str, list[str]]:
    """Each target's recipe lines, without the tab."""
    out: dict[str, list[str]] = {}
    target = None
    for line in makefile.splitlines():
        if line.startswith("\t") and target is not None:
            out[target].append(line[1:].strip())
            continue
        head = re.match(r"^([A-Za-z0-9_-]+):", line)
        target = head.group(1) if head else None
        if target is not None:
            out[target] = []
    return out


def simulator_commands(text: str) -> list[str]:
    """The command a simulator table says produced it (`Produced by:` and an indented line)."""
    return re.findall(r"^Produced by:\n\n {4}(\S.*)$", text, flags=re.MULTILINE)


@functools.cache
def tables() -> dict[str, str]:
    """Each results table's text, by file name (read once for the module)."""
    return {p.name: p.read_text() for p in sorted(RESULTS.glob("*.md"))}


def written_by_make() -> list[str]:
    steps = recipes((ROOT / "Makefile").read_text())
    return [line for t in WRITERS for line in steps.get(t, [])]


def test_recipes_reads_targets_and_their_lines() -> None:
    text = "a: b ## help\n\tone\n\ttwo\n\n.PHONY: c\nc:\n\tthree\nX := 1\n"
    assert recipes(text) == {"a": ["one", "two"], "c": ["three"]}


def test_simulator_commands_finds_the_produced_by_line() -> None:
    text = "# t\n\nProduced by:\n\n    .venv/bin/python bench/simulate.py --mix x\n\nEach cell"
    assert simulator_commands(text) == [".venv/bin/python bench/simulate.py --mix x"]
    assert simulator_commands("Produced by: nothing indented\n") == []


def test_every_simulator_table_is_written_again_by_a_make_target() -> None:
    lines = written_by_make()
    named = {name: simulator_commands(text) for name, text in tables().items()}
    assert sum(1 for c in named.values() if c) >= 10, "the simulator's tables were not found"
    missing = {
        name: command
        for name, commands in named.items()
        for command in commands
        if command.replace(".venv/bin/python", "$(PY)", 1) not in lines
    }
    assert not missing, f"no make target ({', '.join(WRITERS)}) runs these: {missing}"


def test_every_table_names_what_wrote_it() -> None:
    # A bench script, a GPU-tier script (hack/, run by make gpu-check) or a make target.
    producer = re.compile(r"\b(bench|hack)/[a-z_-]+\.py\b|\bmake [a-z-]+")
    unnamed = sorted(name for name, text in tables().items() if not producer.search(text))
    assert not unnamed


def test_every_bench_script_with_a_table_is_run_by_a_make_target() -> None:
    run = " ".join(written_by_make())
    scripts = {
        script
        for text in tables().values()
        for script in re.findall(r"\bbench/[a-z_]+\.py\b", text)
    }
    assert "bench/simulate.py" in scripts
    assert not sorted(s for s in scripts if s not in run)
