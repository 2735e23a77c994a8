"""
The official a2a-sdk's card signing, run in a process of its own (its
protobuf messages share names with beacon.proto's, so the two cannot be
loaded in one interpreter): reads one JSON request on standard input,
writes one JSON answer on standard output.

  - C{{"op": "verify", "card": ..., "jwks": [...], "algorithms": [...]}}:
    C{{"result": "valid"}}, or the name of the SDK's error
    (C{NoSignatureError}, C{InvalidSignaturesError}).
  - C{{"op": "sign", "card": ..., "pem": "...", "header": {...}}}: the card
    the SDK's signer signed, as ProtoJSON (C{MessageToDict}).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from google.protobuf.json_format import MessageToDict, ParseDict
from jwt import PyJWK
from jwt.exceptions import PyJWKError

from a2a.types import AgentCard
from a2a.utils.signing import (
    SignatureVerificationError,
    create_agent_card_signer,
    create_signature_verifier,
)
from cryptography.hazmat.primitives.serialization import load_pem_private_key


def answer(request: dict[str, Any]) -> Any:
    card = ParseDict(request["card"], AgentCard())
    if request["op"] == "sign":
        key = load_pem_private_key(request["pem"].encode(), password=None)
        create_agent_card_signer(key, request["header"])(card)  # type: ignore[arg-type]
        return MessageToDict(card)
    jwks = {jwk["kid"]: PyJWK(jwk) for jwk in request["jwks"]}

    def key_provider(kid: str | None, jku: str | None) -> PyJWK:
        if kid not in jwks:
            raise PyJWKError(f"no trusted key {kid}")
        return jwks[kid]

    try:
        create_signature_verifier(key_provider, request["algorithms"])(card)
    except SignatureVerificationError as e:
        return type(e).__name__
    return "valid"


if __name__ == "__main__":
    json.dump({"result": answer(json.load(sys.stdin))}, sys.stdout)
