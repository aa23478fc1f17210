"""Streamed answers of the speech route: the audio of one request sent as it is vocoded.

`ChunkChannel` carries a streamed job's chunks from the speaking thread to the route's event loop.
`stream_speech` waits for the first chunk (so a request that fails before any audio is still
answered with its 4xx/5xx line; a client that goes away meanwhile withdraws its job), then answers
200 with the first chunk and the rest as they come: `stream_format: audio` as a chunked body of the
`response_format` file (`core.audio_formats`), `sse` as `data:` events `speech.audio.delta` (the
file's next bytes, base64) and one `speech.audio.done` with the usage (text tokens in, speech
tokens out). A failure after the first chunk ends an audio stream early and sends an `error` event
on an SSE one. A client that disconnects mid-stream sets its job's `stop` (generation ends at the
next token) and withdraws it if it still waits.
"""

from __future__ import annotations

import asyncio
import base64
import json
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, AsyncIterator

import torch
from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response, StreamingResponse

from core.audio_formats import MEDIA_TYPES, AudioEncoder
from core.serve.engine import SpeechJob, StreamEnd

@dataclass(frozen=True)
class _End:
    """The job's Future once it is done: its StreamEnd, or the exception that stopped it."""

    future: Future[Any]


class ChunkChannel:
    """One streamed job's chunks (from any thread, `put`) and then its end (`end`, the Future's done callback),
    read in order on the event loop (`get`)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queue: asyncio.Queue[torch.Tensor | _End] = asyncio.Queue()

    def _send(self, item: torch.Tensor | _End) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the loop has closed: the server stopped and nobody reads this stream
            pass

    def put(self, chunk: torch.Tensor) -> None:
        """Queue the next audio chunk."""
        self._send(chunk)

    def end(self, future: Future[Any]) -> None:
        """Queue the end of the stream (`future` is done)."""
        self._send(_End(future))

    async def get(self) -> torch.Tensor | _End:
        """Return the next chunk, or the end."""
        return await self._queue.get()


def _raise_end(end: _End) -> StreamEnd | None:
    """Return the job's StreamEnd, None when it was withdrawn; raise the exception that stopped it."""
    if end.future.cancelled():
        return None
    return end.future.result()


async def _gone(request: Request) -> None:
    """Return once the client has disconnected (the request's body is read: all that can come is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _first(request: Request, channel: ChunkChannel) -> torch.Tensor | _End | None:
    """Return the stream's first item, or None when the client went away before it came.

    The disconnect is awaited on `request.receive()` itself: `Request.is_disconnected()` cannot see it through
    a `BaseHTTPMiddleware` (its receive never returns inside an already cancelled scope)."""
    item = asyncio.ensure_future(channel.get())
    gone = asyncio.ensure_future(_gone(request))
    await asyncio.wait({item, gone}, return_when=asyncio.FIRST_COMPLETED)
    if item.done():
        gone.cancel()
        await asyncio.gather(gone, return_exceptions=True)  # no receive left pending when the response listens
        return item.result()
    if gone.exception() is not None:  # the receive failed: the client's state is unknown, so wait for the audio
        return await item
    item.cancel()
    return None


def _event(payload: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()


async def stream_speech(request: Request, job: SpeechJob, future: Future[Any], channel: ChunkChannel,
                        audio_format: str, stream_format: str, sample_rate: int) -> Response:
    """Return the streamed answer of `job` (submitted, its chunks going to `channel`; see the module).

    Raises what stopped the job when it failed before its first chunk.
    """
    future.add_done_callback(channel.end)
    first = await _first(request, channel)
    if first is None:
        job.stop.set()
        future.cancel()
        return Response(status_code=204)
    if isinstance(first, _End):
        _raise_end(first)  # a failure before any audio: answered like a whole request's
    sse = stream_format == "sse"
    encoder = AudioEncoder(audio_format, sample_rate)

    def piece(data: bytes) -> bytes:
        return _event({"type": "speech.audio.delta", "audio": base64.b64encode(data).decode("ascii")}) if sse else data

    async def body() -> AsyncIterator[bytes]:
        item: torch.Tensor | _End = first
        finished = False
        try:
            while not isinstance(item, _End):
                data = await run_in_threadpool(encoder.encode, item)
                if data:
                    yield piece(data)
                item = await channel.get()
            finished = True
            try:
                end = _raise_end(item)
            except Exception as exc:  # after the first chunk the status is sent: end the stream, say why on SSE
                if sse:
                    yield _event({"type": "error", "error": {"message": f"speech failed: {type(exc).__name__}: {exc}"}})
                return
            tail = encoder.finish()
            if tail:
                yield piece(tail)
            if sse and end is not None:
                usage = {"input_tokens": end.text_tokens, "output_tokens": end.speech_tokens,
                         "total_tokens": end.text_tokens + end.speech_tokens}
                yield _event({"type": "speech.audio.done", "usage": usage})
        finally:
            if not finished:  # the client went away (the response was cancelled) or sending failed
                job.stop.set()
                future.cancel()

    media = "text/event-stream" if sse else MEDIA_TYPES[audio_format]
    return StreamingResponse(body(), media_type=media, headers={"x-sample-rate": str(encoder.rate),
                                                                "cache-control": "no-cache"})
