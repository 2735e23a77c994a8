"""
A real A2A peer: the official C{a2a-sdk} client against a Beacon.

Usage::

    python a2a_sdk_client.py BASE_URL [TEXT [BINDING]]

It resolves the agent card from C{BASE_URL}, creates a non-streaming client
of C{BINDING} (C{JSONRPC}, the default, C{HTTP+JSON} or C{GRPC}, over
grpcio's asyncio channels to the interface's C{host:port}) from it, sends
C{TEXT} as a user message, GetTasks the returned task, then GetTasks a task
that does not exist. It prints one JSON object per line on stdout::

    {"step": "card", "name": ..., "interfaces": [{"url", "protocolBinding",
     "protocolVersion"}], "streaming": false}
    {"step": "send", "id": ..., "contextId": ..., "state": "TASK_STATE_...",
     "timestamp": ..., "url": <the URL the request was POSTed to; over
     gRPC, host:port/method>, "a2aVersion": <its A2A-Version header, or
     its a2a-version metadata>}
    {"step": "get", "id": ..., "state": ..., "timestamp": ..., "url": ...}
    {"step": "error", "error": <the SDK's exception class>, "message": ...,
     "url": ...}

Any error ends it with exit code 1 and a message on stderr. Only the SDK's
public client API is used (C{a2a.client}, C{a2a.types}); the httpx client is
handed to the SDK through C{ClientConfig.httpx_client}, and its event hook
only records which URL each request went to; over gRPC, the channel
C{ClientConfig.grpc_channel_factory} makes carries a client interceptor
(grpcio's public API) that records each call's method and metadata.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from typing import Any

import grpc
import httpx
from google.protobuf.json_format import MessageToDict

from a2a.client import A2ACardResolver, ClientCallContext, ClientConfig, ClientFactory
from a2a.types import GetTaskRequest, Message, Part, Role, SendMessageRequest, Task, TaskState

#: Every network step is bounded by this many seconds (a safety net for a
#: loaded machine; the whole run by four times as much).
TIMEOUT = 60.0

JSONRPC = "JSONRPC"
GRPC = "GRPC"


class Sent:
    """What a recorded request says: its URL and its A2A-Version."""

    def __init__(self, url: str, version: str | None) -> None:
        self.url = url
        self.headers = {"A2A-Version": version} if version is not None else {}


class Recorder(grpc.aio.UnaryUnaryClientInterceptor):
    """Records each gRPC call's target, method and a2a-version metadata."""

    def __init__(self, target: str, sent: list[Any]) -> None:
        self._target = target
        self._sent = sent

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        method = details.method.decode() if isinstance(details.method, bytes) else details.method
        versions = [v for k, v in (details.metadata or ()) if k == "a2a-version"]
        self._sent.append(Sent(self._target + method, versions[0] if versions else None))
        return await continuation(details, request)


def emit(record: dict[str, Any]) -> None:
    print(json.dumps(record, sort_keys=True), flush=True)


def task_record(step: str, task: Task, request: Any) -> dict[str, Any]:
    return {
        "step": step,
        "id": task.id,
        "contextId": task.context_id,
        "state": TaskState.Name(task.status.state),
        "timestamp": MessageToDict(task.status).get("timestamp"),
        "url": str(request.url) if request is not None else None,
        "a2aVersion": request.headers.get("A2A-Version") if request is not None else None,
    }


async def run(base_url: str, text: str, binding: str) -> None:
    sent: list[Any] = []

    async def record(request: httpx.Request) -> None:
        sent.append(request)

    async with httpx.AsyncClient(
        timeout=TIMEOUT, event_hooks={"request": [record]}
    ) as http_client:
        card = await A2ACardResolver(http_client, base_url).get_agent_card()
        emit(
            {
                "step": "card",
                "name": card.name,
                "streaming": card.capabilities.streaming,
                "interfaces": [
                    {
                        "url": i.url,
                        "protocolBinding": i.protocol_binding,
                        "protocolVersion": i.protocol_version,
                    }
                    for i in card.supported_interfaces
                ],
            }
        )

        def channel(target: str) -> Any:
            return grpc.aio.insecure_channel(target, interceptors=[Recorder(target, sent)])

        config = ClientConfig(
            streaming=False,
            httpx_client=http_client,
            supported_protocol_bindings=[binding],
            grpc_channel_factory=channel,
        )
        client = ClientFactory(config).create(card)
        context = ClientCallContext(timeout=TIMEOUT)

        message = Message(
            message_id=str(uuid.uuid4()),
            role=Role.ROLE_USER,
            parts=[Part(text=text)],
        )
        responses = [
            r
            async for r in client.send_message(
                SendMessageRequest(message=message), context=context
            )
        ]
        if len(responses) != 1 or not responses[0].HasField("task"):
            raise RuntimeError(f"SendMessage did not answer with one Task: {responses}")
        emit(task_record("send", responses[0].task, sent[-1] if sent else None))

        task = await client.get_task(
            GetTaskRequest(id=responses[0].task.id), context=context
        )
        emit(task_record("get", task, sent[-1] if sent else None))

        try:
            await client.get_task(GetTaskRequest(id="no-such-task"), context=context)
        except Exception as e:  # the SDK's own error for the answer
            request = sent[-1] if sent else None
            emit(
                {
                    "step": "error",
                    "error": type(e).__name__,
                    "message": str(e),
                    "url": str(request.url) if request is not None else None,
                }
            )
        else:
            raise RuntimeError("GetTask of an unknown task did not fail")
        await client.close()


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3, 4):
        print(f"usage: {argv[0]} BASE_URL [TEXT [BINDING]]", file=sys.stderr)
        return 2
    text = argv[2] if len(argv) >= 3 else "Hello from the a2a-sdk interop test."
    binding = argv[3] if len(argv) == 4 else JSONRPC
    try:
        asyncio.run(asyncio.wait_for(run(argv[1], text, binding), 4 * TIMEOUT))
    except Exception as e:
        print(f"a2a-sdk client failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
