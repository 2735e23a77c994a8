"""
Transport limits: per-source rate limiting and source naming, and each
connection's fair share of the reactor's turns (L{Ledger}, L{Turns}: see
C{beacon.bindings._turns}).
"""

from beacon.bindings._limits import Admission, RateLimiter, SourceResolver
from beacon.bindings._turns import (
    MAX_GROWTH,
    QUIET_SECONDS,
    TURN_BYTES,
    TURN_MESSAGES,
    TURN_REQUESTS,
    Ledger,
    Turns,
)

__all__ = [
    "MAX_GROWTH",
    "QUIET_SECONDS",
    "TURN_BYTES",
    "TURN_MESSAGES",
    "TURN_REQUESTS",
    "Admission",
    "Ledger",
    "RateLimiter",
    "SourceResolver",
    "Turns",
]
