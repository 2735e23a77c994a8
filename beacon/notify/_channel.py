"""
What a notification channel is: where the operator is told (a command, a
mail), behind one interface the L{Notifier <beacon.notify.Notifier>}
schedules.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from zope.interface import Attribute, Interface


class NotificationFailed(Exception):
    """
    A channel could not deliver a notification; C{str()} says why in words
    that carry no submitted content.
    """


class INotificationChannel(Interface):
    """
    One way of telling the operator of new submissions.
    """

    name = Attribute(
        "The channel's name (C{\"command\"}, C{\"smtp\"}): its cursor in the"
        " store and its name in the log."
    )

    def send(summary: dict[str, Any]) -> Deferred[None]:
        """
        Deliver one notification of C{summary} (see
        L{beacon.notify.summary_of}).

        @return: Fires with None once delivered, or fails (with
            L{NotificationFailed} for a refusal the channel understands).
            Cancelling it abandons the delivery at once: a command is
            killed, a connection dropped.
        """

    def stop() -> Deferred[None]:
        """
        Abandon any delivery still going and fire once nothing is left
        running (a killed command has ended).
        """
