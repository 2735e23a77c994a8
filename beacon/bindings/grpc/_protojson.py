"""
ProtoJSON objects (the dispatcher's answers) into protobuf messages, as
C{google.protobuf.json_format.ParseDict} builds them, at a fraction of its
cost: the setters of each message type are worked out once, from its
descriptor, and then run as plain attribute writes.

What it takes: JSON names; strings, enums by name, booleans, integers and
doubles of the exact JSON types; nested and repeated messages; Struct,
Value and ListValue; Timestamp and Duration as strings. Anything else (a
null, an unknown key, a map, bytes, a float32, an enum by number, a second
member of a oneof, a value of another type, another well-known type, a
nesting over L{MAX_DEPTH}) is left to C{ParseDict} for the whole message,
which builds it or raises its C{ParseError} as it always has: what this
module builds is, field for field, what C{ParseDict} builds.

The other way, L{to_json} reads a request message into the ProtoJSON
object C{json_format.MessageToDict} makes of it, leaving to
C{MessageToDict} any message it does not read whole.
"""

from __future__ import annotations

import datetime
import math
import re
from typing import Any, Callable

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from beacon.protocol import PreparedJSON

#: Nesting (messages, Struct and Value levels) beyond which ParseDict
#: decides (its own limit is 100).
MAX_DEPTH = 32

#: Surrogate code points: ParseDict refuses unpaired ones; any is left to it.
_SURROGATE = re.compile("[\ud800-\udfff]")

_Fill = Callable[[Message, Any, int], None]
_Setter = Callable[[Message, Any, int], None]


class Declined(Exception):
    """A value this module leaves to ParseDict."""


def parse(value: Any, message: Message) -> Message:
    """
    Fill C{message} (fresh, as its class makes it) from the ProtoJSON
    object C{value}, as C{json_format.ParseDict(value, message)} does.

    @return: The message filled: C{message}, or a fresh one of its class
        filled by C{ParseDict}.
    @raise json_format.ParseError: C{value} is not such a message
        (C{ParseDict}'s error).
    """
    try:
        fill(message, value)
        return message
    except Exception:
        # ParseDict decides, on a message nothing has been written to.
        fresh = type(message)()
        json_format.ParseDict(value, fresh)
        return fresh


def fill(message: Message, value: Any) -> None:
    """
    Fill C{message} from C{value} here, without C{ParseDict}.

    @raise Declined: C{value} is left to C{ParseDict} (C{message} may be
        part written).
    @raise Exception: Whatever protobuf raises for a value out of range.
    """
    _filler(message.DESCRIPTOR)(message, value, 0)


def _decline(*_: Any) -> None:
    raise Declined()


# Scalars: each returns the value to set, or declines.


def _string(value: Any) -> str:
    if type(value) is not str or (not value.isascii() and _SURROGATE.search(value)):
        raise Declined()
    return value


def _boolean(value: Any) -> bool:
    if type(value) is not bool:
        raise Declined()
    return value


def _integer(value: Any) -> int:
    if type(value) is not int:
        raise Declined()
    return value


def _double(value: Any) -> float:
    if type(value) is int:
        return float(value)
    if type(value) is not float or not math.isfinite(value):
        raise Declined()
    return value


def _enum(field: FieldDescriptor) -> Callable[[Any], int]:
    numbers: dict[str, int] = {
        name: value.number for name, value in field.enum_type.values_by_name.items()
    }

    def convert(value: Any) -> int:
        if type(value) is not str or value not in numbers:
            raise Declined()
        return numbers[value]

    return convert


_INTEGERS = {
    FieldDescriptor.CPPTYPE_INT32,
    FieldDescriptor.CPPTYPE_INT64,
    FieldDescriptor.CPPTYPE_UINT32,
    FieldDescriptor.CPPTYPE_UINT64,
}


def _scalar(field: FieldDescriptor) -> Callable[[Any], Any] | None:
    """The conversion of a scalar field's value; None when it is left to ParseDict."""
    kind = field.cpp_type
    if kind == FieldDescriptor.CPPTYPE_STRING:
        return _string if field.type == FieldDescriptor.TYPE_STRING else None
    if kind == FieldDescriptor.CPPTYPE_BOOL:
        return _boolean
    if kind in _INTEGERS:
        return _integer
    if kind == FieldDescriptor.CPPTYPE_DOUBLE:
        return _double
    if kind == FieldDescriptor.CPPTYPE_ENUM:
        if field.enum_type.full_name == "google.protobuf.NullValue":
            return None
        return _enum(field)
    return None  # float32, and anything new


