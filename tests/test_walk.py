"""
The walks of ``bench/walk.py`` (docs/explanation/architecture.rst shows them): one
SendMessage over HTTP checks its source's rate once and names its source
once, and goes down through the wings; one ``beacon review list`` runs end
to end against an operator door.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

from scripts import load_script

ROOT = Path(__file__).resolve().parent.parent


def walk_module() -> ModuleType:
    return load_script(ROOT / "bench" / "walk.py", "walk")


def test_a_send_message_checks_the_rate_once() -> None:
    """On the direct channel, the head gate checks the rate and names the source; the rendering does neither again."""
    steps = walk_module().walk_send()
    functions = [function for _, _, function in steps]
    assert functions.count("RateLimiter.admit") == 1
    assert functions.count("SourceResolver.resolve") == 1
    assert "TransportLimits.source_of" not in functions
    assert functions.count("Dispatcher.dispatch") == 1


def test_a_send_message_goes_down_through_the_wings() -> None:
    """Before the core, a SendMessage's steps are the HTTP wing's and the admission's below it, and nothing else."""
    walk = walk_module()
    steps = walk.walk_send()
    files = [filename for _, filename, _ in steps]
    core = walk.summary(steps)["steps before the protocol core"]
    assert 0 < core < len(files)
    wings = {Path(f).parts[:2] for f in files[:core]}
    assert wings == {("bindings", "http"), ("bindings", "admission")}, wings


def test_the_review_list_walk_runs_end_to_end() -> None:
    """`bench/walk.py review-list --steps` runs the command against a door on a unix socket and counts its steps."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "walk.py"), "review-list", "--steps"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    counts = dict(line.split(": ") for line in done.stdout.splitlines())
    assert int(counts["steps"]) > int(counts["steps before the protocol core"]) > 0
    assert int(counts["files"]) > 1


def test_the_walks_in_the_architecture_docs_are_the_walks_today() -> None:
    """docs/explanation/architecture.rst shows each walk as `bench/walk.py WALK --files` prints it now."""
    docs = (ROOT / "docs" / "explanation" / "architecture.rst").read_text()
    for walk in ("send", "review-list"):
        done = subprocess.run(
            [sys.executable, str(ROOT / "bench" / "walk.py"), walk, "--files"],
            capture_output=True, text=True, timeout=120, cwd=ROOT, check=True,
        )
        assert walk_module().docs_block(walk, done.stdout) in docs, (
            f"bench/walk.py {walk} --update-docs writes it anew"
        )
