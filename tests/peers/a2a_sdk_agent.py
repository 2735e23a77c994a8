"""
A small agent on the official a2a-sdk (test-only), for the client's interop
tests: the SDK's JSON-RPC and HTTP+JSON (REST) routes, its default request
handler and in-memory task store, streaming on. Every message is answered with a Task
that completes with one artifact, C{echo: <the message's text>}; a
streaming call sees the task, then the artifact, then the completed status.

    python a2a_sdk_agent.py --fd N --port P [--grpc]

It serves on the listening socket C{N} that the test bound on loopback (so
no port is ever guessed). Its card names C{http://127.0.0.1:P/a2a/rest}
(C{HTTP+JSON}) first, then C{http://127.0.0.1:P/a2a/v1} (C{JSONRPC}).
With C{--grpc} it also serves the SDK's gRPC service (its GrpcHandler on a
grpc.aio server, on a loopback port the kernel chooses) over the same
request handler, and its card lists it last: C{127.0.0.1:G} (C{GRPC}).

No ASGI server is installed with the project, so a minimal one is here: one
HTTP/1.1 request per connection (C{Connection: close}), its body by
C{Content-Length}, the answer's body until the close (which is how a stream
ends too).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import socket
from typing import Any
from urllib.parse import unquote

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events.event_queue_v2 import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import InMemoryTaskStore
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Artifact,
    Part,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from starlette.applications import Starlette

RPC_PATH = "/a2a/v1"
REST_PATH = "/a2a/rest"


class EchoAgent(AgentExecutor):
    """Answers every message with a Task that completes with an echo."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = " ".join(p.text for p in context.message.parts if p.text) if context.message else ""
        task = Task(
            id=context.task_id,
            context_id=context.context_id,
            status=TaskStatus(state=TaskState.TASK_STATE_WORKING),
        )
        task.status.timestamp.GetCurrentTime()
        await event_queue.enqueue_event(task)
        await event_queue.enqueue_event(
            TaskArtifactUpdateEvent(
                task_id=context.task_id,
                context_id=context.context_id,
                artifact=Artifact(artifact_id="echo", parts=[Part(text=f"echo: {text}")]),
                last_chunk=True,
            )
        )
        done = TaskStatusUpdateEvent(
            task_id=context.task_id,
            context_id=context.context_id,
            status=TaskStatus(state=TaskState.TASK_STATE_COMPLETED),
        )
        done.status.timestamp.GetCurrentTime()
        await event_queue.enqueue_event(done)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError


def make_handler(port: int, grpc_port: int | None = None) -> tuple[DefaultRequestHandler, AgentCard]:
    """The SDK's request handler for the echo agent, and its card."""
    card = AgentCard(
        name="test-a2a-sdk-echo",
        description="Test agent: echoes each message in a completed task's artifact.",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(
                url=f"http://127.0.0.1:{port}{REST_PATH}",
                protocol_binding="HTTP+JSON",
                protocol_version="1.0",
            ),
            AgentInterface(
                url=f"http://127.0.0.1:{port}{RPC_PATH}",
                protocol_binding="JSONRPC",
                protocol_version="1.0",
            ),
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="Echo", description="Echoes the message.", tags=["test"])],
    )
    if grpc_port is not None:
        card.supported_interfaces.append(
            AgentInterface(url=f"127.0.0.1:{grpc_port}", protocol_binding="GRPC", protocol_version="1.0")
        )
    handler = DefaultRequestHandler(
        agent_executor=EchoAgent(), task_store=InMemoryTaskStore(), agent_card=card
    )
    return handler, card


def make_app(handler: DefaultRequestHandler, card: AgentCard) -> Starlette:
    """The SDK's card, JSON-RPC and HTTP+JSON routes."""
    return Starlette(
        routes=create_agent_card_routes(card)
        + create_jsonrpc_routes(handler, RPC_PATH)
        + create_rest_routes(handler, path_prefix=REST_PATH)
    )


async def serve_one(app: Any, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer one request on one connection with the ASGI C{app}."""
    done = asyncio.Event()
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        headers = []
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers.append((name.strip().lower().encode("latin-1"), value.strip().encode("latin-1")))
        length = int(dict(headers).get(b"content-length", b"0"))
        body = await reader.readexactly(length) if length else b""
        path, _, query = target.partition("?")
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": method, "scheme": "http", "path": unquote(path),
            "raw_path": path.encode("latin-1"), "query_string": query.encode("latin-1"),
            "root_path": "", "headers": headers,
            "client": writer.get_extra_info("peername"), "server": writer.get_extra_info("sockname"),
        }
        delivered = False

        async def receive() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                out = [f"HTTP/1.1 {message['status']} X".encode()]
                for name, value in message.get("headers", []):
                    if name.lower() not in (b"connection", b"transfer-encoding"):
                        out.append(name + b": " + value)
                out.append(b"Connection: close")
                writer.write(b"\r\n".join(out) + b"\r\n\r\n")
            elif message["type"] == "http.response.body":
                writer.write(message.get("body", b""))
                await writer.drain()
                if not message.get("more_body"):
                    done.set()

        await app(scope, receive, send)
    except (asyncio.IncompleteReadError, ConnectionError, ValueError):
        pass
    finally:
        done.set()
        writer.close()


async def serve(port: int, fd: int, grpc: bool) -> None:
    grpc_server = None
    grpc_port = None
    if grpc:
        import grpc.aio
        from a2a.server.request_handlers import GrpcHandler
        from a2a.types import a2a_pb2_grpc

        grpc_server = grpc.aio.server()
        grpc_port = grpc_server.add_insecure_port("127.0.0.1:0")
    handler, card = make_handler(port, grpc_port)
    if grpc_server is not None:
        a2a_pb2_grpc.add_A2AServiceServicer_to_server(GrpcHandler(handler), grpc_server)
        await grpc_server.start()
    app = make_app(handler, card)
    listening = socket.socket(fileno=fd)
    server = await asyncio.start_server(lambda r, w: serve_one(app, r, w), sock=listening)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--grpc", action="store_true", help="also serve the SDK's gRPC service")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(serve(args.port, args.fd, args.grpc))


if __name__ == "__main__":
    main()
