"""
The bindings: each adapts a transport to the protocol core, in wings that
import the shared admission below them and never each other's private
modules:

  - C{admission}: what every binding checks before it parses a request
    and how it refuses (transport limits, credentials, rates, fair turns,
    refusals counted by reason, the transport edge);
  - C{http}: the public HTTP bindings (the agent card, A2A JSON-RPC,
    HTTP+JSON, native beacon/0.1) and Beacon's site with its direct
    channel;
  - C{websocket}: the A2A WebSocket binding;
  - C{grpc}: the A2A gRPC binding (imports grpcio: only where configured);
  - C{operator}: the operator's doors (the unix socket, the bearer door).

Bindings know the protocol core, the configuration's plain data and a
dispatcher, never the policies or the store.
"""
