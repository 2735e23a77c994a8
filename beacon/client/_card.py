"""
Agent cards (A2A 1.0 §8, digest §1.8) as typed, frozen objects.

Everything a card says is kept: each object has the fields A2A 1.0 names,
typed, plus C{extra}, the members this client does not know (a newer minor
version's, an extension's, a 0.3 server's legacy fields), as sent. The whole
document is kept as C{raw} on L{AgentCard}.

What is checked (L{parse_card}, raising L{InvalidCard}): the card is a JSON
object; C{name} is a non-empty string; C{supportedInterfaces} is a non-empty
list whose entries have string C{url} and C{protocolBinding} (and, when
present, string C{protocolVersion} and C{tenant}); every known member has
its type (strings, booleans, lists of strings, objects); skills have C{id}
and C{name}. ProtoJSON leaves out fields at their default value (an empty
string or list: the a2a-sdk drops an empty C{skills}), so a required string
or list that is absent reads as empty rather than failing; a member of the
wrong type always fails.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from beacon.client._errors import InvalidCard, UnverifiedCard
from beacon.signing import CardSignatureError, VerificationKey, verify_card

#: Where a card lives below an agent's base URL (RFC 8615).
WELL_KNOWN_CARD = "/.well-known/agent-card.json"



def _empty() -> Mapping[str, Any]:
    return MappingProxyType({})


@dataclass(frozen=True)
class AgentInterface:
    """One entry of C{supportedInterfaces}: where and how to reach the agent."""

    url: str
    protocol_binding: str
    protocol_version: str
    tenant: str | None = None
    extra: Mapping[str, Any] = field(default_factory=_empty)


@dataclass(frozen=True)
class AgentProvider:
    """Who runs the agent."""

    organization: str
    url: str
    extra: Mapping[str, Any] = field(default_factory=_empty)


@dataclass(frozen=True)
class AgentExtension:
    """An extension the agent supports (C{capabilities.extensions[]})."""

    uri: str
    description: str = ""
    required: bool = False
    params: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] = field(default_factory=_empty)


@dataclass(frozen=True)
class AgentCapabilities:
    """What the agent offers beyond the unary methods; absent flags are false."""

    streaming: bool = False
    push_notifications: bool = False
    extended_agent_card: bool = False
    extensions: tuple[AgentExtension, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=_empty)


@dataclass(frozen=True)
class AgentSkill:
    """One skill the card advertises."""

    id: str
    name: str
    description: str = ""
    tags: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()
    input_modes: tuple[str, ...] = ()
    output_modes: tuple[str, ...] = ()
    security_requirements: tuple[Mapping[str, Any], ...] = ()
    extra: Mapping[str, Any] = field(default_factory=_empty)


@dataclass(frozen=True)
class SecurityScheme:
    """
    One entry of C{securitySchemes}: its C{kind} is the oneof member set
    (C{httpAuthSecurityScheme}, C{apiKeySecurityScheme},
    C{oauth2SecurityScheme}, C{openIdConnectSecurityScheme},
    C{mtlsSecurityScheme}, or one this client does not know) and
    C{details} its object, as sent.
    """

    name: str
    kind: str
    details: Mapping[str, Any] = field(default_factory=_empty)

    @property
    def description(self) -> str:
        """The scheme's description, if it has one."""
        value = self.details.get("description")
        return value if isinstance(value, str) else ""

    def summary(self) -> str:
        """A few words: C{http Bearer}, C{apiKey header X-API-Key} ..."""
        d = self.details
        if self.kind == "httpAuthSecurityScheme":
            return f"http {d.get('scheme', '')}".strip()
        if self.kind == "apiKeySecurityScheme":
            return f"apiKey {d.get('location', '')} {d.get('name', '')}".strip()
        if self.kind == "oauth2SecurityScheme":
            flows = d.get("flows")
            return "oauth2 " + ", ".join(flows) if isinstance(flows, dict) else "oauth2"
        if self.kind == "openIdConnectSecurityScheme":
            return f"openIdConnect {d.get('openIdConnectUrl', '')}".strip()
        if self.kind == "mtlsSecurityScheme":
            return "mtls"
        return self.kind


