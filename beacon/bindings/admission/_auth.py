"""
Submitter authentication for the public doors (the WebSocket binding §6): optional API
keys and bearer tokens, off by default (Beacon is an open door by design).

Credentials are configured as SHA-256 digests (lower-case hex) of the secret,
never as the secret itself: a configuration file that leaks gives nothing to
present. Make a digest with::

    printf %s "$TOKEN" | sha256sum

A presented credential is hashed and compared with every configured digest in
constant time (L{hmac.compare_digest}, no early exit), so the time taken says
nothing about which digest, or how much of one, matched.

Where the credential travels:

  - C{Authorization: Bearer <token>} for bearer tokens (the scheme name is
    case-insensitive, RFC 7235);
  - C{X-API-Key: <key>} for API keys.

A request that carries a matching credential of either kind is admitted.
Refusals are the binding's own: HTTP 401 with C{WWW-Authenticate} on the
HTTP doors (see L{beacon.bindings.http.TransportLimits}), a -32600 frame with
an C{UNAUTHENTICATED} ErrorInfo on the WebSocket binding.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from beacon.config import Auth
from beacon.protocol import API_KEY_HEADER

#: The realm named in the C{WWW-Authenticate} challenges.
REALM = "beacon"


def credential_digest(secret: str) -> str:
    """
    The configured form of a credential: the lower-case hex SHA-256 of its
    UTF-8 bytes (what C{printf %s "$TOKEN" | sha256sum} prints).
    """
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def _matches(secret: str, digests: tuple[str, ...]) -> bool:
    presented = credential_digest(secret)
    found = False
    for digest in digests:
        # No short cut: every digest is compared, whatever matched before.
        found |= hmac.compare_digest(presented, digest)
    return found


def bearer_token(authorization: str | None) -> str | None:
    """
    The token of an C{Authorization: Bearer <token>} value, or None when the
    value is absent or names another scheme.
    """
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip(" \t")
    if scheme.lower() != "bearer" or not token:
        return None
    return token


@dataclass(frozen=True)
class SubmitterAuth(Auth):
    """
    C{[auth]} at the doors: the credentials a submitter must present (the
    configuration's L{Auth}: SHA-256 digests, checked there), and the check
    of what a request presents. With neither kind configured,
    authentication is off and every request is admitted.
    """

    @classmethod
    def of(cls, auth: Auth) -> SubmitterAuth:
        """The doors' check of the configured C{auth}."""
        return auth if isinstance(auth, cls) else cls(auth.api_keys, auth.bearer_tokens)

    @property
    def enabled(self) -> bool:
        """Whether any credential is required at all."""
        return bool(self.api_keys or self.bearer_tokens)

    def challenge(self) -> str:
        """
        The C{WWW-Authenticate} value: one challenge per configured kind,
        comma separated (RFC 7235 allows several in one field).
        """
        challenges = []
        if self.bearer_tokens:
            challenges.append(f'Bearer realm="{REALM}"')
        if self.api_keys:
            challenges.append(f'ApiKey realm="{REALM}", header="{API_KEY_HEADER}"')
        return ", ".join(challenges)

    def admits(self, authorization: str | None, api_key: str | None) -> bool:
        """
        Whether the presented credentials let a request through.

        @param authorization: The C{Authorization} value, if any.
        @param api_key: The C{X-API-Key} value, if any.
        @return: True when authentication is off or either credential
            matches a configured digest.
        """
        if not self.enabled:
            return True
        admitted = False
        token = bearer_token(authorization)
        if token is not None and self.bearer_tokens:
            admitted |= _matches(token, self.bearer_tokens)
        key = (api_key or "").strip(" \t")
        if key and self.api_keys:
            admitted |= _matches(key, self.api_keys)
        return admitted


__all__ = [
    "API_KEY_HEADER",
    "REALM",
    "SubmitterAuth",
    "bearer_token",
    "credential_digest",
]
