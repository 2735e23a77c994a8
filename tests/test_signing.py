"""
The signed agent card (issue 41, items 3 and 4): Beacon signs its public
card as the official a2a-sdk verifies it, verifies what the SDK signs,
reads its keys at start-up (a bad one stops it in one line), and the
client (C{beacon card|send --verify}) goes on only for a card signed by
a trusted key.
"""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.request import urlopen

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec
from beacon.client import UnverifiedCard, check_card_signature, load_verification_keys, parse_card
from beacon.config import CardText, ConfigError, build_config
from beacon.intake import card_signing_keys, public_card, signed_card
from beacon.service import check_config
from beacon.signing import (
    ALGORITHMS,
    KeyFileError,
    canonicalize,
    generate_key,
    load_signing_key,
    thumbprint,
    unb64url,
    verification_key,
)
from peers.process import Beacon, BeaconLauncher

COMMAND_TIMEOUT = 60.0


def beacon_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "beacon.cli", *args],
        capture_output=True, text=True, timeout=COMMAND_TIMEOUT, stdin=subprocess.DEVNULL, cwd=cwd,
    )


def write_key(path: Path, alg: str) -> Any:
    pem, key = generate_key(alg)
    path.write_bytes(pem)
    return key


SDK = Path(__file__).parent / "peers" / "a2a_sdk_signing.py"


def sdk(**request: Any) -> Any:
    """The a2a-sdk's answer to C{request} (see L{peers.a2a_sdk_signing}), from a process of its own."""
    done = subprocess.run(
        [sys.executable, str(SDK)], input=json.dumps(request), capture_output=True, text=True,
        timeout=COMMAND_TIMEOUT, check=True,
    )
    return json.loads(done.stdout)["result"]


def sdk_verify(card: dict[str, Any], *keys: Any) -> str:
    """The SDK's verifier on C{card}, trusting C{keys} (Beacon's L{SigningKey}s) by kid: valid, or its error's name."""
    jwks = [key.jwk for key in keys]
    result: str = sdk(op="verify", card=card, jwks=jwks, algorithms=sorted({key.alg for key in keys}))
    return result


def fetch(url: str) -> dict[str, Any]:
    with urlopen(url + "/.well-known/agent-card.json", timeout=COMMAND_TIMEOUT) as answer:
        document: dict[str, Any] = json.load(answer)
        return document


# The canonical form.


@pytest.mark.parametrize(
    "value, canonical",
    [
        (
            {"b": 1, "a": [True, False, None, "x"], "é": "ü\u2028", "\u20ac": 1, "\U0001f600": 2},
            '{"a":[true,false,null,"x"],"b":1,"é":"ü\u2028","€":1,"😀":2}',
        ),
        (
            [0, -0.0, 1.0, 1.5, -2.25, 1e21, 1e-7, 123456789.125, 5e-324, 1.7976931348623157e308, 1e20, 0.000001],
            "[0,0,1,1.5,-2.25,1e+21,1e-7,123456789.125,5e-324,1.7976931348623157e+308,"
            "100000000000000000000,0.000001]",
        ),
        (
            {"control": "\x00\x1f\b\t\n\f\r\"\\/", "nested": {"z": {}, "y": []}},
            '{"control":"\\u0000\\u001f\\b\\t\\n\\f\\r\\"\\\\/","nested":{"y":[],"z":{}}}',
        ),
        (
            [2**53 - 1, -(2**53 - 1), 333333333.3333333, 1 / 3, 100, 1e-6],
            "[9007199254740991,-9007199254740991,333333333.3333333,0.3333333333333333,100,0.000001]",
        ),
        # RFC 8785 section 3.2.3's own example.
        (
            {
                "numbers": [333333333.33333329, 1e30, 4.50, 2e-3, 0.000000000000000000000000001],
                "string": "\u20ac$\u000f\u000aA'\u0042\u0022\u005c\\\"/",
                "literals": [None, True, False],
            },
            '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
            '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}',
        ),
    ],
)
def test_canonical_form_is_rfc_8785s(value: Any, canonical: str) -> None:
    """Beacon's RFC 8785 form, byte for byte (numbers as ECMAScript writes them, escapes, keys in UTF-16 order): what the SDK's signer signs (its verifier's acceptance of Beacon's cards is tested below)."""
    assert canonicalize(value) == canonical.encode("utf-8")