@dataclass(frozen=True)
class AgentCard:
    """A parsed agent card; C{raw} is the document as received."""

    name: str
    description: str
    version: str
    supported_interfaces: tuple[AgentInterface, ...]
    capabilities: AgentCapabilities
    default_input_modes: tuple[str, ...]
    default_output_modes: tuple[str, ...]
    skills: tuple[AgentSkill, ...]
    provider: AgentProvider | None = None
    documentation_url: str | None = None
    icon_url: str | None = None
    security_schemes: Mapping[str, SecurityScheme] = field(default_factory=_empty)
    security_requirements: tuple[Mapping[str, Any], ...] = ()
    signatures: tuple[Mapping[str, Any], ...] = ()
    extra: Mapping[str, Any] = field(default_factory=_empty)
    raw: Mapping[str, Any] = field(default_factory=_empty, repr=False, compare=False)


def card_url(url: str) -> str:
    """
    The card's URL for C{url}: C{url} itself when it names a C{.json}
    document, else C{url}'s C{/.well-known/agent-card.json}.
    """
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.path.endswith(".json"):
        return url
    return parts._replace(
        path=parts.path.rstrip("/") + WELL_KNOWN_CARD, query="", fragment=""
    ).geturl()


class _Reader:
    """Reads one JSON object's members, checking types; remembers the rest."""

    def __init__(self, url: str, where: str, value: Any) -> None:
        if not isinstance(value, dict):
            raise InvalidCard(url, f"{where or 'the card'} is not a JSON object")
        self.url = url
        self.where = where
        self.value = value
        self.known: set[str] = set()

    def _path(self, name: str) -> str:
        return f"{self.where}.{name}" if self.where else name

    def _fail(self, name: str, what: str) -> InvalidCard:
        return InvalidCard(self.url, f"{self._path(name)} {what}")

    def string(self, name: str, *, required: bool = False) -> str | None:
        self.known.add(name)
        value = self.value.get(name)
        if value is None:
            if required:
                raise self._fail(name, "is missing")
            return None
        if not isinstance(value, str):
            raise self._fail(name, "is not a string")
        if required and not value:
            raise self._fail(name, "is empty")
        return value

    def boolean(self, name: str) -> bool:
        self.known.add(name)
        value = self.value.get(name)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise self._fail(name, "is not a boolean")
        return value

    def strings(self, name: str) -> tuple[str, ...]:
        items = self.items(name)
        for index, item in enumerate(items):
            if not isinstance(item, str):
                raise self._fail(f"{name}[{index}]", "is not a string")
        return tuple(items)

    def items(self, name: str) -> list[Any]:
        self.known.add(name)
        value = self.value.get(name)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self._fail(name, "is not a list")
        return value

    def objects(self, name: str) -> tuple[Mapping[str, Any], ...]:
        items = self.items(name)
        for index, item in enumerate(items):
            if not isinstance(item, dict):
                raise self._fail(f"{name}[{index}]", "is not a JSON object")
        return tuple(MappingProxyType(item) for item in items)

    def object(self, name: str) -> dict[str, Any] | None:
        self.known.add(name)
        value = self.value.get(name)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self._fail(name, "is not a JSON object")
        return value

    def child(self, name: str, value: Any) -> _Reader:
        return _Reader(self.url, self._path(name), value)

    def extra(self) -> Mapping[str, Any]:
        return MappingProxyType({k: v for k, v in self.value.items() if k not in self.known})


def _interface(r: _Reader) -> AgentInterface:
    url = r.string("url", required=True)
    binding = r.string("protocolBinding", required=True)
    assert url is not None and binding is not None
    return AgentInterface(
        url=url,
        protocol_binding=binding,
        protocol_version=r.string("protocolVersion") or "",
        tenant=r.string("tenant") or None,
        extra=r.extra(),
    )


def _frozen(value: dict[str, Any] | None) -> Mapping[str, Any] | None:
    return MappingProxyType(value) if value is not None else None


def _extension(r: _Reader) -> AgentExtension:
    return AgentExtension(
        uri=r.string("uri") or "",
        description=r.string("description") or "",
        required=r.boolean("required"),
        params=_frozen(r.object("params")),
        extra=r.extra(),
    )


