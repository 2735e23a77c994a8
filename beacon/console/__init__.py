"""
The web console: what C{beacon review web} serves on loopback, in the
operator's own process, for the people who read the inbox in a browser.

It relays to Beacon through the operator door (L{beacon.client.OperatorClient},
as the other C{beacon review} commands do): the daemon gains no door. The
page (C{static/}, plain files: hand-written ES modules and one stylesheet)
talks to a small JSON API and an event stream:

  - C{GET /api/choices}: what the filters offer, Beacon's own lists (the
    doors, L{beacon.protocol.DOORS}, and the states);
  - C{GET /api/tasks}: one page of C{beacon.review.List} (filters C{search},
    C{state}, C{door}, C{since}, C{until}, C{id}; C{sort}, C{pageSize},
    C{pageToken});
  - C{GET /api/tasks/ID} (an id or a unique prefix of six or more
    characters), C{POST /api/tasks/ID/decide};
  - C{GET /api/matching} (every undecided id the filters match),
    C{POST /api/decide-many};
  - C{GET /api/events}: C{beacon.inbox.Follow}, relayed as server-sent
    events (C{ready}, C{task}, C{down});
  - C{POST /csp-report}.

Its guards (the C{Host}, the C{Origin} of a POST, the one-time sign-in
token and the session cookie) and headers are described in
L{beacon.console._server}. Serve L{Console.resource} with a L{ConsoleSite}.
"""

from beacon.console._events import (
    FIRST_RETRY,
    KEEP_ALIVE,
    LAST_RETRY,
    MAX_PENDING_BYTES,
    EventRelay,
    EventStream,
)
from beacon.console._server import (
    CHOICES,
    COOKIE,
    CSP,
    MAX_BODY,
    MAX_CSP_REPORT,
    MAX_IDS,
    MAX_STREAMS,
    SECURITY_HEADERS,
    STATIC,
    Console,
    ConsoleSite,
)

__all__ = [
    "CHOICES",
    "COOKIE",
    "CSP",
    "FIRST_RETRY",
    "KEEP_ALIVE",
    "LAST_RETRY",
    "MAX_BODY",
    "MAX_CSP_REPORT",
    "MAX_IDS",
    "MAX_PENDING_BYTES",
    "MAX_STREAMS",
    "SECURITY_HEADERS",
    "STATIC",
    "Console",
    "ConsoleSite",
    "EventRelay",
    "EventStream",
]
