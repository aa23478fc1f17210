"""The speech server's HTTP routes (FastAPI): OpenAI's speech request shape over a loaded Engine.

- `POST /v1/audio/speech` {model, input, voice, response_format: wav|flac|pcm|mp3|opus, speed: 0.25–4,
  stream_format: audio|sse?, language?} → the audio file, or with `stream_format` the audio as it is
  vocoded (`core.serve.streaming`). `voice` names a reference clip of the voices folder; `aac` is refused
  (`core.audio_formats.UNWRITABLE` says why).
- `GET /v1/models` → {object: list, data: [{id, object: model, owned_by, family}]}.
- `GET /health` → {status: ok, model, family, sample_rate, batched, waiting, batches, largest_batch,
  requests, streams, stopped, speaking, speech_tokens} (503 while shutting down): `batches` counts the
  batches spoken, `largest_batch` the most requests in one, the rest are the engine's counters.
Every refusal is a JSON body {"error": {"message": one line, "type", "code"}} with a 4xx status
(400 bad field or text that is not UTF-8, 401 token, 404 model, 408 body not sent within the body
timeout, 411 no Content-Length, 413 input or body too long, 429 queue full) or 503 (shutting down:
from the signal on, waiting and new requests get it while the batch being spoken finishes and is answered;
then the server stops listening); any failure
inside the server answers 500 in the same shape, for that request only.
With a token, every route but `/health` wants `Authorization: Bearer <token>`.
"""

from __future__ import annotations

import asyncio
import hmac
import signal
import socket
import threading
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, AsyncIterator, Literal

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.audio_formats import FORMATS, MEDIA_TYPES, UNWRITABLE, output_rate
from core.errors import InputError
from core.serve.batching import BatchQueue, QueueFull, Unavailable
from core.serve.engine import Engine, SpeechJob
from core.serve.streaming import ChunkChannel, stream_speech
from core.serve.voices import VoiceFolder

OPEN_ROUTES = ("/health",)
SPEEDS = (0.25, 4.0)
STREAM_FORMATS = ("audio", "sse")


@dataclass
class ServerConfig:
    """What the routes need besides the engine: the model id, voices, limits and the optional token."""

    model_id: str
    voices: VoiceFolder
    max_input_chars: int
    queue_limit: int
    max_batch: int
    token: str | None = None
    language: str | None = None
    body_timeout_s: float = 10.0


class SpeechBody(BaseModel):
    """OpenAI's `audio.speech.create` body, plus LinguaForge's optional `language` (text normalisation)."""

    model_config = ConfigDict(extra="forbid")

    model: str
    input: str
    voice: str
    response_format: str = "wav"
    speed: float | None = None
    stream_format: str | None = None
    language: str | None = None


