"""
JSON-RPC 2.0 envelopes for A2A 1.0, and strict JSON.

Strict JSON here means: UTF-8 only, no lone surrogates, no C{NaN}/C{Infinity}
and no number that overflows or is longer than L{MAX_NUMBER_LENGTH}
characters, no duplicate object keys (an ambiguous document is refused, not
guessed at), and nesting no deeper than the parser's recursion allows.
Anything else is a C{-32700} parse error. Batches are not part of A2A and
are refused with C{-32600}.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Callable

from beacon.protocol._errors import (
    A2AError,
    InvalidRequestError,
    JSONParseError,
    error_object,
)

#: The longest string request id echoed back (the one echo JSON-RPC requires).
MAX_REQUEST_ID_LENGTH = 128
#: Numeric ids must be integers within the range JSON numbers keep exactly.
MAX_NUMERIC_ID = 2**53

RequestId = str | int | None

#: A request id that could not be read: JSON-RPC answers such errors with null.
NO_ID: RequestId = None


# Not frozen, as it is made for every request: see beacon.protocol.types.Part.
@dataclass(slots=True)
class RPCRequest:
    """
    A well-formed JSON-RPC 2.0 request.

    @ivar id: The request id (a bounded string, an integer or None).
    @ivar notification: True when the request had no C{id} member: it is
        run but never answered.
    """

    id: RequestId
    method: str
    params: Any
    notification: bool


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise _DuplicateKey("duplicate key in object")
    return result


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


#: The longest number literal read; longer ones are refused rather than
#: converted (a huge integer costs quadratic time, a huge float overflows).
MAX_NUMBER_LENGTH = 64


def _parse_int(text: str) -> int:
    if len(text) > MAX_NUMBER_LENGTH:
        raise ValueError("number too long")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text) if len(text) <= MAX_NUMBER_LENGTH else math.inf
    if not math.isfinite(value):
        raise ValueError("number out of range")
    return value


_decoder = json.JSONDecoder(
    object_pairs_hook=_no_duplicates,
    parse_constant=_no_constant,
    parse_int=_parse_int,
    parse_float=_parse_float,
)


def loads(body: bytes) -> Any:
    """
    Parse C{body} as strict JSON.

    @raise JSONParseError: For anything that is not one strict JSON document.
    """
    try:
        text = body.decode("utf-8")
        value = _decoder.decode(text)
        # json.loads accepts lone surrogate escapes; they cannot be stored as
        # UTF-8, so refuse them here rather than fail later. The strict UTF-8
        # decoding above refuses raw surrogates, so only a document with a
        # surrogate escape needs the walk.
        if _SURROGATE_ESCAPE.search(text) is not None:
            _check_encodable(value)
        return value
    except (ValueError, RecursionError, UnicodeError):
        raise JSONParseError() from None


#: A JSON escape of a UTF-16 surrogate (paired or not), the only way a
#: surrogate gets into a decoded document.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")


def _check_encodable(value: Any) -> None:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            item.encode("utf-8")
        elif isinstance(item, dict):
            for key, child in item.items():
                key.encode("utf-8")
                stack.append(child)
        elif isinstance(item, list):
            stack.extend(item)


def compact_encoder(*, sort_keys: bool = False) -> Callable[[Any], str]:
    """
    A function serialising a JSON value (of dicts, lists, strings, numbers,
    booleans and None, without cycles) as compact JSON text: the text of
    C{json.dumps(value, ensure_ascii=False, separators=(",", ":"),
    sort_keys=sort_keys)}.

    It is made once, where C{JSONEncoder.encode} makes its C encoder again
    for every value (and a dict of markers to find cycles, which values
    built from parsed JSON cannot have): a third of its cost on an answer
    the size of a receipt. Without the C accelerator it is
    C{JSONEncoder.encode}.
    """
    encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=sort_keys)
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return encoder.encode
    iterencode = make(
        None,  # no markers: no cycle check
        encoder.default,
        json.encoder.encode_basestring,
        None,  # no indent
        ":",
        ",",
        sort_keys,
        False,  # skipkeys
        True,  # allow_nan, as JSONEncoder's default
    )

    def encode(value: Any) -> str:
        return "".join(iterencode(value, 0))

    return encode


class PreparedJSON(dict[str, Any]):
    """
    A JSON object that carries its own serialisation: a dict, read as any
    other, whose C{json} is the compact text L{dumps} would make of it.
    L{dumps} writes that text as it is, and L{success} puts it in the text
    of its envelope, rather than encoding the object again. Made by
    L{prepared} where an answer's shape is fixed (the receipt Task of a
    SendMessage), and never changed once made.

    @ivar json: The object's compact JSON text, as L{dumps} makes it.
    """

    __slots__ = ("json",)
    json: str


def prepared(value: dict[str, Any], text: str) -> PreparedJSON:
    """The L{PreparedJSON} of C{value}, whose JSON text is C{text}."""
    # Made by dict's own constructor: an __init__ of its own, calling
    # super(), cost ~3,000 instructions more per object.
    made = PreparedJSON(value)
    made.json = text
    return made


def dumps(value: Any) -> bytes:
    """
    Serialise C{value} as compact UTF-8 JSON (a L{PreparedJSON} as its text).
    """
    if type(value) is PreparedJSON:
        return value.json.encode("utf-8")
    return _encode(value).encode("utf-8")


_encode = compact_encoder()


def _read_id(envelope: dict[str, Any]) -> RequestId:
    request_id = envelope.get("id")
    if request_id is None:
        return None
    if isinstance(request_id, bool):
        raise InvalidRequestError("id must be a string, a number or null")
    if isinstance(request_id, str):
        if len(request_id) > MAX_REQUEST_ID_LENGTH:
            raise InvalidRequestError(
                f"id must be at most {MAX_REQUEST_ID_LENGTH} characters"
            )
        return request_id
    if isinstance(request_id, int) and abs(request_id) <= MAX_NUMERIC_ID:
        return request_id
    raise InvalidRequestError("id must be a string, an integer or null")


def parse_request(document: Any) -> RPCRequest:
    """
    Read a parsed JSON document as one JSON-RPC 2.0 request.

    @raise InvalidRequestError: For a batch, a non-object, a wrong
        C{jsonrpc}, a bad C{id} or a missing method. The error's
        C{request_id} attribute is the id to answer with (null when the id
        itself could not be read).
    """
    if isinstance(document, list):
        raise _with_id(InvalidRequestError("batch requests are not supported"), NO_ID)
    if not isinstance(document, dict):
        raise _with_id(InvalidRequestError("a request must be a JSON object"), NO_ID)
    try:
        request_id = _read_id(document)
    except InvalidRequestError as error:
        raise _with_id(error, NO_ID)
    if document.get("jsonrpc") != "2.0":
        raise _with_id(InvalidRequestError('jsonrpc must be "2.0"'), request_id)
    method = document.get("method")
    if not isinstance(method, str) or not method:
        raise _with_id(InvalidRequestError("method must be a string"), request_id)
    params = document.get("params")
    if params is not None and not isinstance(params, (dict, list)):
        raise _with_id(InvalidRequestError("params must be an object"), request_id)
    return RPCRequest(
        id=request_id, method=method, params=params, notification="id" not in document
    )


def _with_id(error: A2AError, request_id: RequestId) -> A2AError:
    error.request_id = request_id  # type: ignore[attr-defined]
    return error


def request_id_of(error: A2AError) -> RequestId:
    """
    The id to answer C{error} with: the one recorded while parsing, or null.
    """
    return getattr(error, "request_id", NO_ID)


def success(request_id: RequestId, result: Any) -> dict[str, Any]:
    """
    A JSON-RPC success response: a L{PreparedJSON} when C{result} is one
    (its text the envelope's around C{result}'s).
    """
    response = {"jsonrpc": "2.0", "id": request_id, "result": result}
    if type(result) is PreparedJSON:
        # An int's JSON is its str (saves the encoder's call, ~3,000
        # instructions); a string or null id is encoded.
        id_text = str(request_id) if type(request_id) is int else _encode(request_id)
        return prepared(response, f'{{"jsonrpc":"2.0","id":{id_text},"result":{result.json}}}')
    return response


def failure(request_id: RequestId, error: A2AError) -> dict[str, Any]:
    """A JSON-RPC error response carrying C{error}'s typed details."""
    return {"jsonrpc": "2.0", "id": request_id, "error": error_object(error)}
