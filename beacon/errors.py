"""
The errors that cross Beacon's layers, in a leaf that imports nothing of
Beacon: any layer may raise them, the edges (twistd, the CLI) report them.
"""

from __future__ import annotations


class StartupError(Exception):
    """
    Beacon cannot start: a listener cannot bind, the store cannot open. The
    message says what and where.
    """


__all__ = ["StartupError"]
