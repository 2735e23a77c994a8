"""
What no Beacon door offers, whichever policy serves it: push notifications
(Beacon never initiates contact) and an extended agent card.
"""

from __future__ import annotations

from typing import Any

from beacon.protocol import (
    CallContext,
    ExtendedAgentCardNotConfiguredError,
    PushNotificationNotSupportedError,
)


class NoPushNoExtendedCard:
    """
    Policy methods that refuse the four push-notification config methods
    (-32003) and GetExtendedAgentCard (-32007).
    """

    def _no_push(self, context: CallContext, request: Any) -> Any:
        raise PushNotificationNotSupportedError(
            "Beacon never initiates contact: push notifications are not offered"
        )

    create_push_config = _no_push
    get_push_config = _no_push
    list_push_configs = _no_push
    delete_push_config = _no_push

    def get_extended_card(self, context: CallContext, request: Any) -> Any:
        """Refused: the card Beacon publishes is the whole card."""
        raise ExtendedAgentCardNotConfiguredError()
