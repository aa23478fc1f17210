"""`serve`: the HTTP speech server for one TTS checkpoint of any family (top-level command)."""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from core.cli.common import LANGUAGE_ARG, SEED_ARG, Result, add_command, float_in, int_in, number_type
from core.numbers import MAX_TEMPERATURE, SPEECH_SECONDS
from core.cli.infer import add_family_options, run_model_dir, speaker_option
from core.paths import CLI_PATH

if TYPE_CHECKING:
    from core.config import Settings
    from core.serve.voices import VoiceFolder

TOKEN_ENV = "LINGUAFORGE_SERVE_TOKEN"


def _read_token(token_file: Path | None) -> str | None:
    """Return the bearer token of --token-file, else of LINGUAFORGE_SERVE_TOKEN; None when neither is set.

    Raises InputError for an unreadable or empty token file, or a token with spaces.
    """
    from core.errors import InputError

    if token_file is not None:
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"--token-file {token_file}: cannot be read ({exc}). Give a readable UTF-8 file "
                             "holding the token.") from None
        where = f"--token-file {token_file}"
    else:
        token = os.environ.get(TOKEN_ENV, "").strip() or None
        where = TOKEN_ENV
    if token is not None and (not token or any(c.isspace() for c in token)):
        raise InputError(f"{where}: the token is empty or holds spaces; write one word (e.g. from `openssl rand -hex 24`).")
    return token