# The well-known types.


def _struct(message: Any, value: Any, depth: int) -> None:
    if (type(value) is not dict and type(value) is not PreparedJSON) or depth > MAX_DEPTH:
        raise Declined()
    # As ParseDict: cleared, so that an empty one is present.
    message.Clear()
    fields = message.fields
    for key, item in value.items():
        _value(fields[key], item, depth + 1)


def _list(message: Any, value: Any, depth: int) -> None:
    if type(value) is not list and type(value) is not tuple or depth > MAX_DEPTH:
        raise Declined()
    message.ClearField("values")
    values = message.values
    for item in value:
        _value(values.add(), item, depth + 1)


def _value(message: Any, value: Any, depth: int) -> None:
    kind = type(value)
    if kind is dict or kind is PreparedJSON:
        _struct(message.struct_value, value, depth + 1)
    elif kind is list or kind is tuple:
        _list(message.list_value, value, depth + 1)
    elif value is None:
        message.null_value = 0
    elif kind is bool:
        message.bool_value = value
    elif kind is str:
        message.string_value = _string(value)
    elif kind is int or kind is float:
        message.number_value = value
    else:
        raise Declined()


def _from_string(message: Any, value: Any, depth: int) -> None:
    if type(value) is not str:
        raise Declined()
    message.FromJsonString(value)


#: A Timestamp in UTC as the dispatcher writes them; other forms are read
#: by C{Timestamp.FromJsonString}.
_UTC = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?Z\Z")
_EPOCH = datetime.datetime(1970, 1, 1)


#: Timestamps read lately (answers made in one millisecond share theirs):
#: their seconds and nanos, at most L{_TIMES_KEPT}.
_times: dict[str, tuple[int, int]] = {}
_TIMES_KEPT = 64


def _timestamp(message: Any, value: Any, depth: int) -> None:
    """As C{Timestamp.FromJsonString}, without its C{strptime}."""
    known = _times.get(value) if type(value) is str else None
    if known is not None:
        message.seconds, message.nanos = known
        return
    match = _UTC.match(value) if type(value) is str else None
    if match is None:
        _from_string(message, value, depth)
        return
    year, month, day, hour, minute, second, fraction = match.groups()
    # Out of range (a 13th month, a 60th second): datetime refuses, and
    # so FromJsonString decides.
    since = datetime.datetime(
        int(year), int(month), int(day), int(hour), int(minute), int(second)
    ) - _EPOCH
    seconds = since.days * 86400 + since.seconds
    nanos = round(float("0." + fraction) * 1e9) if fraction else 0
    message.seconds = seconds
    message.nanos = nanos
    if len(_times) >= _TIMES_KEPT:
        _times.clear()
    _times[value] = (seconds, nanos)


_KNOWN: dict[str, _Fill] = {
    "google.protobuf.Struct": _struct,
    "google.protobuf.Value": _value,
    "google.protobuf.ListValue": _list,
    "google.protobuf.Timestamp": _timestamp,
    "google.protobuf.Duration": _from_string,
}
#: Well-known types with a JSON form of their own, left to ParseDict.
_DECLINED = {"google.protobuf.Any", "google.protobuf.FieldMask"}

_fillers: dict[str, _Fill] = {}


def _filler(descriptor: Descriptor) -> _Fill:
    """How to fill a message of C{descriptor}'s type from its ProtoJSON value."""
    name = descriptor.full_name
    fill = _fillers.get(name)
    if fill is None:
        if name in _KNOWN:
            fill = _KNOWN[name]
        elif name in _DECLINED or descriptor.file.name == "google/protobuf/wrappers.proto":
            fill = _decline
        else:
            fill = _regular(descriptor)
        _fillers[name] = fill
    return fill


def _regular(descriptor: Descriptor) -> _Fill:
    setters: dict[str, tuple[str | None, _Setter]] = {}
    for field in descriptor.fields:
        oneof = field.containing_oneof.name if field.containing_oneof is not None else None
        setters[field.json_name] = (oneof, _setter(field))

    def fill(message: Message, value: Any, depth: int) -> None:
        if (type(value) is not dict and type(value) is not PreparedJSON) or depth > MAX_DEPTH:
            raise Declined()
        chosen: set[str] = set()
        for key, item in value.items():
            oneof, setter = setters.get(key, (None, _decline))
            if item is None:
                raise Declined()
            if oneof is not None:
                if oneof in chosen:
                    raise Declined()
                chosen.add(oneof)
            setter(message, item, depth)

    return fill


