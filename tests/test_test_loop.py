"""
tools/test-loop (``make test-loop``): the suite run again and again, its
failures counted by test id, each pass's output kept.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from scripts import load_script

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "test-loop"


def load_tool() -> ModuleType:
    return load_script(TOOL, "test_loop_tool")


SUMMARY = """\
tests/test_a.py ..F.                                              [100%]
=================================== FAILURES ===================================
FAILED means nothing before the summary
=========================== short test summary info ============================
SKIPPED [2] tests/bindings.py:884: the HTTP+JSON binding cannot say this request
FAILED tests/test_a.py::test_three[one - two] - AssertionError: assert 1 == 2
ERROR tests/test_b.py::TestB::test_setup - RuntimeError: no
============== 1 failed, 3 passed, 2 skipped, 1 error in 12.34s ===============
"""


def test_failures_and_totals_are_read_from_pytests_summary() -> None:
    tool = load_tool()
    assert tool.failures(SUMMARY) == [
        "tests/test_a.py::test_three[one - two]",
        "tests/test_b.py::TestB::test_setup",
    ]
    assert tool.test_id("tests/test_c.py::test_d") == "tests/test_c.py::test_d"
    assert tool.totals(SUMMARY) == "1 failed, 3 passed, 2 skipped, 1 error"
    assert tool.failures("no summary at all\n") == []
    assert tool.totals("no summary at all\n") == ""


def test_a_test_that_fails_in_one_run_of_three_is_named_with_its_run_and_output(
    tmp_path: Path,
) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "pytest.ini").write_text("[pytest]\naddopts = -ra\n")
    counter = tmp_path / "runs"
    counter.write_text("0")
    # Fails in the second run only, as a test that fails by chance would.
    (suite / "test_sometimes.py").write_text(
        "from pathlib import Path\n"
        f"COUNTER = Path({str(counter)!r})\n"
        "def test_always():\n"
        "    pass\n"
        "def test_second_run_only():\n"
        "    n = int(COUNTER.read_text()) + 1\n"
        "    COUNTER.write_text(str(n))\n"
        "    assert n != 2, 'the second run'\n"
    )
    keep = tmp_path / "keep"
    done = subprocess.run(
        [sys.executable, str(TOOL), "--runs", "3", "--keep", str(keep),
         "--pass", f"{suite} -p no:randomly", "--pass", f"{suite} -k always"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    assert "test-loop: run 2/3, pass 1: 1 failed, 1 passed" in out
    assert "test-loop: run 3/3, pass 2: 1 passed, 1 deselected" in out
    assert "3 runs, 1 with a failure." in out
    log = keep / "run-02-pass-1.log"
    row = f"| {suite.name}/test_sometimes.py::test_second_run_only | 2 | {log} |"
    assert any(line.endswith(row) or row in line for line in out.splitlines()), out
    assert "the second run" in log.read_text()
    assert sorted(p.name for p in keep.iterdir()) == [
        f"run-0{run}-pass-{n}.log" for run in (1, 2, 3) for n in (1, 2)
    ]


def test_every_run_green_exits_0(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_fine.py").write_text("def test_fine():\n    pass\n")
    done = subprocess.run(
        [sys.executable, str(TOOL), "--runs", "2", "--keep", str(tmp_path / "keep"),
         "--pass", str(suite)],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 runs, 0 with a failure." in done.stdout
    assert "| test |" not in done.stdout


def test_make_test_loop_names_files_that_exist() -> None:
    """
    The passes ``make test-loop`` gives are quoted for the tool, so no shell
    expands them: every path in them must already be a file.
    """
    # Run under make itself (make test), a make prints where it enters and
    # leaves: read the one line that runs the tool.
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", "test-loop", "RUNS=1"],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    (command,) = [
        line for line in done.stdout.replace("\\\n", " ").splitlines()
        if "tools/test-loop" in line
    ]
    words = shlex.split(command)
    passes = [shlex.split(words[i + 1]) for i, w in enumerate(words) if w == "--pass"]
    assert len(passes) == 2
    paths = [a for a in passes[1] if a.startswith("tests/")]
    assert "tests/test_websocket_turns.py" in paths
    assert all((ROOT / p).is_file() for p in paths), paths
