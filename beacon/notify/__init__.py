"""
Notifications (C{[notify]}): telling the operator that submissions arrived,
where the operator said, never anyone a submitter named.

Everything another package uses is imported from here. The rooms inside,
each with one job:

  - C{_summary}: what a notification says (L{summary_of}: ids, times,
    doors, sizes, structured subjects; content only when asked) and the
    escaping that keeps submitted text inert (L{inert});
  - C{_channel}: what a channel is (L{INotificationChannel}) and how it
    fails (L{NotificationFailed});
  - C{_command}: the operator's program, run without a shell, the summary
    as JSON on its standard input (L{CommandChannel});
  - C{_smtp}: a digest mail through Twisted's ESMTP client
    (L{SMTPChannel}, L{digest_message});
  - C{_check}: the checks of C{[notify]} that need this room
    (L{check_options}: the program found, the CA certificates usable);
  - C{_notifier}: when to tell, and retrying with backoff (L{Notifier}),
    over the store's per-channel cursor, so that several instances on one
    database tell of each submission once.
"""

from beacon.notify._channel import INotificationChannel, NotificationFailed
from beacon.notify._check import check_options
from beacon.notify._command import CommandChannel, resolve_program
from beacon.notify._notifier import (
    DEFAULT_BATCH,
    DEFAULT_INTERVAL,
    DEFAULT_TIMEOUT,
    LEASE_MARGIN,
    MAX_BACKOFF,
    STOP_TIMEOUT,
    Notifier,
)
from beacon.notify._smtp import (
    SHORT_ID,
    SMTPChannel,
    digest_message,
    digest_text,
    smtp_trust_root,
)
from beacon.notify._summary import inert, summary_json, summary_of

__all__ = [
    "CommandChannel",
    "DEFAULT_BATCH",
    "DEFAULT_INTERVAL",
    "DEFAULT_TIMEOUT",
    "INotificationChannel",
    "LEASE_MARGIN",
    "MAX_BACKOFF",
    "NotificationFailed",
    "Notifier",
    "SHORT_ID",
    "SMTPChannel",
    "STOP_TIMEOUT",
    "check_options",
    "digest_message",
    "digest_text",
    "inert",
    "resolve_program",
    "summary_json",
    "summary_of",
    "smtp_trust_root",
]