class ApiError(Exception):
    """A refusal: HTTP `status` with a one-line `message`."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.code = status, message, kind, code


def _error(status: int, message: str, kind: str = "invalid_request_error", code: str | None = None) -> JSONResponse:
    line = " ".join(message.split()).encode("utf-8", "backslashreplace").decode("utf-8")  # a lone surrogate, escaped
    return JSONResponse({"error": {"message": line, "type": kind, "code": code}}, status_code=status)


class BodyDeadline:
    """ASGI middleware: a POST body must arrive whole within `seconds` of the request, else 408 (a stalled
    upload never holds its connection). The body, read here, is handed on to the app unchanged."""

    def __init__(self, app: ASGIApp, seconds: float) -> None:
        self.app, self.seconds = app, seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        try:
            body = await asyncio.wait_for(_read_body(receive), self.seconds)
        except asyncio.TimeoutError:
            response = _error(408, f"the request body did not arrive within {self.seconds:g} s; send it whole with the "
                                   "request.", code="body_timeout")
            await response(scope, receive, send)
            return
        handed = False

        async def replay() -> Message:
            nonlocal handed
            if handed:
                return await receive()  # after the body: the client's disconnect
            handed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if message["type"] != "http.request" or not message.get("more_body", False):
            return b"".join(chunks)


def _validation_message(exc: RequestValidationError) -> str:
    first = exc.errors()[0] if exc.errors() else {}
    where = ".".join(str(part) for part in first.get("loc", ()) if part != "body") or "body"
    if first.get("type") == "json_invalid":
        return "the body is not valid JSON; send a JSON object {model, input, voice, response_format}."
    if first.get("type") == "extra_forbidden":
        return (f"{where}: not a field of this server; send model, input, voice, response_format, speed, "
                "stream_format or language.")
    return f"{where}: {first.get('msg', 'invalid')}; send a JSON object {{model, input, voice, response_format}}."


def _check_body(body: SpeechBody, config: ServerConfig) -> None:
    for name in ("model", "input", "voice", "response_format", "language"):
        value = getattr(body, name)
        try:
            (value or "").encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ApiError(400, f"{name}: not valid UTF-8 text (character {exc.start} is a lone surrogate); "
                                "send UTF-8 text.") from None
    if body.model != config.model_id:
        raise ApiError(404, f"model {body.model!r}: this server speaks only {config.model_id!r} (GET /v1/models).",
                       code="model_not_found")
    if body.response_format in UNWRITABLE:
        raise ApiError(400, f"response_format {body.response_format!r}: cannot be written here "
                            f"({UNWRITABLE[body.response_format]}); use {', '.join(FORMATS)}.")
    if body.response_format not in FORMATS:
        raise ApiError(400, f"response_format {body.response_format!r}: this server writes {', '.join(FORMATS)}.")
    if body.speed is not None and not SPEEDS[0] <= body.speed <= SPEEDS[1]:
        raise ApiError(400, f"speed {body.speed}: choose {SPEEDS[0]} to {SPEEDS[1]} (1 = as generated).")
    if body.stream_format is not None and body.stream_format not in STREAM_FORMATS:
        raise ApiError(400, f"stream_format {body.stream_format!r}: use audio (the file's bytes as they are made) "
                            "or sse (speech.audio.delta events), or leave it out for the whole file.")
    if len(body.input) > config.max_input_chars:
        raise ApiError(413, f"input: {len(body.input)} characters; this server speaks at most {config.max_input_chars} "
                            "per request. Split the text into several requests.")
    if not body.input.strip():
        raise ApiError(400, "input is empty; send the text to speak.")


def create_app(engine: Engine, config: ServerConfig) -> FastAPI:
    """Return the FastAPI app speaking through `engine`; its batch queue starts with the app and is
    closed (waiting requests answered 503) when the app shuts down."""
    batches: BatchQueue[SpeechJob] = BatchQueue(engine.speak_batch, config.queue_limit, config.max_batch)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        await run_in_threadpool(batches.close, 60.0)

    app = FastAPI(title="LinguaForge speech server", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.batches = batches
    app.add_middleware(BodyDeadline, seconds=config.body_timeout_s)  # added first: inside `guard`, after its checks
    body_limit = 4 * config.max_input_chars + 4096  # UTF-8 text at 4 bytes a character plus the other fields

    @app.middleware("http")
    async def guard(request: Request, call_next: Any) -> Response:
        if config.token is not None and request.url.path not in OPEN_ROUTES:
            sent = request.headers.get("authorization", "")
            if not hmac.compare_digest(sent.encode(), f"Bearer {config.token}".encode()):
                return _error(401, "missing or wrong bearer token; send Authorization: Bearer <token>.",
                              "authentication_error", "invalid_api_key")
        length = request.headers.get("content-length")
        if length is None and request.method == "POST":  # a chunked body could be of any size
            return _error(411, "the request has no Content-Length; send the JSON body with its length (not chunked).")
        if length is not None and (not length.isdigit() or int(length) > body_limit):
            return _error(413, f"request body of {length} bytes; at most {body_limit} (input ≤ {config.max_input_chars} characters).")
        return await call_next(request)

    @app.exception_handler(ApiError)
    async def api_error(_request: Request, exc: ApiError) -> JSONResponse:
        return _error(exc.status, exc.message, exc.kind, exc.code)

    @app.exception_handler(RequestValidationError)
    async def bad_body(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(400, _validation_message(exc))

    @app.exception_handler(Exception)
    async def internal_error(_request: Request, exc: Exception) -> JSONResponse:  # the server's edge: its shape, always
        return _error(500, f"internal error: {type(exc).__name__}: {exc}", "server_error")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}; routes: "
                                       "POST /v1/audio/speech, GET /v1/models, GET /health.")

    @app.get("/health")
    async def health() -> JSONResponse:
        status = 503 if batches.closed else 200
        return JSONResponse({"status": "shutting down" if batches.closed else "ok", "model": config.model_id,
                             "family": engine.family, "sample_rate": engine.sample_rate, "batched": engine.batched,
                             "waiting": batches.waiting, "batches": len(batches.batch_sizes),
                             "largest_batch": max(batches.batch_sizes, default=0), **engine.counts()},
                            status_code=status)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": config.model_id, "object": "model", "created": 0,
                                            "owned_by": "linguaforge", "family": engine.family}]}

    @app.post("/v1/audio/speech")
    async def speech(body: SpeechBody, request: Request) -> Response:
        from core.audio_formats import encode_whole

        _check_body(body, config)
        channel = ChunkChannel(asyncio.get_running_loop()) if body.stream_format else None
        try:
            job = SpeechJob(body.input, config.voices.clip(body.voice), body.language or config.language,
                            speed=body.speed or 1.0, sink=channel.put if channel else None)
            await run_in_threadpool(engine.check, job)
            future = batches.submit(job)
        except InputError as exc:
            raise ApiError(400, str(exc)) from None
        except QueueFull as exc:
            raise ApiError(429, str(exc), "rate_limit_error", "queue_full") from None
        except Unavailable as exc:
            raise ApiError(503, str(exc), "server_error", "shutting_down") from None
        try:
            if channel is not None:
                return await stream_speech(request, job, future, channel, body.response_format, body.stream_format,
                                           engine.sample_rate)
            wav = await asyncio.wrap_future(future)
        except InputError as exc:
            raise ApiError(400, str(exc)) from None
        except Unavailable as exc:
            raise ApiError(503, str(exc), "server_error", "shutting_down") from None
        except Exception as exc:  # the model failed on this request; the server goes on
            raise ApiError(500, f"speech failed: {type(exc).__name__}: {exc}", "server_error") from None
        audio = await run_in_threadpool(encode_whole, wav, engine.sample_rate, body.response_format)
        rate = output_rate(body.response_format, engine.sample_rate)
        return Response(audio, media_type=MEDIA_TYPES[body.response_format], headers={"x-sample-rate": str(rate)})

    return app


def run_app(app: FastAPI, sock: socket.socket) -> None:
    """Serve `app` with uvicorn on the bound socket `sock` until Ctrl-C or SIGTERM; return once it has stopped.

    From the signal on the app's batch queue is closed: requests waiting for a batch and new ones get 503
    while the batch being spoken finishes (the server keeps listening meanwhile, so a new request is answered,
    not refused at the connection); uvicorn then stops listening and ends once the open requests are
    answered. A second signal stops it at once.
    """
    import uvicorn

    class ClosingServer(uvicorn.Server):
        draining = False

        def handle_exit(self, sig: int, frame: Any) -> None:
            if self.draining:  # a second signal: stop listening now
                super().handle_exit(sig, frame)
                return
            self.draining = True

            def drain() -> None:
                app.state.batches.close()  # waiting requests fail with 503 now; returns once the batch is spoken
                uvicorn.Server.handle_exit(self, sig, frame)

            # a thread: the signal may interrupt the event loop while it holds the queue's lock
            threading.Thread(target=drain, daemon=True).start()

    server = ClosingServer(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=30))
    if threading.current_thread() is threading.main_thread():
        # uvicorn raises the signal it stopped on again once it has stopped: taken here, SIGTERM ends the
        # command as Ctrl-C does, with its summary and exit 0, instead of killing the process
        signal.signal(signal.SIGTERM, lambda _sig, _frame: None)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn re-raises the Ctrl-C it shut down on; the server has stopped cleanly
        pass
