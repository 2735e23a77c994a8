"""
Append-only submission storage: the interface and its backends.

Everything another package uses is imported from here. The rooms inside,
each with one job:

  - C{_interface}: the contract (L{ISubmissionStore}, its records and
    errors, the argument checks every backend makes, the words of a
    search);
  - C{_listeners}: who hears of committed writes (L{StoreListeners});
  - C{_measured}: what a store tells the metrics (L{IMeasuredStore}):
    each batch of writes, and how many submissions are undecided;
  - C{_url}: store URLs, and the store one names (L{open_store});
  - C{_migrate}: C{beacon db upgrade} and C{beacon db status};
  - C{_threaded}: what the thread-pool backends share (group commit, the
    read path, stopping), on C{_workers}' threads;
  - C{_sql}: the SQL those backends share, in each one's L{Dialect
    <beacon.store._sql.Dialect>}, and the rows it reads and writes;
  - C{_sqlite}: the embedded store (L{SQLiteStore}) and its schema;
  - C{_postgres}: the shared store (L{PostgreSQLStore}), with
    C{_postgres_connect} (reaching the database, naming it without its
    password), C{_postgres_schema} (its schema and migrating it) and
    C{_postgres_listen} (LISTEN/NOTIFY and the listening thread).
"""

# The task states a stored submission can be in are the protocol's.
from beacon.protocol import STATE_COMPLETED, STATE_REJECTED, STATE_SUBMITTED
# What list_tasks is asked is the protocol's query (the review surfaces make
# it), with its orders and its checks.
from beacon.protocol.query import (
    MIN_ID_PREFIX,
    SORT_RECEIVED,
    SORT_UPDATED,
    SORTS,
    TaskQuery,
    check_id_prefix,
    check_sort,
)
from beacon.store._measured import (
    DECISION_ALREADY_MADE,
    DECISION_FAILED,
    DECISION_NOT_FOUND,
    BatchReport,
    IMeasuredStore,
)
from beacon.store._interface import (
    AlreadyDecided,
    ISubmissionStore,
    NotificationBatch,
    StoreError,
    StoredTask,
    StoreEvent,
    TaskPage,
    Submission,
    TaskStatusRecord,
    check_decision_state,
    check_lease,
    check_limit,
    search_words,
)
from beacon.store._listeners import StoreListeners
from beacon.store._migrate import SchemaStatus, schema_status, status, upgrade
from beacon.store._postgres import PostgreSQLStore
from beacon.store._sqlite import SQLiteStore
from beacon.store._url import StoreURL, open_store, parse_store_url, sqlite_url

__all__ = [
    "AlreadyDecided",
    "BatchReport",
    "DECISION_ALREADY_MADE",
    "DECISION_FAILED",
    "DECISION_NOT_FOUND",
    "IMeasuredStore",
    "StoredTask",
    "StoreEvent",
    "StoreListeners",
    "TaskPage",
    "TaskQuery",
    "ISubmissionStore",
    "MIN_ID_PREFIX",
    "NotificationBatch",
    "SORT_RECEIVED",
    "SORT_UPDATED",
    "SORTS",
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
    "check_id_prefix",
    "check_lease",
    "check_limit",
    "check_sort",
    "search_words",
]
