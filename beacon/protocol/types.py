"""
The A2A 1.0 request messages as typed, frozen values, and their ProtoJSON
parsers.

Parsing follows ProtoJSON (ADR-001) as the specification asks: camelCase names
(snake_case accepted), enums by name (numbers accepted), unknown fields
ignored, REQUIRED fields enforced. A value that came as a URL query parameter
(the HTTP+JSON binding's GET requests) is a L{QueryText}, read as its field's
type as A2A §11.5 spells it. A request that does not parse raises
L{InvalidParamsError} whose C{BadRequest} detail names each failing field by
its path (never by its value: nothing submitted is echoed).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, TypeGuard, TypeVar

from beacon.protocol._errors import InvalidParamsError

T = TypeVar("T")

#: The A2A TaskState names (a2a.proto's TaskState), those Beacon's code
#: names on their own, and the terminal ones (a task in them never changes).
STATE_UNSPECIFIED = "TASK_STATE_UNSPECIFIED"
STATE_SUBMITTED = "TASK_STATE_SUBMITTED"
STATE_COMPLETED = "TASK_STATE_COMPLETED"
STATE_FAILED = "TASK_STATE_FAILED"
STATE_CANCELED = "TASK_STATE_CANCELED"
STATE_REJECTED = "TASK_STATE_REJECTED"
TASK_STATES = (
    STATE_UNSPECIFIED,
    STATE_SUBMITTED,
    "TASK_STATE_WORKING",
    STATE_COMPLETED,
    STATE_FAILED,
    STATE_CANCELED,
    "TASK_STATE_INPUT_REQUIRED",
    STATE_REJECTED,
    "TASK_STATE_AUTH_REQUIRED",
)
TERMINAL_STATES = frozenset({STATE_COMPLETED, STATE_FAILED, STATE_CANCELED, STATE_REJECTED})
ROLES = ("ROLE_UNSPECIFIED", "ROLE_USER", "ROLE_AGENT")

#: Longest identifier (task id, message id, context id) accepted.
MAX_ID_LENGTH = 256

_INT32_MAX = 2**31 - 1
_TIMESTAMP = re.compile(
    r"\A(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?Z\Z"
)


# Made for every request, so not frozen: a frozen dataclass's __init__ sets
# each field through object.__setattr__, ~1,300 instructions a field (36,000
# of a SendMessage for its request's types, RPCRequest, CallContext and
# Content: bench/inprocess.py send --callgrind, 427,787 -> 391,763 per
# request). Nothing changes them once made.
@dataclass(slots=True)
class Part:
    """
    One part of a message: exactly one of C{text}, C{raw}, C{url}, C{data}.

    @ivar content: Which member is present: C{"text"}, C{"raw"}, C{"url"} or
        C{"data"}.
    @ivar value: That member's value (C{str} for text/raw/url, any JSON
        value for data).
    """

    content: str
    value: Any
    media_type: str = ""
    filename: str = ""
    metadata: dict[str, Any] | None = None


# Not frozen, as it is made for every request: see Part.
@dataclass(slots=True)
class Message:
    """A2A C{Message}."""

    message_id: str
    role: str
    parts: tuple[Part, ...]
    context_id: str = ""
    task_id: str = ""
    metadata: dict[str, Any] | None = None
    extensions: tuple[str, ...] = ()
    reference_task_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class AuthenticationInfo:
    """A2A C{AuthenticationInfo}."""

    scheme: str
    credentials: str = ""


@dataclass(frozen=True)
class TaskPushNotificationConfig:
    """A2A C{TaskPushNotificationConfig}."""

    url: str
    id: str = ""
    task_id: str = ""
    token: str = ""
    authentication: AuthenticationInfo | None = None
    tenant: str = ""


@dataclass(frozen=True)
class SendMessageConfiguration:
    """A2A C{SendMessageConfiguration}."""

    accepted_output_modes: tuple[str, ...] = ()
    task_push_notification_config: TaskPushNotificationConfig | None = None
    history_length: int | None = None
    return_immediately: bool = False


# Not frozen, as it is made for every request: see Part.
@dataclass(slots=True)
class SendMessageRequest:
    """A2A C{SendMessageRequest}."""

    message: Message
    configuration: SendMessageConfiguration | None = None
    metadata: dict[str, Any] | None = None
    tenant: str = ""


# Not frozen, as it is made for every request: see Part.
@dataclass(slots=True)
class GetTaskRequest:
    """A2A C{GetTaskRequest}."""

    id: str
    history_length: int | None = None
    tenant: str = ""


@dataclass(frozen=True)
class ListTasksRequest:
    """A2A C{ListTasksRequest}."""

    context_id: str = ""
    status: str = "TASK_STATE_UNSPECIFIED"
    page_size: int | None = None
    page_token: str = ""
    history_length: int | None = None
    status_timestamp_after: datetime | None = None
    include_artifacts: bool | None = None
    tenant: str = ""


@dataclass(frozen=True)
class CancelTaskRequest:
    """A2A C{CancelTaskRequest}."""

    id: str
    metadata: dict[str, Any] | None = None
    tenant: str = ""


@dataclass(frozen=True)
class SubscribeToTaskRequest:
    """A2A C{SubscribeToTaskRequest}."""

    id: str
    tenant: str = ""


@dataclass(frozen=True)
class TaskPushNotificationConfigRequest:
    """
    A2A C{GetTaskPushNotificationConfigRequest} and
    C{DeleteTaskPushNotificationConfigRequest} (the same fields).
    """

    task_id: str
    id: str
    tenant: str = ""


@dataclass(frozen=True)
class ListTaskPushNotificationConfigsRequest:
    """A2A C{ListTaskPushNotificationConfigsRequest}."""

    task_id: str
    page_size: int | None = None
    page_token: str = ""
    tenant: str = ""


@dataclass(frozen=True)
class GetExtendedAgentCardRequest:
    """A2A C{GetExtendedAgentCardRequest}."""

    tenant: str = ""


class QueryText(str):
    """
    A request member that came as a URL query parameter (A2A §11.5), where
    every value is text: a boolean field reads it as C{true} or C{false}, a
    number field as decimal digits (as ProtoJSON's string form of a number),
    a repeated field as a comma-separated list; a member named more than
    once in the query is a list of them.
    """

    __slots__ = ()


def _snake(name: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name)


class ParamsReader:
    """
    Reads one ProtoJSON object, collecting every violation so that the error
    names all failing fields at once.

    @ivar obj: The object read.
    @ivar path: Where it is in the request (C{"message.parts[0]"}), for the
        violations.
    @ivar violations: The C{(field, description)} violations found so far
        (shared with the readers of the objects inside it).
    """

    __slots__ = ("obj", "path", "violations", "_aliased")

    def __init__(
        self,
        obj: dict[str, Any],
        path: str,
        violations: list[tuple[str, str]] | None = None,
    ) -> None:
        self.obj = obj
        self.path = path
        self.violations: list[tuple[str, str]] = [] if violations is None else violations
        # Whether a member may be spelled snake_case: only a name with an
        # underscore can be one, so an object without any (nearly every
        # request) needs no second look-up for the members it lacks.
        self._aliased = "_" in "".join(obj)

    def _where(self, name: str) -> str:
        if not name:
            return self.path
        return f"{self.path}.{name}" if self.path else name

    def fail(self, name: str, description: str) -> None:
        """
        Record that C{name} (a member of this object; empty: the object
        itself) violates C{description}, for the error that names them all;
        the readers of the requests' own objects (the policies') call it
        too.
        """
        self.violations.append((self._where(name), description))

    def raw(self, name: str) -> Any:
        """The value of C{name} (camelCase, or its snake_case alias), or None."""
        value = self.obj.get(name)
        if value is None and self._aliased:
            value = self.obj.get(_snake(name))
        return value

    def string(self, name: str, *, required: bool = False, limit: int = 0) -> str:
        value = self.raw(name)
        if value is None or value == "":
            if required:
                self.fail(name, "is required")
            return ""
        if not isinstance(value, str):
            self.fail(name, "must be a string")
            return ""
        if "\x00" in value:
            self.fail(name, "must not contain NUL")
            return ""
        if limit and len(value) > limit:
            self.fail(name, f"must be at most {limit} characters")
            return ""
        return value

    def boolean(self, name: str) -> bool | None:
        value = self.raw(name)
        if value is None:
            return None
        if isinstance(value, QueryText) and value in ("true", "false"):
            return value == "true"
        if not isinstance(value, bool):
            self.fail(name, "must be a boolean")
            return None
        return value

    def int32(self, name: str, *, minimum: int = -_INT32_MAX - 1) -> int | None:
        value = self.raw(name)
        if value is None:
            return None
        number: int | None = None
        if isinstance(value, bool):
            number = None
        elif isinstance(value, int):
            number = value
        elif isinstance(value, float) and value.is_integer():
            number = int(value)
        elif isinstance(value, str) and re.fullmatch(r"-?\d{1,10}", value):
            number = int(value)
        if number is None or not (-_INT32_MAX - 1 <= number <= _INT32_MAX):
            self.fail(name, "must be a 32-bit integer")
            return None
        if number < minimum:
            self.fail(name, f"must be at least {minimum}")
            return None
        return number

    def struct(self, name: str) -> dict[str, Any] | None:
        value = self.raw(name)
        if value is None:
            return None
        if not isinstance(value, dict):
            self.fail(name, "must be an object")
            return None
        return value

    def strings(self, name: str) -> tuple[str, ...]:
        value = self.raw(name)
        if value is None:
            return ()
        if isinstance(value, QueryText):
            value = [value]
        if isinstance(value, list) and value and all(isinstance(v, QueryText) for v in value):
            # Repeated names, each perhaps a comma list.
            value = [item for text in value for item in text.split(",")]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.fail(name, "must be a list of strings")
            return ()
        return tuple(value)

    def enum(self, name: str, names: tuple[str, ...]) -> str:
        value = self.raw(name)
        if value is None:
            return names[0]
        if isinstance(value, str) and value in names:
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            if 0 <= value < len(names):
                return names[value]
        self.fail(name, "is not a known enum value")
        return names[0]

    def timestamp(self, name: str) -> datetime | None:
        value = self.raw(name)
        if value is None:
            return None
        parsed = parse_timestamp(value) if isinstance(value, str) else None
        if parsed is None:
            self.fail(name, "must be an RFC 3339 UTC timestamp ending in Z")
        return parsed

    def child(self, name: str, *, required: bool = False) -> ParamsReader | None:
        value = self.raw(name)
        if value is None:
            if required:
                self.fail(name, "is required")
            return None
        if not isinstance(value, dict):
            self.fail(name, "must be an object")
            return None
        return ParamsReader(value, self._where(name), self.violations)

    def children(self, name: str, *, required: bool = False) -> list[ParamsReader]:
        value = self.raw(name)
        if value is None or value == []:
            if required:
                self.fail(name, "is required and must not be empty")
            return []
        if not isinstance(value, list):
            self.fail(name, "must be a list")
            return []
        readers = []
        for index, item in enumerate(value):
            where = f"{name}[{index}]"
            if not isinstance(item, dict):
                self.fail(where, "must be an object")
                continue
            readers.append(ParamsReader(item, self._where(where), self.violations))
        return readers


def parse_timestamp(text: str) -> datetime | None:
    """
    Parse an RFC 3339 UTC timestamp (C{Z} only, as ProtoJSON requires).

    @return: An aware datetime, or None when C{text} is not one.
    """
    match = _TIMESTAMP.match(text)
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    fraction = match.group(7) or ".0"
    micro = int((fraction[1:] + "000000")[:6])
    try:
        return datetime(year, month, day, hour, minute, second, micro, timezone.utc)
    except ValueError:
        return None


def format_timestamp(epoch_ms: int) -> str:
    """
    Format milliseconds since the epoch as RFC 3339 UTC with millisecond
    resolution, for example C{2026-11-30T04:29:55.123Z}.
    """
    seconds, millis = divmod(epoch_ms, 1000)
    return f"{_format_second(seconds)}.{millis:03d}Z"


@functools.lru_cache(maxsize=64)
def _format_second(seconds: int) -> str:
    # Receipts and status reads under load fall in a few seconds: each is
    # formatted once. The cache saves ~21,000 instructions per timestamp
    # (datetime.fromtimestamp and strftime), 4.2 % of send and 7.2 % of get
    # (501,611 against 522,827 and ~288,500 against 309,260 instructions per
    # request without it, bench/inprocess.py send and get --callgrind).
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


_PART_MEMBERS = ("text", "raw", "url", "data")


def _part(reader: ParamsReader) -> Part | None:
    present = [m for m in _PART_MEMBERS if m in reader.obj]
    if len(present) != 1:
        reader.fail("", "a part must have exactly one of text, raw, url or data")
        return None
    member = present[0]
    value = reader.obj[member]
    if member != "data" and not isinstance(value, str):
        reader.fail(member, "must be a string")
        return None
    if member != "data" and "\x00" in value:
        reader.fail(member, "must not contain NUL")
        return None
    return Part(
        content=member,
        value=value,
        media_type=reader.string("mediaType"),
        filename=reader.string("filename"),
        metadata=reader.struct("metadata"),
    )


def _message(reader: ParamsReader) -> Message:
    parts = [_part(r) for r in reader.children("parts", required=True)]
    role = reader.enum("role", ROLES)
    if role == "ROLE_UNSPECIFIED":
        reader.fail("role", "is required (ROLE_USER or ROLE_AGENT)")
    return Message(
        message_id=reader.string("messageId", required=True, limit=MAX_ID_LENGTH),
        role=role,
        parts=tuple(p for p in parts if p is not None),
        context_id=reader.string("contextId", limit=MAX_ID_LENGTH),
        task_id=reader.string("taskId", limit=MAX_ID_LENGTH),
        metadata=reader.struct("metadata"),
        extensions=reader.strings("extensions"),
        reference_task_ids=reader.strings("referenceTaskIds"),
    )


def _push_config(reader: ParamsReader) -> TaskPushNotificationConfig:
    auth = reader.child("authentication")
    return TaskPushNotificationConfig(
        url=reader.string("url", required=True),
        id=reader.string("id", limit=MAX_ID_LENGTH),
        task_id=reader.string("taskId", limit=MAX_ID_LENGTH),
        token=reader.string("token"),
        authentication=(
            AuthenticationInfo(
                scheme=auth.string("scheme", required=True),
                credentials=auth.string("credentials"),
            )
            if auth is not None
            else None
        ),
        tenant=reader.string("tenant"),
    )


#: What a SendMessageRequest without a message holds: the reader has recorded
#: the missing message, so the request is refused and this is never seen.
_NO_MESSAGE = Message(message_id="", role="", parts=())


def _send_message(reader: ParamsReader) -> SendMessageRequest:
    message = reader.child("message", required=True)
    config = reader.child("configuration")
    configuration = None
    if config is not None:
        push = config.child("taskPushNotificationConfig")
        configuration = SendMessageConfiguration(
            accepted_output_modes=config.strings("acceptedOutputModes"),
            task_push_notification_config=(
                _push_config(push) if push is not None else None
            ),
            history_length=config.int32("historyLength", minimum=0),
            return_immediately=bool(config.boolean("returnImmediately")),
        )
    return SendMessageRequest(
        message=_message(message) if message is not None else _NO_MESSAGE,
        configuration=configuration,
        metadata=reader.struct("metadata"),
        tenant=reader.string("tenant"),
    )


def _get_task(reader: ParamsReader) -> GetTaskRequest:
    return GetTaskRequest(
        id=reader.string("id", required=True, limit=MAX_ID_LENGTH),
        history_length=reader.int32("historyLength", minimum=0),
        tenant=reader.string("tenant"),
    )


def _list_tasks(reader: ParamsReader) -> ListTasksRequest:
    page_size = reader.int32("pageSize")
    if page_size is not None and not (1 <= page_size <= 100):
        reader.fail("pageSize", "must be between 1 and 100")
    return ListTasksRequest(
        context_id=reader.string("contextId", limit=MAX_ID_LENGTH),
        status=reader.enum("status", TASK_STATES),
        page_size=page_size,
        page_token=reader.string("pageToken", limit=1024),
        history_length=reader.int32("historyLength", minimum=0),
        status_timestamp_after=reader.timestamp("statusTimestampAfter"),
        include_artifacts=reader.boolean("includeArtifacts"),
        tenant=reader.string("tenant"),
    )


def _cancel_task(reader: ParamsReader) -> CancelTaskRequest:
    return CancelTaskRequest(
        id=reader.string("id", required=True, limit=MAX_ID_LENGTH),
        metadata=reader.struct("metadata"),
        tenant=reader.string("tenant"),
    )


def _subscribe(reader: ParamsReader) -> SubscribeToTaskRequest:
    return SubscribeToTaskRequest(
        id=reader.string("id", required=True, limit=MAX_ID_LENGTH),
        tenant=reader.string("tenant"),
    )


def _push_config_ref(reader: ParamsReader) -> TaskPushNotificationConfigRequest:
    return TaskPushNotificationConfigRequest(
        task_id=reader.string("taskId", required=True, limit=MAX_ID_LENGTH),
        id=reader.string("id", required=True, limit=MAX_ID_LENGTH),
        tenant=reader.string("tenant"),
    )


def _list_push_configs(reader: ParamsReader) -> ListTaskPushNotificationConfigsRequest:
    return ListTaskPushNotificationConfigsRequest(
        task_id=reader.string("taskId", required=True, limit=MAX_ID_LENGTH),
        page_size=reader.int32("pageSize", minimum=0),
        page_token=reader.string("pageToken", limit=1024),
        tenant=reader.string("tenant"),
    )


def _extended_card(reader: ParamsReader) -> GetExtendedAgentCardRequest:
    return GetExtendedAgentCardRequest(tenant=reader.string("tenant"))


def params_parser(
    build: Callable[[ParamsReader], T], plain: Callable[[dict[str, Any]], T | None] | None = None
) -> Callable[[Any], T]:
    """
    The parser of a request's params: C{build} reads them with a
    L{ParamsReader}, which raises L{InvalidParamsError} naming every
    violation.

    @param plain: Reads params of the one shape nearly every request of this
        kind has, or returns None: whatever it returns is what C{build}
        would make of the same params (a test holds the two together), at a
        fraction of the cost; anything else is read by C{build}.
    """

    def parse(params: Any) -> T:
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise InvalidParamsError(
                "params must be an object", field_violations=[("params", "must be an object")]
            )
        if plain is not None:
            read = plain(params)
            if read is not None:
                return read
        reader = ParamsReader(params, "")
        value = build(reader)
        if reader.violations:
            raise InvalidParamsError(field_violations=reader.violations)
        return value

    return parse


def _plain_id(value: Any) -> TypeGuard[str]:
    """Whether C{value} is an identifier L{ParamsReader.string} takes as it is."""
    return type(value) is str and 0 < len(value) <= MAX_ID_LENGTH and "\x00" not in value


#: The roles a plain message may name (ROLE_UNSPECIFIED is a violation).
_PLAIN_ROLES = frozenset(ROLES[1:])


def _plain_send_message(params: dict[str, Any]) -> SendMessageRequest | None:
    """
    The L{SendMessageRequest} of C{{"message": {"messageId": ..., "role":
    ..., "parts": [{"text": ...}, ...]}}} and nothing else (the members
    spelled so, each valid, every part a text), or None.
    """
    if len(params) != 1:
        return None
    message = params.get("message")
    if type(message) is not dict or len(message) != 3:
        return None
    message_id = message.get("messageId")
    role = message.get("role")
    parts = message.get("parts")
    if (
        not _plain_id(message_id)
        or type(role) is not str
        or role not in _PLAIN_ROLES
        or type(parts) is not list
        or not parts
    ):
        return None
    read = []
    for part in parts:
        if type(part) is not dict or len(part) != 1:
            return None
        text = part.get("text")
        if type(text) is not str or "\x00" in text:
            return None
        read.append(Part(content="text", value=text))
    return SendMessageRequest(
        message=Message(message_id=message_id, role=role, parts=tuple(read))
    )


def _plain_get_task(params: dict[str, Any]) -> GetTaskRequest | None:
    """The L{GetTaskRequest} of C{{"id": ...}} and nothing else, or None."""
    if len(params) != 1:
        return None
    task_id = params.get("id")
    return GetTaskRequest(id=task_id) if _plain_id(task_id) else None


parse_send_message = params_parser(_send_message, _plain_send_message)
parse_get_task = params_parser(_get_task, _plain_get_task)
parse_list_tasks = params_parser(_list_tasks)
parse_cancel_task = params_parser(_cancel_task)
parse_subscribe_to_task = params_parser(_subscribe)
parse_push_config = params_parser(_push_config)
parse_push_config_ref = params_parser(_push_config_ref)
parse_list_push_configs = params_parser(_list_push_configs)
parse_get_extended_card = params_parser(_extended_card)