def _capabilities(r: _Reader) -> AgentCapabilities:
    extensions = tuple(
        _extension(r.child(f"extensions[{i}]", item)) for i, item in enumerate(r.items("extensions"))
    )
    return AgentCapabilities(
        streaming=r.boolean("streaming"),
        push_notifications=r.boolean("pushNotifications"),
        extended_agent_card=r.boolean("extendedAgentCard"),
        extensions=extensions,
        extra=r.extra(),
    )


def _skill(r: _Reader) -> AgentSkill:
    skill_id = r.string("id", required=True)
    name = r.string("name", required=True)
    assert skill_id is not None and name is not None
    return AgentSkill(
        id=skill_id,
        name=name,
        description=r.string("description") or "",
        tags=r.strings("tags"),
        examples=r.strings("examples"),
        input_modes=r.strings("inputModes"),
        output_modes=r.strings("outputModes"),
        security_requirements=r.objects("securityRequirements"),
        extra=r.extra(),
    )


def _scheme(r: _Reader, name: str) -> SecurityScheme:
    members = [k for k, v in r.value.items()]
    if len(members) != 1:
        raise InvalidCard(r.url, f"{r.where} does not hold exactly one scheme")
    kind = members[0]
    details = r.object(kind)
    return SecurityScheme(name=name, kind=kind, details=MappingProxyType(details or {}))


def parse_card(document: Any, url: str = "the card") -> AgentCard:
    """
    Parse an agent card (decoded JSON) into an L{AgentCard}.

    @param url: Where it came from, for error messages.
    @raise InvalidCard: It is not an A2A 1.0 card.
    """
    r = _Reader(url, "", document)
    name = r.string("name", required=True)
    assert name is not None
    raw_interfaces = r.items("supportedInterfaces")
    if not raw_interfaces:
        hint = " (an A2A 0.3 card?)" if "url" in document or "preferredTransport" in document else ""
        raise InvalidCard(url, f"supportedInterfaces is missing or empty{hint}")
    interfaces = tuple(
        _interface(r.child(f"supportedInterfaces[{i}]", item)) for i, item in enumerate(raw_interfaces)
    )
    capabilities_value = r.object("capabilities")
    capabilities = _capabilities(r.child("capabilities", capabilities_value or {}))
    skills = tuple(_skill(r.child(f"skills[{i}]", item)) for i, item in enumerate(r.items("skills")))
    provider_value = r.object("provider")
    provider = None
    if provider_value is not None:
        p = r.child("provider", provider_value)
        provider = AgentProvider(
            organization=p.string("organization") or "", url=p.string("url") or "", extra=p.extra()
        )
    schemes_value = r.object("securitySchemes") or {}
    schemes = {
        key: _scheme(r.child(f"securitySchemes.{key}", value), key)
        for key, value in schemes_value.items()
    }
    return AgentCard(
        name=name,
        description=r.string("description") or "",
        version=r.string("version") or "",
        supported_interfaces=interfaces,
        capabilities=capabilities,
        default_input_modes=r.strings("defaultInputModes"),
        default_output_modes=r.strings("defaultOutputModes"),
        skills=skills,
        provider=provider,
        documentation_url=r.string("documentationUrl"),
        icon_url=r.string("iconUrl"),
        security_schemes=MappingProxyType(schemes),
        security_requirements=r.objects("securityRequirements"),
        signatures=r.objects("signatures"),
        extra=r.extra(),
        raw=MappingProxyType(document),
    )


def check_card_signature(
    card: AgentCard, keys: Sequence[VerificationKey], url: str = "the card"
) -> VerificationKey:
    """
    Check that C{card} is signed by one of C{keys} (A2A 1.0 §8.4; read
    them with L{beacon.signing.load_verification_keys}): one valid
    signature suffices, over the card as the official SDK canonicalises it
    or as the specification does.

    @return: The key that verified it (its C{kid} names it).
    @raise UnverifiedCard: It is unsigned, or no signature is valid under
        any of C{keys}.
    """
    try:
        return verify_card(card.raw, keys)
    except CardSignatureError as e:
        raise UnverifiedCard(url, str(e)) from None