def _setter(field: FieldDescriptor) -> _Setter:
    """How to set C{field} of a message from its ProtoJSON value."""
    name = field.name
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        return _decline
    if field.cpp_type == FieldDescriptor.CPPTYPE_MESSAGE:
        message_type = field.message_type

        def fill(message: Message, value: Any, depth: int) -> None:
            # Looked up at the first call: a message may hold its own type.
            _filler(message_type)(message, value, depth)

        if field.is_repeated:

            def add(message: Message, value: Any, depth: int) -> None:
                if type(value) is not list and type(value) is not tuple:
                    raise Declined()
                container = getattr(message, name)
                for item in value:
                    if item is None:
                        raise Declined()
                    fill(container.add(), item, depth + 1)

            return add

        def set_message(message: Message, value: Any, depth: int) -> None:
            sub = getattr(message, name)
            sub.SetInParent()
            fill(sub, value, depth + 1)

        return set_message
    convert = _scalar(field)
    if convert is None:
        return _decline
    if field.is_repeated:

        def extend(message: Message, value: Any, depth: int) -> None:
            if type(value) is not list and type(value) is not tuple:
                raise Declined()
            getattr(message, name).extend([convert(item) for item in value])

        return extend

    def set_scalar(message: Message, value: Any, depth: int) -> None:
        setattr(message, name, convert(value))

    return set_scalar


# The other way: a message as its ProtoJSON object (a request's params).

_Read = Callable[[Any], Any]
_readers: dict[str, Callable[[Message], dict[str, Any]]] = {}
_field_readers: dict[FieldDescriptor, _Read] = {}


def to_json(message: Message) -> dict[str, Any]:
    """
    C{message} as its ProtoJSON object, as C{json_format.MessageToDict}
    makes it (camelCase names, enums by name, unset fields left out), at a
    fraction of its cost: strings, booleans, 32-bit integers, finite
    doubles, enums and nested and repeated messages are read here; a
    message holding anything else (a well-known type, a map, bytes, a
    64-bit integer, a float32, an enum number without a name) is left to
    C{MessageToDict}, whole.
    """
    try:
        return _reader(message.DESCRIPTOR)(message)
    except Declined:
        made: dict[str, Any] = json_format.MessageToDict(message)
        return made


def _reader(descriptor: Descriptor) -> Callable[[Message], dict[str, Any]]:
    name = descriptor.full_name
    read = _readers.get(name)
    if read is None:
        if descriptor.file.name.startswith("google/protobuf/"):
            read = _decline_message
        else:
            read = _regular_reader()
        _readers[name] = read
    return read


def _decline_message(message: Message) -> dict[str, Any]:
    raise Declined()


def _regular_reader() -> Callable[[Message], dict[str, Any]]:
    def read(message: Message) -> dict[str, Any]:
        made: dict[str, Any] = {}
        for field, value in message.ListFields():
            reader = _field_readers.get(field)
            if reader is None:
                reader = _field_readers[field] = _field_reader(field)
            made[field.json_name] = reader(value)
        return made

    return read


_PLAIN = frozenset(
    (
        FieldDescriptor.TYPE_STRING,
        FieldDescriptor.TYPE_BOOL,
        FieldDescriptor.TYPE_INT32,
        FieldDescriptor.TYPE_UINT32,
        FieldDescriptor.TYPE_SINT32,
        FieldDescriptor.TYPE_FIXED32,
        FieldDescriptor.TYPE_SFIXED32,
    )
)


def _field_reader(field: FieldDescriptor) -> _Read:
    """How to read C{field}'s value (a repeated one: its container) as ProtoJSON."""
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        return _decline
    one: _Read
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        message_type = field.message_type

        def one(value: Any) -> Any:
            return _reader(message_type)(value)

    elif field.type == FieldDescriptor.TYPE_ENUM:
        names = {value.number: value.name for value in field.enum_type.values}

        def one(value: Any) -> Any:
            name = names.get(value)
            if name is None:
                raise Declined()
            return name

    elif field.type == FieldDescriptor.TYPE_DOUBLE:

        def one(value: Any) -> Any:
            if not math.isfinite(value):
                raise Declined()
            return value

    elif field.type in _PLAIN:
        if field.is_repeated:
            return list
        return _same
    else:
        return _decline
    if field.is_repeated:

        def each(values: Any) -> Any:
            return [one(value) for value in values]

        return each
    return one


def _same(value: Any) -> Any:
    return value
