"""
Agent card signatures (A2A 1.0 §8.4): a JWS (RFC 7515) over the card
canonicalised by RFC 8785 (JCS), its payload detached, kept in the card's
C{signatures} as C{{"protected": ..., "signature": ...}}.

What is signed (L{signed_content}) is what the official Python SDK
(C{a2a.utils.signing}) signs, so that its verifier accepts Beacon's card:
the card without C{signatures}, without the fields ProtoJSON leaves out at
their default value (an extension's C{"required": false}, a flow's
C{"pkceRequired": false}), and without any empty string, list or object,
the SDK's rule. The specification keeps empty REQUIRED fields and empty
messages (a security requirement's C{{"list": []}} scopes); the two forms
agree on every card without such a value. L{verify_card} accepts a
signature over either.

The protected header holds C{alg} (C{ES256}, C{EdDSA} or C{RS256}),
C{kid} (by default the RFC 7638 thumbprint of the public key), C{typ}
C{"JOSE"} and, when given, C{jku}.

A room of its own below the card (L{beacon.intake}) and the client
(L{beacon.client}), which both use it; it imports nothing of Beacon.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Union

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)

PrivateKey = Union[ec.EllipticCurvePrivateKey, ed25519.Ed25519PrivateKey, rsa.RSAPrivateKey]
PublicKey = Union[ec.EllipticCurvePublicKey, ed25519.Ed25519PublicKey, rsa.RSAPublicKey]

#: The algorithms Beacon signs and verifies with, by JWS name.
ALGORITHMS = ("ES256", "EdDSA", "RS256")
#: The smallest RSA key accepted (NIST SP 800-131A).
MIN_RSA_BITS = 2048
#: How deep a card may nest (its extensions' C{params} may nest at will).
MAX_DEPTH = 128
#: The largest key or JWKS file read.
MAX_KEY_FILE = 1024 * 1024


class KeyFileError(ValueError):
    """A key file cannot be read, or holds no key of the kind needed."""


class CardSignatureError(ValueError):
    """A card carries no signature that one of the trusted keys verifies."""


# RFC 8785 (JCS).


def _jcs_number(value: int | float) -> str:
    if isinstance(value, int):
        if abs(value) > 2**53 - 1:
            raise ValueError(f"{value} is outside the integers a JSON number holds exactly")
        return str(value)
    if not math.isfinite(value):
        raise ValueError(f"{value} has no JSON form")
    if value == 0:
        return "0"
    # ECMAScript's Number::toString over the shortest round-trip digits.
    sign, digit_tuple, exponent = Decimal(repr(abs(value))).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0") or "0"
    assert isinstance(exponent, int)
    n = exponent + len("".join(map(str, digit_tuple)))
    k = len(digits)
    text: str
    if k <= n <= 21:
        text = digits + "0" * (n - k)
    elif 0 < n <= 21:
        text = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        text = "0." + "0" * -n + digits
    else:
        e = n - 1
        mantissa = digits if k == 1 else digits[0] + "." + digits[1:]
        text = f"{mantissa}e{'+' if e >= 0 else '-'}{abs(e)}"
    return ("-" if value < 0 else "") + text


def _jcs_string(text: str) -> str:
    # JSON's own escaping is RFC 8785's: the quote, the backslash and the
    # controls (\b \f \n \r \t short, the others \u00xx), the rest as is.
    return json.dumps(text, ensure_ascii=False)


def _jcs(value: Any, out: list[str], depth: int) -> None:
    if isinstance(value, (dict, Mapping, list, tuple)) and depth > MAX_DEPTH:
        raise ValueError(f"the card nests deeper than {MAX_DEPTH}")
    if isinstance(value, Mapping):
        out.append("{")
        keys = sorted(value, key=lambda k: str(k).encode("utf-16-be"))
        for index, name in enumerate(keys):
            if not isinstance(name, str):
                raise ValueError("an object's member name is not a string")
            if index:
                out.append(",")
            out.append(_jcs_string(name))
            out.append(":")
            _jcs(value[name], out, depth + 1)
        out.append("}")
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _jcs(item, out, depth + 1)
        out.append("]")
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, (int, float)):
        out.append(_jcs_number(value))
    elif isinstance(value, str):
        out.append(_jcs_string(value))
    else:
        raise ValueError(f"{type(value).__name__} has no JSON form")


def canonicalize(value: Any) -> bytes:
    """
    The RFC 8785 canonical form of a JSON value, as UTF-8.

    @raise ValueError: It has none (a non-finite number, an integer past
        2**53, an unpaired surrogate, nesting past L{MAX_DEPTH}).
    """
    out: list[str] = []
    _jcs(value, out, 1)
    try:
        return "".join(out).encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("the card holds text that is not valid Unicode") from None


# What is signed.


def _without_defaults(card: Mapping[str, Any]) -> dict[str, Any]:
    """
    The card without C{signatures} and without the fields of the AgentCard
    proto that have no presence and are at their default value (ProtoJSON
    leaves them out): C{AgentExtension.required} and
    C{AuthorizationCodeOAuthFlow.pkceRequired}, when false.
    """
    document = {name: value for name, value in card.items() if name != "signatures"}
    capabilities = document.get("capabilities")
    if isinstance(capabilities, Mapping) and isinstance(capabilities.get("extensions"), list):
        document["capabilities"] = dict(
            capabilities,
            extensions=[
                {k: v for k, v in e.items() if not (k == "required" and v is False)}
                if isinstance(e, Mapping) else e
                for e in capabilities["extensions"]
            ],
        )
    schemes = document.get("securitySchemes")
    if isinstance(schemes, Mapping):
        cleaned: dict[str, Any] = {}
        for name, scheme in schemes.items():
            flow = _dig(scheme, "oauth2SecurityScheme", "flows", "authorizationCode")
            if isinstance(flow, Mapping) and flow.get("pkceRequired") is False:
                oauth = dict(scheme["oauth2SecurityScheme"])
                flows = dict(oauth["flows"])
                flows["authorizationCode"] = {k: v for k, v in flow.items() if k != "pkceRequired"}
                oauth["flows"] = flows
                scheme = dict(scheme, oauth2SecurityScheme=oauth)
            cleaned[name] = scheme
        document["securitySchemes"] = cleaned
    return document


def _dig(value: Any, *names: str) -> Any:
    for name in names:
        if not isinstance(value, Mapping):
            return None
        value = value.get(name)
    return value


def _without_empty(value: Any, depth: int = 1) -> Any:
    """C{value} without empty strings, lists and objects, at any depth (None: it is one)."""
    if isinstance(value, (Mapping, list)) and depth > MAX_DEPTH:
        raise ValueError(f"the card nests deeper than {MAX_DEPTH}")
    if isinstance(value, Mapping):
        kept = {k: c for k, v in value.items() if (c := _without_empty(v, depth + 1)) is not None}
        return kept or None
    if isinstance(value, list):
        items = [c for v in value if (c := _without_empty(v, depth + 1)) is not None]
        return items or None
    if value == "" and isinstance(value, str):
        return None
    return value


def signed_content(card: Mapping[str, Any]) -> bytes:
    """
    The bytes a signature of C{card} covers, as the official SDK signs
    them (see the module's docstring): the JWS payload, detached.

    @raise ValueError: The card has no canonical form.
    """
    return canonicalize(_without_empty(_without_defaults(card)) or {})


def _candidate_contents(card: Mapping[str, Any]) -> list[bytes]:
    """The SDK's form (L{signed_content}), then the specification's, if it differs."""
    sdk = signed_content(card)
    spec = canonicalize(_without_defaults(card))
    return [sdk] if spec == sdk else [sdk, spec]


# Base64url and JWKs.


def b64url(data: bytes) -> str:
    """Base64url without padding (RFC 7515 §2)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64url(text: str) -> bytes:
    """
    Decode base64url without padding.

    @raise ValueError: It is not base64url.
    """
    if not isinstance(text, str) or "=" in text:
        raise ValueError("not base64url")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise ValueError("not base64url") from None


def _int_bytes(number: int, size: int | None = None) -> bytes:
    return number.to_bytes(size or max(1, (number.bit_length() + 7) // 8), "big")


def public_jwk(key: PublicKey) -> dict[str, str]:
    """The public JWK of C{key} (RFC 7517), its required members only."""
    if isinstance(key, ec.EllipticCurvePublicKey):
        numbers = key.public_numbers()
        return {
            "crv": "P-256", "kty": "EC",
            "x": b64url(_int_bytes(numbers.x, 32)), "y": b64url(_int_bytes(numbers.y, 32)),
        }
    if isinstance(key, ed25519.Ed25519PublicKey):
        raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return {"crv": "Ed25519", "kty": "OKP", "x": b64url(raw)}
    rsa_numbers = key.public_numbers()
    return {"e": b64url(_int_bytes(rsa_numbers.e)), "kty": "RSA", "n": b64url(_int_bytes(rsa_numbers.n))}


def thumbprint(key: PublicKey) -> str:
    """The RFC 7638 JWK thumbprint of C{key} (SHA-256, base64url): its default C{kid}."""
    members = json.dumps(public_jwk(key), sort_keys=True, separators=(",", ":"))
    return b64url(hashlib.sha256(members.encode("ascii")).digest())


def _algorithm_of(key: PublicKey) -> str:
    """
    The JWS algorithm for C{key}.

    @raise KeyFileError: Beacon signs with no algorithm of its kind.
    """
    if isinstance(key, ec.EllipticCurvePublicKey):
        if not isinstance(key.curve, ec.SECP256R1):
            raise KeyFileError(
                f"an EC key on {key.curve.name}: ES256 needs P-256 (secp256r1)"
            )
        return "ES256"
    if isinstance(key, ed25519.Ed25519PublicKey):
        return "EdDSA"
    if isinstance(key, rsa.RSAPublicKey):
        if key.key_size < MIN_RSA_BITS:
            raise KeyFileError(f"an RSA key of {key.key_size} bits: RS256 needs {MIN_RSA_BITS} or more")
        return "RS256"
    raise KeyFileError(
        f"a {_kind(key)} key: the card is signed with "
        "ES256 (EC P-256), EdDSA (Ed25519) or RS256 (RSA)"
    )


def _kind(key: Any) -> str:
    """A key's kind, as its class names it (C{DSA}, C{X25519} ...)."""
    name: str = type(key).__name__
    return name.removeprefix("_").removesuffix("PublicKey").removesuffix("PrivateKey") or name


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_KEY_FILE + 1)
    except OSError as e:
        raise KeyFileError(f"cannot read {path}: {(e.strerror or str(e)).lower()}") from None
    if len(data) > MAX_KEY_FILE:
        raise KeyFileError(f"{path} is larger than {MAX_KEY_FILE // 1024} KiB: not a key file")
    return data


# Signing.


@dataclass(frozen=True)
class SigningKey:
    """
    A private key that signs the card, with its header values.

    @ivar alg: C{ES256}, C{EdDSA} or C{RS256}, by the key's kind.
    @ivar kid: The key id in the protected header.
    @ivar jku: The JWKS URL in the protected header, if any.
    """

    private: PrivateKey
    alg: str
    kid: str
    jku: str | None = None

    @property
    def jwk(self) -> dict[str, str]:
        """The public JWK, with C{kid}, C{alg} and C{use}: an entry of a JWKS."""
        return {**public_jwk(self.private.public_key()), "kid": self.kid, "alg": self.alg, "use": "sig"}

    def header(self) -> dict[str, str]:
        """The protected header."""
        header = {"alg": self.alg, "kid": self.kid, "typ": "JOSE"}
        if self.jku:
            header["jku"] = self.jku
        return header

    def sign(self, signing_input: bytes) -> bytes:
        """The JWS signature of C{signing_input}."""
        key = self.private
        if isinstance(key, ec.EllipticCurvePrivateKey):
            r, s = decode_dss_signature(key.sign(signing_input, ec.ECDSA(hashes.SHA256())))
            return _int_bytes(r, 32) + _int_bytes(s, 32)
        if isinstance(key, ed25519.Ed25519PrivateKey):
            return key.sign(signing_input)
        return key.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())


def signing_key(private: Any, kid: str | None = None, jku: str | None = None) -> SigningKey:
    """
    A L{SigningKey} of a private key object.

    @param kid: Default: the key's RFC 7638 thumbprint.
    @raise KeyFileError: It is no key Beacon signs with.
    """
    if not isinstance(private, (ec.EllipticCurvePrivateKey, ed25519.Ed25519PrivateKey, rsa.RSAPrivateKey)):
        public = getattr(private, "public_key", None)
        if callable(public):
            _algorithm_of(public())
        raise KeyFileError("not a key Beacon signs with")
    public_key = private.public_key()
    alg = _algorithm_of(public_key)
    return SigningKey(private, alg, kid or thumbprint(public_key), jku or None)


def load_signing_key(path: str, kid: str | None = None, jku: str | None = None) -> SigningKey:
    """
    Read a PEM private key (PKCS#8, or the traditional EC and RSA forms;
    unencrypted) from C{path}.

    @raise KeyFileError: It cannot be read, is not PEM, is encrypted, is a
        public key, or is of a kind Beacon does not sign with.
    """
    data = _read(path)
    if b"-----BEGIN" not in data:
        raise KeyFileError(f"{path} is not a PEM file (no -----BEGIN line)")
    if b"PUBLIC KEY-----" in data and b"PRIVATE KEY-----" not in data:
        raise KeyFileError(
            f"{path} holds a public key: the card is signed with the private key"
            " (give the public key to those who verify)"
        )
    try:
        private = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise KeyFileError(f"{path} is encrypted: Beacon reads an unencrypted private key") from None
    except UnsupportedAlgorithm:
        raise KeyFileError(f"{path}: a kind of key this system cannot read") from None
    except ValueError:
        raise KeyFileError(f"{path} holds no PEM private key Beacon can read") from None
    try:
        return signing_key(private, kid, jku)
    except KeyFileError as e:
        raise KeyFileError(f"{path} holds {e}") from None


def generate_key(alg: str) -> tuple[bytes, SigningKey]:
    """
    A new private key for C{alg}: its PEM (PKCS#8, unencrypted) and the key.

    @raise ValueError: C{alg} is not one of L{ALGORITHMS}.
    """
    private: PrivateKey
    if alg == "ES256":
        private = ec.generate_private_key(ec.SECP256R1())
    elif alg == "EdDSA":
        private = ed25519.Ed25519PrivateKey.generate()
    elif alg == "RS256":
        private = rsa.generate_private_key(public_exponent=65537, key_size=3072)
    else:
        raise ValueError(f"unknown algorithm {alg!r} (choose from {', '.join(ALGORITHMS)})")
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return pem, signing_key(private)


def sign_card(card: Mapping[str, Any], keys: Sequence[SigningKey]) -> list[dict[str, str]]:
    """
    The AgentCardSignatures of C{card}, one per key (a rotation signs
    with each), over L{signed_content}.
    """
    payload = b64url(signed_content(card))
    signatures = []
    for key in keys:
        protected = b64url(json.dumps(key.header(), separators=(",", ":"), sort_keys=True).encode())
        signature = key.sign(f"{protected}.{payload}".encode("ascii"))
        signatures.append({"protected": protected, "signature": b64url(signature)})
    return signatures


# Verifying.

#: One PEM block.
_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----.*?-----END \1-----", re.S)


@dataclass(frozen=True)
class VerificationKey:
    """
    A public key trusted to sign cards.

    @ivar kid: Its JWK's C{kid}, else its RFC 7638 thumbprint.
    @ivar alg: The one algorithm it verifies.
    """

    public: PublicKey
    kid: str
    alg: str

    def verifies(self, signing_input: bytes, signature: bytes) -> bool:
        """Whether C{signature} is this key's over C{signing_input}."""
        key = self.public
        try:
            if isinstance(key, ec.EllipticCurvePublicKey):
                if len(signature) != 64:
                    return False
                der = encode_dss_signature(
                    int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big")
                )
                key.verify(der, signing_input, ec.ECDSA(hashes.SHA256()))
            elif isinstance(key, ed25519.Ed25519PublicKey):
                key.verify(signature, signing_input)
            else:
                key.verify(signature, signing_input, padding.PKCS1v15(), hashes.SHA256())
        except InvalidSignature:
            return False
        return True


def verification_key(public: Any, kid: str | None = None) -> VerificationKey:
    """
    A L{VerificationKey} of a public key object.

    @raise KeyFileError: It is no key Beacon verifies with.
    """
    alg = _algorithm_of(public)
    return VerificationKey(public, kid or thumbprint(public), alg)


def _from_jwk(jwk: Any, where: str) -> VerificationKey:
    if not isinstance(jwk, Mapping):
        raise KeyFileError(f"{where} is not a JWK (a JSON object)")
    kty = jwk.get("kty")
    try:
        public: PublicKey
        if kty == "EC" and jwk.get("crv") == "P-256":
            public = ec.EllipticCurvePublicNumbers(
                int.from_bytes(unb64url(jwk["x"]), "big"),
                int.from_bytes(unb64url(jwk["y"]), "big"),
                ec.SECP256R1(),
            ).public_key()
        elif kty == "OKP" and jwk.get("crv") == "Ed25519":
            public = ed25519.Ed25519PublicKey.from_public_bytes(unb64url(jwk["x"]))
        elif kty == "RSA":
            public = rsa.RSAPublicNumbers(
                int.from_bytes(unb64url(jwk["e"]), "big"), int.from_bytes(unb64url(jwk["n"]), "big")
            ).public_key()
        else:
            raise KeyFileError(
                f"{where}: kty {kty!r}, crv {jwk.get('crv')!r}: the card is verified with "
                "EC P-256, OKP Ed25519 or RSA keys"
            )
    except (KeyError, TypeError, ValueError) as e:
        if isinstance(e, KeyFileError):
            raise
        raise KeyFileError(f"{where} is not a valid {kty} public JWK") from None
    kid = jwk.get("kid")
    key = verification_key(public, kid if isinstance(kid, str) and kid else None)
    if jwk.get("alg") not in (None, key.alg):
        raise KeyFileError(f"{where}: alg {jwk.get('alg')!r} does not fit a {kty} key ({key.alg})")
    return key


def load_verification_keys(path: str) -> tuple[VerificationKey, ...]:
    """
    Read the keys trusted to sign a card from C{path}: a PEM public key
    (or several, concatenated), a JWKS (C{{"keys": [...]}}) or one JWK.
    JWKS entries whose C{use} is not C{sig} are left out.

    @raise KeyFileError: It cannot be read, or holds no such key.
    """
    data = _read(path)
    if data.lstrip().startswith(b"{"):
        try:
            document = json.loads(data)
        except ValueError:
            raise KeyFileError(f"{path} is not valid JSON (a JWKS or a JWK)") from None
        if isinstance(document, dict) and "keys" in document:
            entries = document["keys"]
            if not isinstance(entries, list):
                raise KeyFileError(f"{path}: keys is not a list")
            keys = tuple(
                _from_jwk(jwk, f"{path}: keys[{index}]")
                for index, jwk in enumerate(entries)
                if not (isinstance(jwk, Mapping) and jwk.get("use", "sig") != "sig")
            )
        else:
            keys = (_from_jwk(document, path),)
        if not keys:
            raise KeyFileError(f"{path} holds no signing key (its JWKS is empty)")
        return keys
    if b"-----BEGIN" not in data:
        raise KeyFileError(f"{path} is neither a PEM public key nor a JWKS")
    found = [m.group(0) for m in _PEM_BLOCK.finditer(data)]
    keys_list = []
    for pem in found:
        if b"PRIVATE KEY-----" in pem:
            raise KeyFileError(
                f"{path} holds a private key: verify with the public key "
                "(or a JWKS), and keep the private key to the signer"
            )
        try:
            public = serialization.load_pem_public_key(pem)
        except (ValueError, UnsupportedAlgorithm):
            raise KeyFileError(f"{path} holds no PEM public key Beacon can read") from None
        try:
            keys_list.append(verification_key(public))
        except KeyFileError as e:
            raise KeyFileError(f"{path} holds {e}") from None
    if not keys_list:
        raise KeyFileError(f"{path} holds no PEM public key")
    return tuple(keys_list)


def _header_of(signature: Any) -> tuple[dict[str, Any], str, bytes] | None:
    """The protected header, its base64url form and the signature bytes; None when malformed."""
    if not isinstance(signature, Mapping):
        return None
    protected, value = signature.get("protected"), signature.get("signature")
    if not isinstance(protected, str) or not isinstance(value, str):
        return None
    try:
        header = json.loads(unb64url(protected))
        raw = unb64url(value)
    except ValueError:
        return None
    if not isinstance(header, dict) or header.get("alg") not in ALGORITHMS:
        return None
    # A critical extension this verifier does not understand (RFC 7515
    # §4.1.11), or an unencoded payload (RFC 7797): not a signature it can check.
    if "crit" in header or header.get("b64", True) is not True:
        return None
    return header, protected, raw


def verify_card(card: Mapping[str, Any], keys: Iterable[VerificationKey]) -> VerificationKey:
    """
    Check C{card}'s signatures against C{keys}: one valid signature by one
    of them suffices (a card signed during a key rotation carries several).

    @return: The key that verified it (its C{kid} names it).
    @raise CardSignatureError: The card is unsigned, or none of its
        signatures is valid under any of C{keys}.
    """
    trusted = list(keys)
    signatures = card.get("signatures")
    if not signatures:
        raise CardSignatureError("the card is not signed")
    if not isinstance(signatures, (list, tuple)):
        raise CardSignatureError("the card's signatures are not a list")
    try:
        payloads = [b64url(content) for content in _candidate_contents(card)]
    except ValueError as e:
        raise CardSignatureError(f"the card has no canonical form: {e}") from None
    kids = []
    for signature in signatures:
        parsed = _header_of(signature)
        if parsed is None:
            continue
        header, protected, raw = parsed
        kid = header.get("kid")
        kids.append(str(kid))
        # The key the header names first, then any other trusted key of its algorithm.
        fitting = [k for k in trusted if k.alg == header["alg"]]
        fitting.sort(key=lambda k: k.kid != kid)
        for key in fitting:
            for payload in payloads:
                if key.verifies(f"{protected}.{payload}".encode("ascii"), raw):
                    return key
    named = f" (signed by kid {', '.join(kids)})" if kids else ""
    raise CardSignatureError(f"no signature of the card is valid under the trusted keys{named}")


__all__ = [
    "ALGORITHMS",
    "CardSignatureError",
    "KeyFileError",
    "SigningKey",
    "VerificationKey",
    "b64url",
    "canonicalize",
    "generate_key",
    "load_signing_key",
    "load_verification_keys",
    "public_jwk",
    "sign_card",
    "signed_content",
    "signing_key",
    "thumbprint",
    "unb64url",
    "verification_key",
    "verify_card",
]
