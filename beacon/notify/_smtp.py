"""
The mail channel: a plain-text digest of each notification, sent to the
operator's addresses through Twisted's own ESMTP client
(L{twisted.mail.smtp.ESMTPSenderFactory}) over an endpoint: TCP with
STARTTLS when the server offers it (C{smtp://}), or TLS from the first byte
(C{smtps://}); the server's certificate is verified either way.

Only the configured addresses are ever written to: nothing in a submission
(its C{contact} entries included) becomes an address, a header or a
recipient. The digest's headers are Beacon's own words and the configured
addresses; submitted text appears only in the body, made inert.
"""

from __future__ import annotations

import email.policy
import functools
from collections.abc import Sequence
from datetime import datetime, timezone
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid
from io import BytesIO
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.endpoints import HostnameEndpoint, wrapClientTLS
from twisted.internet.interfaces import IReactorTCP, IReactorTime
from twisted.internet.protocol import connectionDone
from twisted.internet.ssl import Certificate, optionsForClientTLS, trustRootFromCertificates
from twisted.python.failure import Failure
from zope.interface import implementer

from beacon.notify._channel import INotificationChannel, NotificationFailed
from beacon.notify._summary import inert

#: How many characters of an id the digest's lines show: the millisecond of
#: receipt and 30 random bits, a prefix C{beacon review} takes.
SHORT_ID = 16
#: The longest subject shown on a digest line (longer ones are cut, "...").
SUBJECT_SHOWN = 120
#: The longest reason from a mail server kept for the log.
REASON_KEPT = 300

#: Lines end in "\n": Twisted's client turns them into CRLF (and stuffs
#: dots) as it sends.
_POLICY = email.policy.default.clone(linesep="\n", max_line_length=78)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _cut(text: str, room: int) -> str:
    return text if len(text) <= room else text[: room - 3] + "..."


def _content_lines(document: dict[str, Any]) -> list[str]:
    """A stored content document as the digest shows it, before indenting."""
    if "text" in document and isinstance(document["text"], str):
        return inert(document["text"], keep_lines=True).split("\n")
    message = document.get("message")
    if not isinstance(message, dict):
        return [inert(str(document))]
    lines = []
    found = message.get("from")
    sender: dict[str, Any] = found if isinstance(found, dict) else {}
    about = ", ".join(
        inert(str(sender[key])) for key in ("agent", "operator") if sender.get(key)
    )
    lines.append(
        f"From: {inert(str(sender.get('name', '')))}" + (f" ({about})" if about else "")
    )
    lines.append(f"Subject: {inert(str(message.get('subject', '')))}")
    if message.get("language"):
        lines.append(f"Language: {inert(str(message['language']))}")
    for contact in message.get("contact") or []:
        if isinstance(contact, dict):
            lines.append(
                f"Contact ({inert(str(contact.get('kind', '')))}): "
                f"{inert(str(contact.get('value', '')))}"
            )
    lines.append("")
    lines.extend(inert(str(message.get("body", "")), keep_lines=True).split("\n"))
    return lines


def digest_text(summary: dict[str, Any]) -> str:
    """
    The digest's body: one line per submission (short id, time of receipt,
    door, structured subject), then each content the summary carries, every
    submitted line indented and inert. No line begins with a dot.
    """
    count = summary["count"]
    lines = [f"{_plural(count, 'new submission')} to Beacon, oldest first."]
    if summary["pending"]:
        lines.append(
            f"{_plural(summary['pending'], 'more submission')} waiting: "
            "they come in the next notification."
        )
    lines.append("")
    for entry in summary["submissions"]:
        subject = entry.get("subject")
        shown = (
            _cut(inert(subject), SUBJECT_SHOWN)
            if subject is not None
            else f"({entry['kind']}, {_plural(entry['size'], 'byte')})"
        )
        lines.append(f"  {entry['id'][:SHORT_ID]}  {entry['received']}  {entry['door']}  {shown}")
    with_content = [entry for entry in summary["submissions"] if "content" in entry]
    for entry in with_content:
        lines += ["", f"Submission {entry['id']}:", ""]
        lines += [f"    {line}".rstrip() for line in _content_lines(entry["content"])]
    lines += ["", "Read and decide on them with `beacon review`.", ""]
    return "\n".join(lines)