# Beacon signs, the SDK verifies.


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[BeaconLauncher]:
    launcher = BeaconLauncher(tmp_path)
    try:
        yield launcher
    finally:
        launcher.close()


def signed_beacon(launcher: BeaconLauncher, toml: str) -> Beacon:
    config = launcher.cwd / "beacon.toml"
    config.write_text(toml)
    return launcher.start("--config", str(config))


def test_rotation_signed_card_verifies_with_the_sdk(launcher: BeaconLauncher, tmp_path: Path) -> None:
    """
    Two keys (ES256 and EdDSA, a rotation) sign the card served on the
    public listener: both signatures are there, the SDK's verifier accepts
    the card with either key alone, and refuses it once a field changed.
    """
    es256 = write_key(tmp_path / "new.pem", "ES256")
    eddsa = write_key(tmp_path / "old.pem", "EdDSA")
    beacon = signed_beacon(
        launcher, '[card]\nsigning_key = ["new.pem", "old.pem"]\n[auth]\napi_keys = ["'
        + "0" * 64 + '"]\n',
    )
    document = fetch(beacon.public_url)
    headers = [json.loads(unb64url(s["protected"])) for s in document["signatures"]]
    assert headers == [
        {"alg": "ES256", "kid": es256.kid, "typ": "JOSE"},
        {"alg": "EdDSA", "kid": eddsa.kid, "typ": "JOSE"},
    ]
    for key in (es256, eddsa):
        assert sdk_verify(document, key) == "valid"
        assert sdk_verify(dict(document, name="Another Beacon"), key) == "InvalidSignaturesError"
    # Beacon's own client verifies it too, naming the key.
    card = parse_card(document)
    for key in (es256, eddsa):
        trusted = [verification_key(key.private.public_key())]
        assert check_card_signature(card, trusted).kid == key.kid


@pytest.mark.parametrize("alg", ALGORITHMS)
def test_each_algorithm_verifies_with_the_sdk(alg: str, tmp_path: Path) -> None:
    """ES256, EdDSA and RS256, with a kid and a jku of the operator's: the SDK's verifier accepts the prepared card, not a changed one."""
    write_key(tmp_path / "k.pem", alg)
    config = check_config(build_config({
        "card": {"signing": [{"key": str(tmp_path / "k.pem"), "kid": "2026-01", "jku": "https://b.example/jwks.json"}]},
        "server": {"public_url": "https://b.example"},
    }))
    keys = card_signing_keys(config.card)
    card = signed_card(public_card(config.card, "https://b.example", websocket=True, bearer=True), keys)
    header = json.loads(unb64url(card["signatures"][0]["protected"]))
    assert header == {"alg": alg, "kid": "2026-01", "jku": "https://b.example/jwks.json", "typ": "JOSE"}
    assert sdk_verify(card, *keys) == "valid"
    changed = json.loads(json.dumps(card))
    changed["skills"][0]["description"] += "!"
    assert sdk_verify(changed, *keys) == "InvalidSignaturesError"
    unsigned = public_card(config.card, "https://b.example")
    assert sdk_verify(unsigned, *keys) == "NoSignatureError"


# The SDK signs, Beacon verifies.


