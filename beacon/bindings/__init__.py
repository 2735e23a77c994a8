"""
One module per binding, each adapting a transport to the protocol core:
C{http} (discovery, the A2A JSON-RPC and HTTP+JSON bindings) and C{limits} (body caps,
per-source rate limiting). Bindings know the protocol core and a handler
interface, never the store.
"""