def digest_message(
    summary: dict[str, Any], mail_from: str, mail_to: Sequence[str], now: float
) -> bytes:
    """
    The digest mail of C{summary}: From C{mail_from}, To C{mail_to},
    Subject "Beacon: N new submissions", Date C{now}, a Message-ID in
    C{mail_from}'s domain, C{Auto-Submitted: auto-generated}; a UTF-8
    plain-text body (L{digest_text}), quoted-printable.

    @raise ValueError: An address is not one a header may carry.
    """
    message = EmailMessage(policy=_POLICY)
    message["From"] = mail_from
    message["To"] = ", ".join(mail_to)
    message["Subject"] = f"Beacon: {_plural(summary['count'], 'new submission')}"
    message["Date"] = format_datetime(datetime.fromtimestamp(now, timezone.utc))
    message["Message-ID"] = make_msgid("beacon", mail_from.rpartition("@")[2] or None)
    message["Auto-Submitted"] = "auto-generated"
    message.set_content(digest_text(summary), charset="utf-8", cte="quoted-printable")
    return message.as_bytes()


def _reason(failure: Failure) -> str:
    """
    Why a send failed, in one inert line of bounded length: the server's
    last reply, never the session's transcript (which holds the
    credentials, base64-encoded, and the recipients).
    """
    from twisted.mail.smtp import SMTPClientError

    error = failure.value
    if isinstance(error, SMTPClientError):
        reply = error.resp.decode("utf-8", "replace") if isinstance(error.resp, bytes) else str(error.resp)
        text = f"{error.code} {reply}" if error.code != -1 else reply
    else:
        text = failure.getErrorMessage()
    return _cut(inert(" ".join(text.split())), REASON_KEPT)


@functools.lru_cache(maxsize=None)
def _sender_factory_class() -> Any:
    """
    Twisted's ESMTP sender factory as the mail channel uses it, made once:
    its protocol reports a connection lost before the message was accepted
    (over an endpoint, the factory's own C{clientConnectionLost} is never
    called) by failing the send's L{Deferred}, C{beacon_result}.

    Imported here, and so only when a mail channel is made (at start-up):
    C{twisted.mail.smtp} imports the global reactor, which a library must
    not install by being imported, and looks up this host's name.
    """
    from twisted.mail.smtp import ESMTPSender, ESMTPSenderFactory, SMTPConnectError

    class Sender(ESMTPSender):
        def connectionLost(self, reason: Failure = connectionDone) -> None:
            super().connectionLost(reason)
            result = self.factory.beacon_result
            if not result.called:
                result.errback(
                    SMTPConnectError(
                        -1,
                        "the connection to the mail server was lost: "
                        + reason.getErrorMessage(),
                    )
                )

    class DigestSenderFactory(ESMTPSenderFactory):
        protocol = Sender

    return DigestSenderFactory


def _sender_factory(
    username: bytes | None,
    password: bytes | None,
    mail_from: str,
    mail_to: Sequence[str],
    message: bytes,
    result: Deferred[Any],
    tls: Any,
) -> Any:
    """
    Twisted's ESMTP sender for one message: no retries (the notifier
    retries), no idle timer of its own (the notifier's timeout bounds the
    whole send, on its clock), STARTTLS when the server offers it,
    authentication when a user is given.
    """
    factory = _sender_factory_class()(
        username,
        password,
        mail_from,
        list(mail_to),
        BytesIO(message),
        result,
        retries=0,
        timeout=None,
        contextFactory=tls,
        requireAuthentication=username is not None,
        requireTransportSecurity=False,
    )
    factory.beacon_result = result
    return factory



