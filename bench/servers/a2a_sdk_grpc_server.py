"""
The a2a-sdk (Python) gRPC reference server of the benchmark: the SDK's own
GrpcHandler (service lf.a2a.v1.A2AService) on grpcio's asyncio server
(grpc.aio), its default request handler and its in-memory task store, with
the agent of bench/servers/a2a_sdk_server.py (every SendMessage answered
with a Task in TASK_STATE_SUBMITTED, nothing else done).

Run by bench/run with the bench venv's Python (bench/requirements.txt):

    python a2a_sdk_grpc_server.py --port 9001 --grpc-port 9002   # at its best

At its best, as the JSON-RPC server is: the SDK's OpenTelemetry spans off
(OTEL_INSTRUMENTATION_A2A_SDK_ENABLED=false in the environment, which
bench/run sets), grpc.aio's event loop is uvloop (--loop asyncio: the
standard one), and grpcio's default server options. The agent card (whose
interfaces list the gRPC listener) is served over plain HTTP on --port by
the SDK's own card route on uvicorn, on the same loop, so that bench/run
finds the server as it finds the others.
"""

from __future__ import annotations

import argparse
import asyncio
import logging

import grpc.aio
import uvicorn
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.request_handlers.grpc_handler import GrpcHandler
from a2a.server.routes import create_agent_card_routes
from a2a.server.tasks import InMemoryTaskStore
from a2a.types import a2a_pb2_grpc
from a2a.types.a2a_pb2 import AgentInterface
from a2a_sdk_server import SubmittedAgent, make_card
from starlette.applications import Starlette


async def serve(port: int, grpc_port: int) -> None:
    card = make_card(port)
    # Its one interface: the gRPC listener (host:port, as a gRPC card lists it).
    del card.supported_interfaces[:]
    card.supported_interfaces.append(
        AgentInterface(url=f"127.0.0.1:{grpc_port}", protocol_binding="GRPC", protocol_version="1.0")
    )
    handler = DefaultRequestHandler(
        agent_executor=SubmittedAgent(), task_store=InMemoryTaskStore(), agent_card=card
    )
    server = grpc.aio.server()
    a2a_pb2_grpc.add_A2AServiceServicer_to_server(GrpcHandler(handler), server)
    server.add_insecure_port(f"127.0.0.1:{grpc_port}")
    await server.start()
    config = uvicorn.Config(
        Starlette(routes=create_agent_card_routes(card)),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
        loop="none",  # the running loop: the gRPC server's
        http="httptools",
    )
    try:
        await uvicorn.Server(config).serve()
    finally:
        await server.stop(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True, help="the agent card's HTTP port")
    parser.add_argument("--grpc-port", type=int, required=True, help="the gRPC listener's port")
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.loop == "uvloop":
        import uvloop

        uvloop.run(serve(args.port, args.grpc_port))
    else:
        asyncio.run(serve(args.port, args.grpc_port))


if __name__ == "__main__":
    main()
