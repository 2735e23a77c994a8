"""
bench/runs.py: several results files of bench/run side by side. It must read
each file's header and Goals table as bench/run writes them, take the
median of the runs that measured a goal, judge the median by the goal's
own target, and time fdatasync where it is told. No timing is asserted.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from scripts import load_script

RUNS = Path(__file__).resolve().parent.parent / "bench" / "runs.py"


def load_module() -> ModuleType:
    return load_script(RUNS, "bench_runs")


runs = load_module()


def results(date: str, send16: str, rss: str = "16.00", grpc: str = "n/a") -> str:
    """A results file as bench/run --out writes it (the parts runs.py reads, and others)."""
    return f"""# Beacon benchmark

- date: {date}
- machine: 2 cores (AMD EPYC), Linux 6.18; load average 0.31 at start, 1.10 at end
- disk: fdatasync of a 200-byte append in the servers' directory, 500 calls before the first cell: median 0.107 ms, p90 0.128 ms
- run: 3 round(s), 6 s per cell

## Throughput and latency

| workload | connections | server | req/s | p50 ms | p99 ms | errors | req/s by round |
|---|---|---|---:|---:|---:|---:|---|
| SendMessage | 16 | beacon | 7000 | 2.00 | 6.00 | 0 | 7000, 7100, 6900 |

## Goals

Issue 23's goals, checked against this run's medians.

| goal | figure | target | |
|---|---:|---|---|
| SendMessage at 16: Beacon/a2a-sdk (at its best) | {send16} | >= 10 | met |
| SendMessage (gRPC) at 16: Beacon/a2a-sdk-grpc (issue 44) | {grpc} | >= 3 | n/a |
| Beacon RSS growth per stored submission (B) (issue 8) | {rss} | <= 100 B (no growth) | met |
| SendMessage at 1: Beacon p50 (ms) | 0.70 | < 1 ms | met |
| 413s, declared Content-Length over max_body: refusals/s over card req/s (shown) | 1.10 | none | shown |

## What each row means

- | not | a | goal |
"""


@pytest.fixture
def three(tmp_path: Path) -> list[Path]:
    paths = []
    for n, (send16, rss, grpc) in enumerate([("9.50", "4.00", "11.00"), ("11.20", "120.00", "n/a"),
                                             ("10.40", "25.00", "n/a")], 1):
        path = tmp_path / f"run-{n}.md"
        path.write_text(results(f"2026-12-07 0{n}:00 UTC", send16, rss, grpc))
        paths.append(path)
    return paths


def test_read_run_takes_the_header_and_the_goals_table(three: list[Path]) -> None:
    run = runs.read_run(three[0])
    assert run.date == "2026-12-07 01:00 UTC"
    assert run.machine == "2 cores (AMD EPYC), Linux 6.18"
    assert run.disk.endswith("median 0.107 ms, p90 0.128 ms")
    assert run.figures == {
        "SendMessage at 16: Beacon/a2a-sdk (at its best)": 9.5,
        "SendMessage (gRPC) at 16: Beacon/a2a-sdk-grpc (issue 44)": 11.0,
        "Beacon RSS growth per stored submission (B) (issue 8)": 4.0,
        "SendMessage at 1: Beacon p50 (ms)": 0.7,
        "413s, declared Content-Length over max_body: refusals/s over card req/s (shown)": 1.1,
    }
    assert run.targets["Beacon RSS growth per stored submission (B) (issue 8)"] == "<= 100 B (no growth)"
    # A goal the run could not measure is kept, without a figure.
    assert runs.read_run(three[1]).figures["SendMessage (gRPC) at 16: Beacon/a2a-sdk-grpc (issue 44)"] is None


def test_a_file_without_goals_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.md"
    path.write_text("# Some notes\n\n| a | b |\n")
    with pytest.raises(SystemExit, match="no Goals table"):
        runs.read_run(path)


@pytest.mark.parametrize(
    ("value", "target", "expected"),
    [
        (10.0, ">= 10", "met"),
        (9.99, ">= 10", "NOT met"),
        (100.0, "<= 100 B (no growth)", "met"),
        (100.5, "<= 100 B (no growth)", "NOT met"),
        (0.99, "< 1 ms", "met"),
        (1.0, "< 1 ms", "NOT met"),
        (1.1, "none", "shown"),
        (None, ">= 3", "n/a"),
    ],
)
def test_verdict_reads_the_target_as_bench_run_writes_it(value: float | None, target: str, expected: str) -> None:
    assert runs.verdict(value, target) == expected


def test_summary_judges_the_median_of_the_runs_that_measured_a_goal(three: list[Path]) -> None:
    text = runs.summary([runs.read_run(path) for path in three])
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| ")}
    # 9.50 is short of 10 in run 1; the median of 9.50, 11.20 and 10.40 is 10.40.
    assert rows["SendMessage at 16: Beacon/a2a-sdk (at its best)"] == (
        "| SendMessage at 16: Beacon/a2a-sdk (at its best) | 9.50 | 11.20 | 10.40 | 10.40 | >= 10 | met |"
    )
    # One run over 100 B does not fail a goal whose median (25) meets it.
    assert rows["Beacon RSS growth per stored submission (B) (issue 8)"].endswith(
        "| 4.00 | 120.00 | 25.00 | 25.00 | <= 100 B (no growth) | met |"
    )
    # Measured in one run only: that run's figure is the median.
    assert rows["SendMessage (gRPC) at 16: Beacon/a2a-sdk-grpc (issue 44)"].endswith(
        "| 11.00 | n/a | n/a | 11.00 | >= 3 | met |"
    )
    assert rows["413s, declared Content-Length over max_body: refusals/s over card req/s (shown)"].endswith(
        "| 1.10 | none | shown |"
    )
    assert ("- run 2: `run-2.md`, 2026-12-07 02:00 UTC, 2 cores (AMD EPYC), Linux 6.18; fdatasync of a "
            "200-byte append in the servers' directory, 500 calls before the first cell: median 0.107 ms, "
            "p90 0.128 ms\n") in text
    assert text.endswith("Goals not met by the median: 0.\n")


def test_summary_counts_the_goals_the_median_misses(tmp_path: Path) -> None:
    paths = []
    for n, send16 in enumerate(["9.50", "9.90", "10.40"], 1):
        path = tmp_path / f"run-{n}.md"
        path.write_text(results("2026-12-07", send16))
        paths.append(path)
    text = runs.summary([runs.read_run(path) for path in paths])
    assert "| 9.50 | 9.90 | 10.40 | 9.90 | >= 10 | NOT met |" in text
    assert text.endswith("Goals not met by the median: 1.\n")


def test_fsync_times_syncs_in_the_directory_and_leaves_nothing(tmp_path: Path) -> None:
    times = runs.fsync_times(tmp_path, count=5)
    assert len(times) == 5 and all(t >= 0 for t in times)
    assert list(tmp_path.iterdir()) == []


def test_main_prints_and_writes_the_summary(three: list[Path], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "runs.md"
    assert runs.main([str(path) for path in three] + ["--fsync-dir", str(tmp_path), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed == out.read_text()
    assert "- fdatasync of a 200-byte append, 500 calls: median " in printed
    assert "| goal | run 1 | run 2 | run 3 | median | target | |" in printed