@pytest.mark.parametrize("alg", ALGORITHMS)
def test_sdk_signed_cards_verify_with_beacon(alg: str, tmp_path: Path) -> None:
    """A card the SDK's signer signed (non-ASCII text, security requirements) verifies with Beacon's client, from a JWKS or a PEM public key; changed, it does not."""
    pem, key = generate_key(alg)
    text = CardText(name="Bäcon ✓", description="Ünïcode, \"quotes\" and a line\nbreak.")
    card = public_card(text, "https://sdk.example", api_keys=True, grpc=["h:1"])
    header = {"alg": alg, "kid": "sdk-key", "jku": None, "typ": "JOSE"}
    served = sdk(op="sign", card=card, pem=pem.decode(), header=header)
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [dict(key.jwk, kid="sdk-key")]}))
    (tmp_path / "public.pem").write_bytes(key.private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    by_jwks = check_card_signature(parse_card(served), load_verification_keys(str(tmp_path / "jwks.json")))
    assert by_jwks.kid == "sdk-key"
    by_pem = check_card_signature(parse_card(served), load_verification_keys(str(tmp_path / "public.pem")))
    assert by_pem.kid == thumbprint(key.private.public_key())
    served["description"] = "Changed."
    with pytest.raises(UnverifiedCard, match="no signature of the card is valid.*sdk-key"):
        check_card_signature(parse_card(served), load_verification_keys(str(tmp_path / "jwks.json")))


# Bad keys stop start-up.


def _dsa_pem() -> bytes:
    return dsa.generate_private_key(2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def _public_pem() -> bytes:
    return ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def _p384_pem() -> bytes:
    return ec.generate_private_key(ec.SECP384R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, r"\[card\] signing_key: cannot read .*k\.pem: no such file or directory"),
        (b"not a key", r"\[card\] signing_key: .*k\.pem is not a PEM file"),
        (b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
         r"k\.pem holds no PEM private key Beacon can read"),
        (_public_pem(), r"k\.pem holds a public key: the card is signed with the private key"),
        (_dsa_pem(), r"k\.pem holds a DSA key: the card is signed with ES256"),
        (_p384_pem(), r"k\.pem holds an EC key on secp384r1: ES256 needs P-256"),
    ],
    ids=["missing", "not-pem", "bad-pem", "public", "dsa", "p384"],
)
def test_bad_keys_are_config_errors(tmp_path: Path, content: bytes | None, expected: str) -> None:
    """Every bad key file is a ConfigError of check_config, one line naming the key and the file."""
    if content is not None:
        (tmp_path / "k.pem").write_bytes(content)
    with pytest.raises(ConfigError, match=expected) as raised:
        check_config(build_config({"card": {"signing_key": str(tmp_path / "k.pem")}}))
    assert "\n" not in str(raised.value)


def test_unreadable_key(tmp_path: Path) -> None:
    """A key path that cannot be read (a directory: unreadable for root too) is named with the system's reason."""
    (tmp_path / "k.pem").mkdir()
    with pytest.raises(ConfigError, match="cannot read .*k.pem.*directory") as raised:
        check_config(build_config({"card": {"signing_key": str(tmp_path / "k.pem")}}))
    assert "\n" not in str(raised.value)


def test_config_shapes(tmp_path: Path) -> None:
    """signing_key takes a path or a list; [[card.signing]] tables; not both; mistakes named."""
    write_key(tmp_path / "a.pem", "EdDSA")
    assert build_config({"card": {"signing_key": "a.pem"}}).card.signing_key == ("a.pem",)
    for bad, message in [
        ({"signing_key": 5}, "signing_key must be a path or a list of paths"),
        ({"signing": [{"key": "a.pem", "kidd": "x"}]}, r"unknown key 'kidd' in \[\[card.signing\]\] \(did you mean 'kid'\?\)"),
        ({"signing": [{"kid": "x"}]}, r"\[\[card.signing\]\] needs key"),
        ({"signing": [{"key": "a.pem", "jku": "ftp://x"}]}, "jku must be an absolute"),
        ({"signing_key": "a.pem", "signing": [{"key": "a.pem"}]}, "say the same thing twice"),
    ]:
        with pytest.raises(ConfigError, match=message):
            check_config(build_config({"card": bad}))
    with pytest.raises(ConfigError, match="kid .* names another key too"):
        check_config(build_config({"card": {"signing_key": [str(tmp_path / "a.pem")] * 2}}))