def _bind(host: str, port: int) -> socket.socket:
    """Return a socket bound to (host, port), not yet listening.

    Raises InputError when the address cannot be bound (in use, not this machine's, no permission).
    """
    from core.errors import InputError

    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise InputError(f"--host {host}: not an address of this machine ({exc.strerror}). Use 127.0.0.1 or 0.0.0.0.") from None
    except (UnicodeError, ValueError) as exc:  # a NUL byte, a label too long for IDNA
        raise InputError(f"--host {host!a}: not a host name ({exc}). Use 127.0.0.1 or 0.0.0.0.") from None
    sock = socket.socket(info[0], socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(info[4])
    except OSError as exc:
        sock.close()
        raise InputError(f"--port {port}: cannot listen on {host}:{port} ({exc.strerror}). "
                         "Choose a free port with --port, or stop what uses it.") from None
    return sock


def _serve(args: argparse.Namespace) -> Result:
    """Check every option and path (confined to the roots), bind the port, then load and serve.

    Raises InputError, before the model loads, for a bad option, a missing checkpoint, a path outside
    the roots, a voices folder without clips, an unreadable token, a host beyond this machine without a
    token (unless --without-token) or a port that cannot be bound.
    """
    from core.config import LOOPBACK_HOSTS, load_settings
    from core.errors import InputError
    from core.inference import MAX_TEXT_CHARS
    from core.serve.voices import check_voice_folder

    if args.max_input_chars > MAX_TEXT_CHARS:
        raise InputError(f"--max-input-chars {args.max_input_chars}: one request speaks at most {MAX_TEXT_CHARS} "
                         f"characters, as one synthesize call. Use --max-input-chars {MAX_TEXT_CHARS} or less.")
    token = _read_token(args.token_file)
    if args.host not in LOOPBACK_HOSTS and token is None:
        if not args.without_token:
            raise InputError(f"--host {args.host}: listening beyond this machine needs a bearer token; set {TOKEN_ENV} "
                             "or --token-file (or pass --without-token to serve anyone who reaches the port; a job "
                             "never can).")
        sys.stderr.write(f"warning: serving on {args.host} without a bearer token (--without-token): anyone who reaches "
                         f"this port can use the model.\n")
    settings = load_settings()
    if not args.checkpoint.is_file():
        raise InputError(f"--checkpoint {args.checkpoint}: no such file. Give a TTS checkpoint (.pt, .safetensors).")
    checkpoint = settings.check_inside_roots(args.checkpoint, model_folders=True)
    voices = check_voice_folder(settings.check_inside_roots(args.voices))
    model_dir, args.tokenizer, args.codec = (settings.check_inside_roots(path, model_folders=True) if path else None
                                             for path in (args.model_dir, args.tokenizer, args.codec))
    sock = _bind(args.host, args.port)
    try:
        return _run(args, settings, checkpoint, voices, model_dir, token, sock)
    finally:
        sock.close()


def _run(args: argparse.Namespace, settings: Settings, checkpoint: Path, voices: VoiceFolder, model_dir: Path | None,
         token: str | None, sock: socket.socket) -> Result:
    """Load the engine, serve until stopped, and return how many requests were spoken in how many batches."""
    from core.serve.app import ServerConfig, create_app, run_app
    from core.serve.engine import SpeechSettings, load_engine

    speech = SpeechSettings(args.temperature, args.top_k or None, args.top_p, args.seed, args.max_seconds,
                            dict(args.option))
    engine = load_engine(checkpoint, settings, speech, model_dir or run_model_dir(checkpoint, settings),
                         args.family, args.tokenizer, args.codec, args.device)
    model_id = args.model_name or checkpoint.stem
    config = ServerConfig(model_id, voices, args.max_input_chars, args.queue_limit, args.max_batch, token, args.language,
                          args.body_timeout)
    app = create_app(engine, config)
    sys.stderr.write(f"serving {model_id} ({engine.family}, {engine.sample_rate} Hz, "
                     f"{'batched' if engine.batched else 'one request at a time'}) on http://{args.host}:{args.port}\n")
    sys.stderr.flush()
    run_app(app, sock)
    sizes = app.state.batches.batch_sizes
    data = {"model": model_id, "family": engine.family, "requests": sum(sizes), "batches": len(sizes),
            "largest_batch": max(sizes, default=0)}
    return Result(data, f"stopped after {data['requests']} requests in {data['batches']} batches")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the top-level `serve` command."""
    parser = add_command(
        subparsers, "serve", _serve, help="serve a TTS checkpoint over HTTP (OpenAI's /v1/audio/speech)",
        description=(
            "Loads the checkpoint once and answers POST /v1/audio/speech {model, input, voice, response_format}\n"
            "(wav or flac), GET /v1/models and GET /health. A voice is a reference clip of the --voices folder,\n"
            "named by its file name without extension. Requests that arrive while one batch is spoken queue up\n"
            "(at most --queue-limit; more get 429) and are spoken together, up to --max-batch at a time.\n"
            f"Listens on 127.0.0.1 unless --host says otherwise (another host needs --token-file or {TOKEN_ENV},\n"
            "or --without-token); with a token every route but /health wants `Authorization: Bearer <token>`.\n"
            "A body must arrive within --body-timeout. Stop it with Ctrl-C or SIGTERM: waiting requests get 503."
        ),
    )
    parser.add_argument("--checkpoint", required=True, type=CLI_PATH,
                        help="TTS checkpoint of any family: LinguaForge's own (.pt, pruned .safetensors) or a "
                             "chatterbox/indextts run's, export's or published file")
    parser.add_argument("--voices", required=True, type=CLI_PATH,
                        help="folder of reference clips (wav, flac, …); the voice name is the file name without extension")
    add_family_options(parser)
    parser.add_argument("--tokenizer", default=None, type=CLI_PATH, help="tokenizer file; must match the checkpoint's fingerprint")
    parser.add_argument("--codec", default=None, type=CLI_PATH, help="codec file (own model); must match the checkpoint's fingerprint")
    parser.add_argument("--model-name", default=None, help="the model id clients send (default: the checkpoint's file stem)")
    parser.add_argument("--language", default=None, type=LANGUAGE_ARG, help="language code for text normalisation when a request names none")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int_in(1, 65535), default=8000, help="port to listen on (default 8000)")
    parser.add_argument("--token-file", default=None, type=CLI_PATH,
                        help=f"file holding the bearer token clients must send (default: {TOKEN_ENV}, else no token)")
    parser.add_argument("--without-token", action="store_true",
                        help="allow a --host beyond this machine without a token (anyone who reaches the port may use "
                             "the model; a serve job never may)")
    parser.add_argument("--body-timeout", type=float_in(1.0, 600.0), default=10.0,
                        help="seconds a request's body may take to arrive; a stalled one is answered 408 (default 10)")
    parser.add_argument("--queue-limit", type=int_in(1, 10_000), default=32,
                        help="requests that may wait while a batch is spoken; more are answered 429 (default 32)")
    parser.add_argument("--max-batch", type=int_in(1, 1024), default=8, help="requests spoken together at most (default 8)")
    parser.add_argument("--max-input-chars", type=int_in(1, 1_000_000), default=1000,
                        help="characters of input per request at most; longer is answered 413 (default 1000; "
                             "at most what one synthesize call speaks)")
    parser.add_argument("--temperature", type=float_in(0.0, MAX_TEMPERATURE), default=0.8, help="sampling temperature; 0 = greedy (default 0.8)")
    parser.add_argument("--top-k", type=int_in(0, 1_000_000), default=50, help="own model: keep the k most likely codes; 0 = off (default 50)")
    parser.add_argument("--top-p", type=float_in(0.0, 1.0, low_open=True), default=None, help="own model: nucleus sampling threshold")
    parser.add_argument("--seed", type=SEED_ARG, default=0, help="random seed of each batch (default 0)")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=NUMBER", type=speaker_option,
                        help="a speaker option of a Chatterbox or IndexTTS2 checkpoint, repeatable (as synthesize --option)")
    parser.add_argument("--max-seconds", type=number_type(SPEECH_SECONDS), default=None,
                        help="longest speech of one sentence (own model) or one request (Chatterbox, IndexTTS2); "
                             "default: the model's own limit")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                        help="where the model runs: auto = CUDA when present (default), cpu, or cuda")
