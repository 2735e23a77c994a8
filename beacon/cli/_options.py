"""
The option value types more than one C{beacon} command takes: a positive
whole number and a number of seconds, refused as argparse refuses a usage
error.
"""

from __future__ import annotations

import argparse


def count(text: str) -> int:
    """A positive whole number (C{--limit N})."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return value


def duration(text: str) -> float:
    """A number of seconds, more than none and less than a day (C{--timeout S})."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < 86400:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds")
    return value
