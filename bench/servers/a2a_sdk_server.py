"""
The a2a-sdk (Python) reference server of the benchmark: the SDK's own
JSON-RPC Starlette routes on uvicorn, its default request handler and its
in-memory task store (or its DatabaseTaskStore on PostgreSQL), with an agent
that answers every SendMessage with a Task in TASK_STATE_SUBMITTED (as Beacon
does) and does nothing else.

Run by bench/run with the bench venv's Python (bench/requirements.txt):

    python a2a_sdk_server.py --port 9001                 # as installed
    python a2a_sdk_server.py --port 9001 --tuned         # at its best
    python a2a_sdk_server.py --port 9001 --tuned \
        --store postgresql+asyncpg://postgres@127.0.0.1:5432/bench

--tuned runs uvicorn with loop="uvloop" and http="httptools", what a user
tuning it picks; without it uvicorn is told loop="asyncio" and http="h11"
(its pure-Python defaults: uvicorn's "auto" would pick uvloop and httptools
only because the bench venv has them). The SDK's OpenTelemetry spans are
switched by the environment, as a user switches them:
OTEL_INSTRUMENTATION_A2A_SDK_ENABLED=false (a2a.utils.telemetry reads it at
import; bench/run sets it for the tuned servers).

--store takes an SQLAlchemy async URL: the SDK's DatabaseTaskStore on an
async engine (SQLAlchemy's default pool), its table created at start-up.
Each save is its own transaction (async_sessionmaker.begin()), committed
before the answer: as durable as the server's synchronous_commit.

Serves the card at /.well-known/agent-card.json and JSON-RPC at /a2a/v1
(A2A-Version: 1.0 required, as the SDK checks it).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
from collections.abc import AsyncIterator

import uvicorn
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events.event_queue_v2 import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskStore
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Task,
    TaskState,
    TaskStatus,
)
from starlette.applications import Starlette

RPC_PATH = "/a2a/v1"


class SubmittedAgent(AgentExecutor):
    """Answers every message with a new Task in TASK_STATE_SUBMITTED."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = Task(
            id=context.task_id,
            context_id=context.context_id,
            status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
        )
        task.status.timestamp.GetCurrentTime()
        await event_queue.enqueue_event(task)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError


def make_card(port: int) -> AgentCard:
    return AgentCard(
        name="bench-a2a-sdk",
        description="Benchmark reference agent: answers SendMessage with a submitted Task.",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(
                url=f"http://127.0.0.1:{port}{RPC_PATH}",
                protocol_binding="JSONRPC",
                protocol_version="1.0",
            )
        ],
        capabilities=AgentCapabilities(streaming=False, push_notifications=False),
        default_input_modes=["text/plain"],
        default_output_modes=["application/json"],
        skills=[
            AgentSkill(
                id="submit",
                name="Submit",
                description="Stores a message and answers a submitted Task.",
                tags=["bench"],
            )
        ],
    )


def make_app(port: int, store_url: str | None = None) -> Starlette:
    card = make_card(port)
    lifespan = None
    if store_url:
        from a2a.server.tasks import DatabaseTaskStore
        from sqlalchemy.ext.asyncio import create_async_engine

        engine = create_async_engine(store_url)
        task_store: TaskStore = DatabaseTaskStore(engine)

        @contextlib.asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            await task_store.initialize()  # the table, before the first request
            yield
            await engine.dispose()
    else:
        task_store = InMemoryTaskStore()
    handler = DefaultRequestHandler(
        agent_executor=SubmittedAgent(),
        task_store=task_store,
        agent_card=card,
    )
    routes = create_agent_card_routes(card) + create_jsonrpc_routes(handler, RPC_PATH)
    return Starlette(routes=routes, lifespan=lifespan)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tuned", action="store_true", help='uvicorn loop="uvloop", http="httptools"')
    parser.add_argument("--store", default=None, help="an SQLAlchemy async URL: DatabaseTaskStore")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    uvicorn.run(
        make_app(args.port, args.store),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        access_log=False,
        loop="uvloop" if args.tuned else "asyncio",
        http="httptools" if args.tuned else "h11",
    )


if __name__ == "__main__":
    main()
