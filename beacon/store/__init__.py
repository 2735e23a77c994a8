"""
Append-only submission storage: the interface and its backends.
"""

from beacon.store._interface import (
    STATE_COMPLETED,
    STATE_REJECTED,
    STATE_SUBMITTED,
    AlreadyDecided,
    ISubmissionStore,
    StoreError,
    StoredTask,
    StoreEvent,
    TaskPage,
    Submission,
    TaskStatusRecord,
)
from beacon.store._sqlite import SQLiteStore

__all__ = [
    "AlreadyDecided",
    "StoredTask",
    "StoreEvent",
    "TaskPage",
    "ISubmissionStore",
    "SQLiteStore",
    "STATE_COMPLETED",
    "STATE_REJECTED",
    "STATE_SUBMITTED",
    "StoreError",
    "Submission",
    "TaskStatusRecord",
]
