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
    check_decision_state,
    check_limit,
)
from beacon.store._listeners import StoreListeners
from beacon.store._migrate import (
    SchemaStatus,
    StoreURL,
    open_store,
    parse_store_url,
    schema_status,
    sqlite_url,
    status,
    upgrade,
)
from beacon.store._postgres import PostgreSQLStore
from beacon.store._sqlite import SQLiteStore

__all__ = [
    "AlreadyDecided",
    "StoredTask",
    "StoreEvent",
    "StoreListeners",
    "TaskPage",
    "ISubmissionStore",
    "PostgreSQLStore",
    "SchemaStatus",
    "SQLiteStore",
    "StoreURL",
    "open_store",
    "parse_store_url",
    "schema_status",
    "sqlite_url",
    "status",
    "upgrade",
    "STATE_COMPLETED",
    "STATE_REJECTED",
    "STATE_SUBMITTED",
    "StoreError",
    "Submission",
    "TaskStatusRecord",
    "check_decision_state",
    "check_limit",
]
