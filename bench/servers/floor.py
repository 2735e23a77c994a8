"""
The bare Twisted floor of the benchmark: twisted.web, json.loads of the
request body and json.dumps of a reply, nothing else (no validation, no
store, no logging). It shows what any Twisted JSON server pays before doing
any work, so Beacon/floor says how much of the budget Beacon's own work takes.

Run by bench/run with the project's .venv Python:

    python floor.py --port 9003

It answers like an A2A server only as far as the load scripts check: the card
at /.well-known/agent-card.json, and at /a2a/v1 a Task in
TASK_STATE_SUBMITTED for SendMessage and the asked-for Task for GetTask.
"""

from __future__ import annotations

import argparse
import json
import sys

from twisted.internet import reactor
from twisted.web.resource import Resource
from twisted.web.server import Site

RPC_PATH = b"/a2a/v1"


class Card(Resource):
    isLeaf = True

    def __init__(self, port: int) -> None:
        super().__init__()
        self._card = {
            "name": "bench-floor",
            "description": "A bare twisted.web JSON server.",
            "version": "1.0.0",
            "supportedInterfaces": [
                {
                    "url": f"http://127.0.0.1:{port}{RPC_PATH.decode()}",
                    "protocolBinding": "JSONRPC",
                    "protocolVersion": "1.0",
                }
            ],
            "capabilities": {},
            "defaultInputModes": ["text/plain"],
            "defaultOutputModes": ["application/json"],
            "skills": [],
        }

    def render_GET(self, request):  # type: ignore[no-untyped-def]
        request.setHeader(b"content-type", b"application/json")
        return json.dumps(self._card).encode()


class RPC(Resource):
    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self._n = 0

    def render_POST(self, request):  # type: ignore[no-untyped-def]
        body = json.loads(request.content.read())
        params = body.get("params") or {}
        if body.get("method") == "GetTask":
            result = {"id": params.get("id"), "status": {"state": "TASK_STATE_SUBMITTED"}}
        else:
            self._n += 1
            result = {"task": {"id": f"t{self._n}", "status": {"state": "TASK_STATE_SUBMITTED"}}}
        request.setHeader(b"content-type", b"application/json")
        return json.dumps({"jsonrpc": "2.0", "id": body.get("id"), "result": result}).encode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    root = Resource()
    well_known = Resource()
    root.putChild(b".well-known", well_known)
    well_known.putChild(b"agent-card.json", Card(args.port))
    a2a = Resource()
    root.putChild(b"a2a", a2a)
    a2a.putChild(b"v1", RPC())
    site = Site(root)
    site.noisy = False
    site.log = lambda request: None  # type: ignore[method-assign]
    reactor.listenTCP(args.port, site, interface="127.0.0.1")
    print(f"floor on http://127.0.0.1:{args.port}", file=sys.stderr, flush=True)
    reactor.run()


if __name__ == "__main__":
    main()
