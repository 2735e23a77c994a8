"""
A trivial gRPC server on raw HTTP/2 (asyncio Protocols), for measuring gRPC
load clients (bench/h2_load.py, bench/grpc_load.py) where the server is
not what bounds them: every call to lf.a2a.v1.A2AService/SendMessage is
answered with one canned SendMessageResponse (a Task in
TASK_STATE_SUBMITTED, id "canned-task"), every GetTask with that Task,
anything else with grpc-status 12 (UNIMPLEMENTED); the request's message
is not read. Run with the project's Python:

    .venv/bin/python bench/servers/h2_canned.py --port 50051

Header blocks are decoded (Beacon's HPACK Decoder, one per connection) for
:path only; answers are precomputed bytes (:status 200 and content-type,
DATA, trailers grpc-status 0), one write per batch of input. It ACKs
SETTINGS and PINGs and opens its connection window wide (WINDOW_UPDATEs
each 1 MiB received); it honours no flow control of the client's beyond
trusting its windows to be wide (bench/h2_load.py opens them to 2**24;
grpc-core's are wide as well). Listens on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import asyncio
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from beacon.bindings.grpc._h2 import frame  # noqa: E402
from beacon.bindings.grpc._hpack import Decoder, indexed, literal  # noqa: E402
from beacon.proto import a2a_pb2  # noqa: E402

FRAME = struct.Struct(">BHBBI")
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


TASK = a2a_pb2.Task(id="canned-task", context_id="canned-context",
                    status=a2a_pb2.TaskStatus(state=a2a_pb2.TASK_STATE_SUBMITTED))
HEAD = indexed(8) + literal(b"content-type", b"application/grpc")
OK = literal(b"grpc-status", b"0")


def answer(body: bytes) -> tuple[bytes, bytes, bytes, bytes]:
    """The answer's three frames, each less its stream id: what goes before it, after it."""
    data = b"\x00" + len(body).to_bytes(4, "big") + body
    return (
        FRAME.pack(0, len(HEAD), 1, 4, 0)[:5],
        HEAD + FRAME.pack(len(data) >> 16, len(data) & 0xFFFF, 0, 0, 0)[:5],
        data + FRAME.pack(0, len(OK), 1, 5, 0)[:5],
        OK,
    )


ANSWERS = {
    b"/lf.a2a.v1.A2AService/SendMessage": answer(a2a_pb2.SendMessageResponse(task=TASK).SerializeToString()),
    b"/lf.a2a.v1.A2AService/GetTask": answer(TASK.SerializeToString()),
}
UNIMPLEMENTED = indexed(8) + literal(b"content-type", b"application/grpc") + literal(b"grpc-status", b"12")


class Server(asyncio.Protocol):
    def __init__(self) -> None:
        self.decoder = Decoder()
        self.buf = bytearray()
        self.paths: dict[int, bytes] = {}
        self.received = 0
        self.preface = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        transport.write(frame(4, 0, 0, struct.pack(">HI", 4, 2**24)) + frame(8, 0, 0, (2**24 - 65535).to_bytes(4, "big")))

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos = 0
        if not self.preface:
            if len(buf) < 24:
                return
            if bytes(buf[:24]) != PREFACE:
                self.transport.abort()
                return
            self.preface = True
            pos = 24
        end = len(buf)
        out = []
        while end - pos >= 9:
            high, low, kind, flags, stream = FRAME.unpack_from(buf, pos)
            stop = pos + 9 + (high << 16 | low)
            if stop > end:
                break
            payload = bytes(buf[pos + 9 : stop])
            pos = stop
            if kind == 0:  # DATA
                self.received += len(payload)
                if flags & 1:
                    path = self.paths.pop(stream, b"")
                    sid = stream.to_bytes(4, "big")
                    parts = ANSWERS.get(path)
                    if parts is None:
                        out.append(FRAME.pack(0, len(UNIMPLEMENTED), 1, 5, stream) + UNIMPLEMENTED)
                    else:
                        out.append(parts[0] + sid + parts[1] + sid + parts[2] + sid + parts[3])
            elif kind == 1:  # HEADERS (the client's are never padded nor split here)
                if flags & 0x20:
                    payload = payload[5:]
                for name, value in self.decoder.decode(payload):
                    if name == b":path":
                        self.paths[stream] = value
                        break
            elif kind == 4 and not flags & 1:
                out.append(frame(4, 1, 0))
            elif kind == 6 and not flags & 1:
                out.append(frame(6, 1, 0, payload))
            elif kind == 7:
                self.transport.close()
                return
        del buf[:pos]
        if self.received >= 2**20:
            out.append(frame(8, 0, 0, self.received.to_bytes(4, "big")))
            self.received = 0
        if out:
            self.transport.write(b"".join(out))


async def serve(port: int) -> None:
    server = await asyncio.get_running_loop().create_server(Server, "127.0.0.1", port)
    print(f"h2_canned: listening on 127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
    await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description="A canned-answer gRPC server on raw HTTP/2.")
    parser.add_argument("--port", type=int, default=50051)
    parser.add_argument("--uvloop", action="store_true", help="run on uvloop (if installed)")
    args = parser.parse_args()
    if args.uvloop:
        import uvloop

        uvloop.run(serve(args.port))
    else:
        asyncio.run(serve(args.port))


if __name__ == "__main__":
    main()