def test_bad_key_stops_twistd_in_one_line(tmp_path: Path) -> None:
    """twistd beacon with a missing key: exit 1, the reason first, in one line."""
    (tmp_path / "beacon.toml").write_text('[card]\nsigning_key = "missing.pem"\n')
    twistd = Path(sys.executable).parent / "twistd"
    done = subprocess.run(
        [str(twistd), "-n", "beacon", "--config", "beacon.toml"], cwd=tmp_path,
        capture_output=True, text=True, timeout=COMMAND_TIMEOUT, stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1
    assert done.stderr.splitlines()[0] == (
        "twistd beacon: [card] signing_key: cannot read missing.pem: no such file or directory"
    )


# The command line.


def test_keygen(tmp_path: Path) -> None:
    """keygen writes a 0600 PEM Beacon signs with, prints its JWKS, and never overwrites."""
    for alg in ("ES256", "EdDSA", "RS256"):
        done = beacon_cli("card", "keygen", f"{alg}.pem", "--alg", alg, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        path = tmp_path / f"{alg}.pem"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        key = load_signing_key(str(path))
        assert json.loads(done.stdout) == {"keys": [key.jwk]}
        assert done.stderr == f"beacon: wrote {alg}.pem ({alg}, kid {key.kid})\n"
    before = (tmp_path / "ES256.pem").read_bytes()
    again = beacon_cli("card", "keygen", "ES256.pem", cwd=tmp_path)
    assert (again.returncode, again.stdout) == (1, "")
    assert again.stderr == "beacon: ES256.pem exists: not overwritten (choose another path)\n"
    assert (tmp_path / "ES256.pem").read_bytes() == before
    default = beacon_cli("card", "keygen", "d.pem", cwd=tmp_path)
    assert json.loads(default.stdout)["keys"][0]["alg"] == "ES256"


def test_card_and_send_verify(launcher: BeaconLauncher, tmp_path: Path) -> None:
    """
    card --verify names the kid that signed; another key, or an unsigned
    card, exits 4; send --verify to an unsigned card sends nothing.
    """
    keygen = beacon_cli("card", "keygen", "card-key.pem", cwd=tmp_path)
    (tmp_path / "jwks.json").write_text(keygen.stdout)
    kid = json.loads(keygen.stdout)["keys"][0]["kid"]
    other = beacon_cli("card", "keygen", "other.pem", "--alg", "EdDSA", cwd=tmp_path)
    (tmp_path / "other.json").write_text(other.stdout)
    signed = signed_beacon(launcher, '[card]\nsigning_key = "card-key.pem"\n')
    shown = beacon_cli("card", signed.public_url, "--verify", str(tmp_path / "jwks.json"))
    assert shown.returncode == 0, shown.stderr
    assert f"signed by: kid {kid} (ES256), a key of {tmp_path / 'jwks.json'}" in shown.stdout
    refused = beacon_cli("card", signed.public_url, "--verify", str(tmp_path / "other.json"))
    assert (refused.returncode, refused.stdout) == (4, "")
    assert refused.stderr.startswith(f"beacon: the card at {signed.public_url}/.well-known/agent-card.json "
                                     f"is not trusted: no signature of the card is valid under the trusted keys (signed by kid {kid})")
    sent = beacon_cli("send", signed.public_url, "signed hello", "--verify", str(tmp_path / "jwks.json"))
    assert sent.returncode == 0, sent.stderr
    signed.process.wait_for(r"intake\.stored:", COMMAND_TIMEOUT)
    (tmp_path / "unsigned").mkdir()
    elsewhere = BeaconLauncher(tmp_path / "unsigned")
    try:
        unsigned = elsewhere.start()
        refused_send = beacon_cli("send", unsigned.public_url, "hello", "--verify", str(tmp_path / "jwks.json"))
        log = unsigned.log
    finally:
        elsewhere.close()
    assert refused_send.returncode == 4
    assert refused_send.stderr.endswith("is not trusted: the card is not signed; nothing was sent\n")
    assert "intake.stored" not in log
    bad = beacon_cli("card", signed.public_url, "--verify", str(tmp_path / "card-key.pem"))
    assert bad.returncode == 2
    assert "--verify: " in bad.stderr and "holds a private key" in bad.stderr


def test_keys_files_read(tmp_path: Path) -> None:
    """A JWKS leaves out keys not for signatures; a private key or an empty JWKS is refused."""
    _, key = generate_key("EdDSA")
    (tmp_path / "j.json").write_text(json.dumps({"keys": [dict(key.jwk, use="enc"), key.jwk]}))
    assert [k.kid for k in load_verification_keys(str(tmp_path / "j.json"))] == [key.kid]
    (tmp_path / "e.json").write_text('{"keys": []}')
    with pytest.raises(KeyFileError, match="holds no signing key"):
        load_verification_keys(str(tmp_path / "e.json"))
