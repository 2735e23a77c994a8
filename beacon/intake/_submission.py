"""
What a submission is: the mapping of an A2A message onto Beacon's stored
content (Beacon's public policy, "SendMessage mapping"), the canonical form that is stored
and hashed, and receipt ids.

The stored content is a small JSON document, the same one the native
beacon/0.1 protocol accepts as its request body:

  - C{{"message": {...}}}: a structured submission, valid against
    C{message.schema.json};
  - C{{"text": "..."}}: an unstructured submission.

Its canonical form is that document serialised as UTF-8 JSON with keys sorted,
no insignificant white space and no ASCII escaping of non-ASCII characters
(C{json.dumps(document, sort_keys=True, separators=(",", ":"),
ensure_ascii=False)}). The receipt's C{sha256} is the SHA-256 of exactly those
bytes, so anyone holding the content can recompute it.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass
from importlib.resources import files
from json.encoder import encode_basestring
from typing import Any

from jsonschema import Draft202012Validator

from beacon.protocol import (
    ContentTypeNotSupportedError,
    InvalidParamsError,
    Message,
    UnsupportedOperationError,
    compact_encoder,
)

KIND_STRUCTURED = "structured"
KIND_TEXT = "text"


def load_schema() -> dict[str, Any]:
    """
    The structured-submission JSON Schema shipped as
    C{beacon/intake/message.schema.json}.
    """
    text = files("beacon.intake").joinpath("message.schema.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def schema_validator() -> Draft202012Validator:
    """
    A validator for structured submissions (checked against the metaschema).
    """
    schema = load_schema()
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


#: RFC 4648 "base32hex" digits, in lower case: in the order of their values,
#: so that ids sort as the numbers they write.
_BASE32HEX = "0123456789abcdefghijklmnopqrstuv"
#: Every pair of digits, indexed by the ten bits it writes.
_BASE32_PAIRS = [high + low for high in _BASE32HEX for low in _BASE32HEX]


def base32hex(bits: int, digits: int) -> str:
    """
    The last C{digits} (an even number) RFC 4648 base32hex digits of
    C{bits}, in lower case, in one pass of table look-ups.
    """
    pairs = _BASE32_PAIRS
    return "".join([pairs[(bits >> shift) & 1023] for shift in range(digits * 5 - 10, -1, -10)])


#: The bits of an id: the millisecond it was issued, then random bits (at
#: least 128, docs/explanation/protocol-0.1.rst); 180 in all, 36 base32 digits.
ID_TIME_BITS = 48
ID_RANDOM_BITS = 132

#: Each byte's low five bits as a base32hex digit: random bytes translate to
#: uniformly random digits (256 is a multiple of 32).
_DIGIT_OF_BYTE = bytes(ord(_BASE32HEX[value & 31]) for value in range(256))

#: The first eight digits of an id (the 40 highest of its 48 bits of time,
#: which change every 256 ms) as last written, with those bits; read and
#: replaced whole. Keeping them saves ~7,500 instructions per id, two ids
#: per submission: 2.9 % of send (522,827 instructions per request against
#: 537,742 writing them each time, bench/inprocess.py send --callgrind).
_prefix: tuple[int, str] = (-1, "")


def new_id(now: float) -> str:
    """
    A fresh receipt (or context) id: 36 lowercase base32hex digits (RFC
    4648), letters and digits only, so that an id never looks like a
    command-line option. It writes the millisecond of C{now} (48 bits)
    followed by 132 random bits: the random part makes it unguessable, and
    the time in front makes ids sort by their time of issue, so that the
    store's indexes on them grow at one end: a commit rewrites a few index
    pages, not one page per id as wholly random ids would (two to three
    times the store's write cost per submission, measured).

    The first eight digits (the 40 highest bits of time) are written once
    every 256 ms; the next two (the 8 lowest bits of time and 2 random
    bits) are one look-up; the other 26 digits are 26 random bytes from
    C{os.urandom}, each keeping its low five bits.

    @param now: Seconds since the epoch (the caller's clock).
    """
    global _prefix
    millisecond = int(now * 1000) & ((1 << ID_TIME_BITS) - 1)
    high = millisecond >> 8
    prefix = _prefix
    if prefix[0] != high:
        prefix = (high, base32hex(high, 8))
        _prefix = prefix
    random = _random_bytes(27)
    return (
        prefix[1]
        + _BASE32_PAIRS[((millisecond & 255) << 2) | (random[0] & 3)]
        + random[1:].translate(_DIGIT_OF_BYTE).decode("ascii")
    )


#: How many ids' random bytes one C{os.urandom} call draws.
_IDS_PER_DRAW = 150
_pool = b""
_taken = 0
_pool_lock = threading.Lock()


def _random_bytes(count: int) -> bytes:
    """
    C{count} bytes from C{os.urandom}, drawn a few kilobytes at a time (one
    system call for L{_IDS_PER_DRAW} ids rather than one each). Bytes are
    never handed out twice: taken under a lock, and forgotten by a forked
    child (L{os.register_at_fork}), which draws its own.
    """
    global _pool, _taken
    with _pool_lock:
        start = _taken
        if start + count > len(_pool):
            _pool = os.urandom(27 * _IDS_PER_DRAW)
            start = 0
        _taken = start + count
        return _pool[start : start + count]


def _forget_pool() -> None:
    global _pool, _taken, _pool_lock
    _pool, _taken, _pool_lock = b"", 0, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)


def canonical_content(document: dict[str, Any]) -> bytes:
    """
    The canonical bytes of a stored content document (see the module
    docstring).
    """
    text = document.get("text")
    if len(document) == 1 and type(text) is str:
        # A text document's is its one member, written out: the encoder's
        # call (its dict and sort) cost ~2,900 instructions more a
        # submission (bench/inprocess.py send --callgrind).
        return ('{"text":' + encode_basestring(text) + "}").encode("utf-8")
    return _canonical_encode(document).encode("utf-8")


_canonical_encode = compact_encoder(sort_keys=True)


# Not frozen, as it is made for every request: see beacon.protocol.types.Part.
@dataclass(slots=True)
class Content:
    """
    A submission's content, ready to store.

    @ivar kind: L{KIND_STRUCTURED} or L{KIND_TEXT}.
    @ivar canonical: The canonical bytes that are stored.
    @ivar sha256: SHA-256 of C{canonical}, 64 lowercase hex digits.
    """

    kind: str
    canonical: bytes
    sha256: str


def content_of(document: dict[str, Any]) -> Content:
    """
    Make L{Content} from a content document (C{{"message": ...}} or
    C{{"text": ...}}).
    """
    kind = KIND_STRUCTURED if "message" in document else KIND_TEXT
    canonical = canonical_content(document)
    return Content(kind=kind, canonical=canonical, sha256=hashlib.sha256(canonical).hexdigest())


def schema_violations(
    validator: Draft202012Validator, instance: Any, where: str
) -> list[tuple[str, str]]:
    """
    The schema violations of C{instance}, as C{(field, description)} pairs
    that name locations (the instance path and the schema path), never a
    submitted value.
    """
    violations = []
    for error in sorted(validator.iter_errors(instance), key=lambda e: list(e.path)):
        field = where + "".join(
            f"[{step}]" if isinstance(step, int) else f".{step}" for step in error.path
        )
        schema_path = "#/" + "/".join(str(step) for step in error.schema_path)
        violations.append((field, f"fails {error.validator} at {schema_path}"))
        if len(violations) >= 16:
            return violations
    violations.extend(nul_violations(instance, where))
    return violations[:16]


def nul_violations(value: Any, where: str) -> list[tuple[str, str]]:
    """
    The places in the JSON C{value} where a string (or a member name)
    holds NUL, which no stored text may (README's limits: -32602).
    """
    found: list[tuple[str, str]] = []
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack and len(found) < 16:
        item, at = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                found.append((at, "must not contain NUL"))
        elif isinstance(item, dict):
            for name, member in item.items():
                if "\x00" in name:
                    found.append((at, "must not have a member name containing NUL"))
                stack.append((member, f"{at}.{name}" if "\x00" not in name else at))
        elif isinstance(item, list):
            stack.extend((member, f"{at}[{index}]") for index, member in enumerate(item))
    return sorted(found)


def map_message(message: Message, validator: Draft202012Validator) -> Content:
    """
    Map an A2A message onto a submission, as Beacon's public policy specifies.

    @raise UnsupportedOperationError: The message names a task or context
        (continuing a task is not offered; the answer does not reveal whether
        it exists).
    @raise ContentTypeNotSupportedError: A part is a file (raw bytes or URL).
    @raise InvalidParamsError: There is neither a valid structured data part
        nor text.
    """
    if message.task_id or message.context_id:
        raise UnsupportedOperationError(
            "each submission opens a new task: taskId and contextId are not accepted"
        )
    if message.role != "ROLE_USER":
        raise InvalidParamsError(
            field_violations=[("message.role", "must be ROLE_USER")]
        )
    for index, part in enumerate(message.parts):
        if part.content in ("raw", "url"):
            raise ContentTypeNotSupportedError(
                "file parts (raw bytes or URLs) are not accepted; send text or data",
                metadata={"part": str(index)},
            )
    data = [(i, p) for i, p in enumerate(message.parts) if p.content == "data"]
    violations: list[tuple[str, str]] = []
    if len(data) == 1:
        index, part = data[0]
        violations = schema_violations(
            validator, part.value, f"message.parts[{index}].data"
        )
        if not violations:
            return content_of({"message": part.value})
    texts = [p.value for p in message.parts if p.content == "text" and p.value]
    if texts:
        return content_of({"text": "\n".join(texts)})
    if not violations:
        violations = [
            (
                "message.parts",
                "needs a text part or exactly one data part valid against "
                "message.schema.json",
            )
        ]
    raise InvalidParamsError(
        "the message has neither text nor a valid structured data part",
        field_violations=violations,
    )


def parse_native(document: Any, validator: Draft202012Validator) -> Content:
    """
    Read a native beacon/0.1 submission body: exactly one of
    C{{"text": "..."}} (non-empty) or C{{"message": {...}}} (valid against
    C{message.schema.json}).

    @raise InvalidParamsError: Anything else; the violations name locations
        (C{text}, C{message.subject}, schema paths), never submitted values.
    """
    if not isinstance(document, dict):
        raise InvalidParamsError(
            field_violations=[("", "the body must be a JSON object")]
        )
    keys = set(document)
    if keys == {"text"}:
        text = document["text"]
        if not isinstance(text, str) or not text:
            raise InvalidParamsError(
                field_violations=[("text", "must be a non-empty string")]
            )
        if "\x00" in text:
            raise InvalidParamsError(field_violations=[("text", "must not contain NUL")])
        return content_of({"text": text})
    if keys == {"message"}:
        violations = schema_violations(validator, document["message"], "message")
        if violations:
            raise InvalidParamsError(field_violations=violations)
        return content_of({"message": document["message"]})
    raise InvalidParamsError(
        field_violations=[
            ("", 'the body must have exactly one member, "text" or "message"')
        ]
    )
