#!/usr/bin/env python3
"""
Several runs of bench/run side by side: each goal's figure in each run, the
median of the runs, and whether the median meets the goal. A goal that
rests on requests per second moves with the machine's noise from one run
to the next, so it is judged on the median of several full runs, each on
a quiet machine, not on one.

    make bench BENCH_ARGS="--out bench/results/DATE-1.md"     # three times
    bench/runs.py bench/results/DATE-1.md bench/results/DATE-2.md \\
        bench/results/DATE-3.md --fsync-dir bench/.work --out bench/results/DATE-runs.md

It reads each file's header (date, machine) and its "Goals" table, which
bench/run writes; a goal a run could not measure (n/a) is left out of the
median. --fsync-dir also times fdatasync of a 200-byte append in that
directory (500 calls, on the disk the benchmark's servers write to): a
sync much shorter than Beacon's CPU per SendMessage means SendMessage is
bound by the CPU there, not by the disk.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

#: A goal's target as bench/run writes it: ">= 2", "<= 1", "< 1 ms", "<= 100 B (no growth)".
TARGET = re.compile(r"(>=|<=|<|>)\s*([0-9.]+)")


@dataclass
class Run:
    """One results file: where it was measured, and its goals' figures (None: n/a)."""

    path: Path
    date: str = "?"
    machine: str = "?"
    disk: str = ""
    figures: dict[str, float | None] = field(default_factory=dict)
    targets: dict[str, str] = field(default_factory=dict)


def read_run(path: Path) -> Run:
    """The header and the Goals table of one bench/run results file."""
    run = Run(path)
    in_goals = False
    for line in path.read_text().splitlines():
        if line.startswith("- date: "):
            run.date = line[len("- date: "):].strip()
        elif line.startswith("- machine: "):
            run.machine = line[len("- machine: "):].split(";")[0].strip()
        elif line.startswith("- disk: "):
            run.disk = line[len("- disk: "):].strip()
        elif line.startswith("## "):
            in_goals = line.strip() == "## Goals"
        elif in_goals and line.startswith("| ") and not line.startswith(("| goal |", "|---")):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if len(cells) != 4:
                continue
            goal, figure, target, _ = cells
            run.targets[goal] = target
            try:
                run.figures[goal] = float(figure)
            except ValueError:
                run.figures[goal] = None
    if not run.targets:
        raise SystemExit(f"{path}: no Goals table (is it a results file written by bench/run --out?)")
    return run


def verdict(value: float | None, target: str) -> str:
    """met, NOT met, shown (a figure with no target) or n/a, as bench/run says them."""
    if value is None:
        return "n/a"
    found = TARGET.match(target)
    if found is None:
        return "shown"
    op, bound = found.group(1), float(found.group(2))
    met = {">=": value >= bound, "<=": value <= bound, "<": value < bound, ">": value > bound}[op]
    return "met" if met else "NOT met"


def fsync_times(directory: Path, count: int = 500, size: int = 200) -> list[float]:
    """Milliseconds each fdatasync of a C{size}-byte append took, C{count} times, in C{directory}."""
    times = []
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        fd = os.open(Path(tmp) / "sync", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            data = b"x" * size
            for _ in range(count):
                os.write(fd, data)
                started = time.perf_counter()
                os.fdatasync(fd)
                times.append((time.perf_counter() - started) * 1000)
        finally:
            os.close(fd)
    return times


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def summary(runs: list[Run], fsync: list[float] | None = None) -> str:
    """The runs side by side, as Markdown."""
    lines = [f"# bench/run, {len(runs)} runs side by side", ""]
    for number, run in enumerate(runs, 1):
        lines.append(f"- run {number}: `{run.path.name}`, {run.date}, {run.machine}"
                     + (f"; {run.disk}" if run.disk else ""))
    if fsync:
        lines.append(
            f"- fdatasync of a 200-byte append, {len(fsync)} calls: median "
            f"{statistics.median(fsync):.3f} ms, p90 {percentile(fsync, 0.9):.3f} ms, "
            f"p99 {percentile(fsync, 0.99):.3f} ms"
        )
    lines += [
        "",
        "Each goal's figure in each run, and the median of the runs that measured it; "
        "the verdict is the median's.",
        "",
        "| goal | " + " | ".join(f"run {n}" for n in range(1, len(runs) + 1)) + " | median | target | |",
        "|---|" + "---:|" * (len(runs) + 1) + "---|---|",
    ]
    goals: list[str] = []
    for run in runs:
        goals += [goal for goal in run.targets if goal not in goals]
    for goal in goals:
        figures = [run.figures.get(goal) for run in runs]
        known = [value for value in figures if value is not None]
        middle = statistics.median(known) if known else None
        target = next(run.targets[goal] for run in runs if goal in run.targets)
        shown = " | ".join("n/a" if value is None else f"{value:.2f}" for value in figures)
        median_text = "n/a" if middle is None else f"{middle:.2f}"
        lines.append(f"| {goal} | {shown} | {median_text} | {target} | {verdict(middle, target)} |")
    missed = [line for line in lines if line.endswith("| NOT met |")]
    lines += ["", f"Goals not met by the median: {len(missed)}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bench/runs.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("files", nargs="+", type=Path, help="results files written by bench/run --out")
    parser.add_argument("--fsync-dir", type=Path, help="also time fdatasync in this directory")
    parser.add_argument("--out", type=Path, help="write the summary here too")
    args = parser.parse_args(argv)
    runs = [read_run(path) for path in args.files]
    fsync = fsync_times(args.fsync_dir) if args.fsync_dir else None
    text = summary(runs, fsync)
    sys.stdout.write(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
