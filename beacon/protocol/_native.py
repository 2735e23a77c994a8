"""
The native beacon/0.1 protocol's handler interface (C{docs/explanation/protocol-0.1.rst}):
what its binding needs of the Beacon.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from zope.interface import Interface

from beacon.protocol._dispatch import CallContext


class INativeHandler(Interface):
    """
    What the native binding needs of the Beacon: submit and look up.
    """

    def submit_document(context: CallContext, document: Any) -> Deferred[dict[str, str]]:
        """
        Store a native submission body.

        @return: The receipt (C{id}, C{receivedAt}, C{sha256}).
        @raise InvalidParamsError: The body is not a valid submission.
        @raise beacon.protocol.InternalError: It could not be stored.
        """

    def native_status(receipt_id: str) -> Deferred[dict[str, str] | None]:
        """
        @return: C{{"id", "state", "updatedAt"}}, or None when unknown.
        """
