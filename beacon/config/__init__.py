"""
Beacon's configuration: one frozen, validated L{Config} made from the TOML
file (C{etc/beacon.toml} is the commented reference) and the command line,
which overrides the file.

Every value is checked in this package, once; unknown sections and keys are
errors, so a typo never silently falls back to a default.

The sections as data are in L{beacon.config._sections}, the reading of the
file in L{beacon.config._reading}, the checks of every value in
L{beacon.config._checks}; this module is their one public face.
"""

from __future__ import annotations

from beacon.config._checks import (
    check_url,
    grpc_address,
    validate,
)
from beacon.config._reading import (
    build_config,
    did_you_mean,
    read_file,
)
from beacon.config._sections import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_DATA_DIR,
    DEFAULT_FRAME_TIMEOUT,
    DEFAULT_GRPC_CALLS_PER_SOURCE,
    DEFAULT_GRPC_CONNECTION_AGE,
    DEFAULT_GRPC_GRACE,
    DEFAULT_GRPC_KEEPALIVE,
    DEFAULT_GRPC_WORKERS,
    DEFAULT_HANDSHAKE_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_HTTP,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_BODY,
    DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_MAX_MESSAGE,
    DEFAULT_NOTIFY_INTERVAL,
    DEFAULT_NOTIFY_TIMEOUT,
    DEFAULT_STREAM_QUEUE,
    DEFAULT_WS_IDLE_TIMEOUT,
    DEFAULT_WS_MAX_CONNECTIONS,
    DEFAULT_WS_MAX_CONNECTIONS_PER_SOURCE,
    GRPC_ENVELOPE,
    SMTP_PORTS,
    Auth,
    CardText,
    Config,
    ConfigError,
    GRPCOptions,
    Limits,
    Notify,
    SigningKeyOptions,
    WebSocketOptions,
)

__all__ = [
    "Auth",
    "CardText",
    "Config",
    "ConfigError",
    "DEFAULT_BODY_TIMEOUT",
    "DEFAULT_DATA_DIR",
    "DEFAULT_FRAME_TIMEOUT",
    "DEFAULT_GRPC_CALLS_PER_SOURCE",
    "DEFAULT_GRPC_CONNECTION_AGE",
    "DEFAULT_GRPC_GRACE",
    "DEFAULT_GRPC_KEEPALIVE",
    "DEFAULT_GRPC_WORKERS",
    "DEFAULT_HANDSHAKE_TIMEOUT",
    "DEFAULT_HEADER_TIMEOUT",
    "DEFAULT_HTTP",
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_BODY",
    "DEFAULT_MAX_IN_FLIGHT",
    "DEFAULT_MAX_MESSAGE",
    "DEFAULT_NOTIFY_INTERVAL",
    "DEFAULT_NOTIFY_TIMEOUT",
    "DEFAULT_STREAM_QUEUE",
    "DEFAULT_WS_IDLE_TIMEOUT",
    "DEFAULT_WS_MAX_CONNECTIONS",
    "DEFAULT_WS_MAX_CONNECTIONS_PER_SOURCE",
    "GRPCOptions",
    "GRPC_ENVELOPE",
    "Limits",
    "Notify",
    "SigningKeyOptions",
    "SMTP_PORTS",
    "WebSocketOptions",
    "build_config",
    "check_url",
    "did_you_mean",
    "grpc_address",
    "read_file",
    "validate",
]
