"""
Transport limits: per-source rate limiting and source naming.
"""

from beacon.bindings._limits import Admission, RateLimiter, SourceResolver

__all__ = ["Admission", "RateLimiter", "SourceResolver"]
