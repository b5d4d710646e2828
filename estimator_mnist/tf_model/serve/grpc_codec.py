"""serve's gRPC messages read and written off grpc.aio's event loop: the services registered on raw bytes, a
large message parsed and its answer serialized in a small pool of their own.

grpc.aio calls a method's request deserializer on its one event-loop
thread, before the servicer runs. The protobuf runtime of the pins
(3.20.3, held by tensorflow-metadata 1.14) is pure Python on Python 3.11:
1.2 MB of `float_val` takes 0.5-1.6 s of CPU to decode, and on the loop it
would hold every other RPC that long. So each method is registered here
with no deserializer (its handler gets the message's bytes) and:

- a Predict's packed `float_val` of DT_FLOAT is moved to `tensor_content`
  in its bytes first, where that reads the same (tensor_wire.py): a
  millisecond for what protobuf decodes in seconds;

- a message of at most INLINE_BYTES (a request of a few images: about a
  millisecond to parse) is parsed on the loop, where a pool hand-off would
  cost as much;
- a larger one is parsed in CODEC_THREADS threads of its own (at most
  MAX_PENDING_BYTES of them waiting; beyond, RESOURCE_EXHAUSTED; one whose
  deadline passed while it waited is dropped unread), and so is its
  answer's serialization (`offload()` serves the servicer for the work in
  between), so that the loop goes on answering the others meanwhile. The
  pool shares the GIL with the loop, but pure-Python parsing gives it up
  every switch interval (5 ms), which C code holding it would not.

What a maximal request costs the others is stated in docs/serving.md.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Optional

import grpc
from google.protobuf import symbol_database
from google.protobuf.message import DecodeError
from tensorflow_serving.apis import model_service_pb2, predict_pb2, prediction_service_pb2

from estimator_mnist.tf_model.serve.tensor_wire import packed_floats_as_content

INLINE_BYTES = 16 * 1024  # parsed on the loop up to this size: a request of 5 float images, or of 40 PNGs
INLINE_IMAGES = 64  # inputs made and answer written on the loop up to this many images (one model call's)
CODEC_THREADS = 2  # the pool that parses larger messages and serializes their answers
MAX_PENDING_BYTES = 128 << 20  # large messages waiting to be parsed, at most (one is always taken): 4 maximal ones
ERR_DESERIALIZE = "Exception deserializing request!"  # grpcio's own text for a message that does not parse
ERR_PENDING = ("estimator-mnist serve is reading {mib} MiB of large requests already: retry later, or send this "
               "request to another replica")
ERR_LATE = "Deadline exceeded before the request was read: it waited behind others for longer than its deadline"
SERVICES = ((prediction_service_pb2, "PredictionService"), (model_service_pb2, "ModelService"))
# The size of the request being answered, for offload(): each RPC is an asyncio task, with its own context.
REQUEST_BYTES: contextvars.ContextVar = contextvars.ContextVar("request_bytes", default=0)
# The images its inputs declare, once read (grpc_api.py): a tiny message may declare 10,000 of them.
REQUEST_IMAGES: contextvars.ContextVar = contextvars.ContextVar("request_images", default=0)


class _Late(Exception):
    pass


def _unless_late(deadline: Optional[float], work: Callable, *args):
    """`work(*args)`, unless the client's deadline passed while the message waited (a flood of requests with
    short deadlines is then dropped unread, rather than parsed for nothing)."""
    if deadline is not None and time.monotonic() >= deadline:
        raise _Late()
    return work(*args)


class Codec:
    """The pool, and the RPC handlers that use it."""

    def __init__(self, threads: int = CODEC_THREADS, inline_bytes: int = INLINE_BYTES,
                 max_pending_bytes: int = MAX_PENDING_BYTES):
        self.inline_bytes, self.max_pending_bytes = inline_bytes, max_pending_bytes
        self.pending_bytes = 0  # large messages received, not parsed yet
        self.on_refused: Callable[[str], None] = lambda reason: None  # the metrics' refusals (grpc_api.py)
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="serve-grpc-codec")

    @property
    def large(self) -> bool:
        """Whether the request of this RPC is one whose work goes to the pool."""
        return REQUEST_BYTES.get() > self.inline_bytes or REQUEST_IMAGES.get() > INLINE_IMAGES

    async def offload(self, work: Callable, *args):
        """`work(*args)`, in the pool for a large request, else here on the loop."""
        if not self.large:
            return work(*args)
        return await asyncio.get_running_loop().run_in_executor(self._pool, work, *args)

    def handler(self, method: Callable, request_class) -> grpc.RpcMethodHandler:
        parse = request_class.FromString
        if request_class is predict_pb2.PredictRequest:
            def parse(raw: bytes):  # pylint: disable=function-redefined  # packed float_val read at once
                return predict_pb2.PredictRequest.FromString(packed_floats_as_content(raw))

        async def behavior(raw: bytes, context):
            size = len(raw)
            REQUEST_BYTES.set(size)
            remaining = context.time_remaining()
            deadline = None if remaining is None else time.monotonic() + remaining
            if self.large and self.pending_bytes and self.pending_bytes + size > self.max_pending_bytes:
                self.on_refused("pending_bytes")
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, ERR_PENDING.format(
                    mib=self.pending_bytes >> 20))
            self.pending_bytes += size if self.large else 0  # only the loop's thread counts: no lock
            try:
                request = await self.offload(_unless_late, deadline, parse, raw)
            except DecodeError:
                await context.abort(grpc.StatusCode.INTERNAL, ERR_DESERIALIZE)
            except _Late:  # its client gave up while it waited to be read: no work is spent on it
                await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, ERR_LATE)
            finally:
                self.pending_bytes -= size if self.large else 0
            del raw  # the message's bytes, no longer needed while it waits for the model
            response = await method(request, context)
            if isinstance(response, bytes):  # a Predict's answer, written already (response_wire.py)
                return response
            return await self.offload(response.SerializeToString)

        return grpc.unary_unary_rpc_method_handler(behavior)

    def add(self, server, servicers: dict) -> None:
        """Each service's methods on `server` ({"PredictionService": servicer, ...}), on raw bytes."""
        database = symbol_database.Default()
        for module, name in SERVICES:
            service = module.DESCRIPTOR.services_by_name[name]
            handlers = {method.name: self.handler(getattr(servicers[name], method.name),
                                                  database.GetSymbol(method.input_type.full_name))
                        for method in service.methods}
            server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service.full_name, handlers),))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
