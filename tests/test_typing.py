"""
The package type-checks: mypy in strict mode with the zope plugin, as
configured in pyproject.toml, finds nothing in beacon/.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_mypy_strict_is_clean() -> None:
    """mypy --strict (pyproject.toml's [tool.mypy]) reports no issue in beacon/."""
    result = subprocess.run(
        [sys.executable, "-m", "mypy"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
