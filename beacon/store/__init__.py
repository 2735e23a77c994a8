"""
Append-only submission storage: the interface and its backends.
"""

from beacon.store._interface import (
    STATE_COMPLETED,
    STATE_REJECTED,
    STATE_SUBMITTED,
    ISubmissionStore,
    StoreError,
    Submission,
    TaskStatusRecord,
)
from beacon.store._sqlite import SQLiteStore

__all__ = [
    "ISubmissionStore",
    "SQLiteStore",
    "STATE_COMPLETED",
    "STATE_REJECTED",
    "STATE_SUBMITTED",
    "StoreError",
    "Submission",
    "TaskStatusRecord",
]