def smtp_trust_root(certificates: Sequence[bytes]) -> Any:
    """
    What the mail server's certificate must chain to: the PEM
    C{certificates} (C{[notify] smtp_ca_file}), or, with none, the system's
    trust roots (L{None}).

    @raise ValueError: A certificate cannot be read.
    """
    if not certificates:
        return None
    try:
        loaded = [Certificate.loadPEM(pem) for pem in certificates]
    except Exception as e:
        raise ValueError(f"not a PEM certificate: {e}") from None
    return trustRootFromCertificates(loaded)


@implementer(INotificationChannel)
class SMTPChannel:
    """
    Mails a digest of each notification to C{mail_to} through one mail
    server.
    """

    name = "smtp"

    def __init__(
        self,
        reactor: IReactorTCP,
        clock: IReactorTime,
        host: str,
        port: int,
        *,
        tls: bool,
        mail_from: str,
        mail_to: Sequence[str],
        user: str | None = None,
        password: str | None = None,
        trust_root: Any = None,
        connect_timeout: float = 30.0,
    ) -> None:
        """
        @param reactor: Connects (it must also provide the interfaces a
            L{HostnameEndpoint} asks for: time, name resolution).
        @param clock: Dates the mail.
        @param host: The mail server's name or address.
        @param port: Its port.
        @param tls: TLS from the first byte (C{smtps://}); otherwise plain
            TCP, upgraded with STARTTLS whenever the server offers it.
        @param mail_from: The envelope and header sender.
        @param mail_to: The recipients (at least one).
        @param user: Authenticate as this user (with C{password}); the send
            fails if the server offers no authentication.
        @param password: The user's password.
        @param trust_root: What the server's certificate must chain to,
            as L{optionsForClientTLS} takes it (a
            L{twisted.internet.ssl.Certificate}, or
            L{twisted.internet.ssl.trustRootFromCertificates}); by default
            the platform's trust roots.
        @param connect_timeout: Seconds a TCP connection attempt may take.
        """
        if not mail_to:
            raise ValueError("a digest needs at least one recipient")
        if (user is None) != (password is None):
            raise ValueError("user and password go together")
        self._clock = clock
        self._mail_from = mail_from
        self._mail_to = tuple(mail_to)
        self._user = user
        self._password = password
        self._options = optionsForClientTLS(host, trust_root)
        endpoint: Any = HostnameEndpoint(reactor, host, port, timeout=connect_timeout)
        self._endpoint = wrapClientTLS(self._options, endpoint) if tls else endpoint
        self._sending: set[Deferred[None]] = set()
        _sender_factory_class()  # Twisted's SMTP client, loaded now

    def send(self, summary: dict[str, Any]) -> Deferred[None]:
        """
        Mail the digest of C{summary}.

        @return: Fires with None once the server accepted the message for
            at least one recipient; fails with L{NotificationFailed}.
            Cancelling it drops the connection.
        """
        message = digest_message(summary, self._mail_from, self._mail_to, self._clock.seconds())
        user = self._user.encode("utf-8") if self._user is not None else None
        password = self._password.encode("utf-8") if self._password is not None else None
        result: Deferred[Any] = Deferred()
        factory = _sender_factory(
            user, password, self._mail_from, self._mail_to, message, result, self._options
        )
        connecting = self._endpoint.connect(factory)

        cancelled = []

        def cancel(_: object) -> None:
            cancelled.append(True)
            factory.sendFinished = True
            connecting.cancel()
            protocol = factory.currentProtocol
            if protocol is not None and protocol.transport is not None:
                protocol.transport.abortConnection()

        def not_connected(failure: Failure) -> None:
            if not result.called:
                result.errback(failure)

        connecting.addErrback(not_connected)
        sent: Deferred[None] = Deferred(cancel)

        def done(outcome: object) -> None:
            self._sending.discard(sent)
            if cancelled or sent.called:
                return
            if isinstance(outcome, Failure):
                sent.errback(NotificationFailed(f"mail not sent: {_reason(outcome)}"))
            else:
                sent.callback(None)

        self._sending.add(sent)
        result.addBoth(done)
        return sent

    def stop(self) -> Deferred[None]:
        """Drop every connection still sending."""
        for sending in list(self._sending):
            sending.cancel()
        return succeed(None)
