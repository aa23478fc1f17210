"""LinguaForge dashboard: the embedded job worker, TensorBoard and the Gradio app on one server.

    python app.py [--host 127.0.0.1] [--port 7860] [--auth user:password] [--workspace DIR] [--config FILE]

Binds to 127.0.0.1 unless --host says otherwise. Auth comes from --auth, else the
LINGUAFORGE_UI_AUTH environment variable, else `ui.auth` in the config; with it, every route
(the TensorBoard proxy included) needs the login. Prints the address once the server is up.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import threading
import time
from pathlib import Path

import uvicorn

from core.cli.catalogue import cli_catalogue
from core.config import WORKSPACE_ENV, load_settings
from core.errors import InputError, LinguaForgeError
from core.tensorboard_proc import TensorBoardProcess
from gradio_app.common import UIContext
from gradio_app.runner import JobRunner
from gradio_app.server import TENSORBOARD_PREFIX, build_server, parse_auth
from gradio_app.ui import build_ui

AUTH_ENV = "LINGUAFORGE_UI_AUTH"


def build_parser() -> argparse.ArgumentParser:
    """Return the command-line parser of app.py."""
    parser = argparse.ArgumentParser(prog="app.py", description="Start the LinguaForge dashboard.")
    parser.add_argument("--host", default=None, help="address to bind (default: ui.host, 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None, help="port to bind (default: ui.port, 7860)")
    parser.add_argument("--auth", default=None, help=f"require login `user:password` (or set {AUTH_ENV})")
    parser.add_argument("--workspace", default=None, help=f"workspace folder (default: config or {WORKSPACE_ENV})")
    parser.add_argument("--config", default=None, help="a YAML file merged over config/default.yaml")
    parser.add_argument("--no-worker", action="store_true", help="do not start the embedded job worker")
    return parser


def _check_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise InputError(f"{host}:{port} is not available ({exc.strerror}); pass another --port.") from exc


def _announce_when_started(server: uvicorn.Server, url: str) -> None:
    while not server.started and not server.should_exit:
        time.sleep(0.1)
    if server.started:
        print(f"LinguaForge dashboard running on {url}", flush=True)


def serve(args: argparse.Namespace) -> int:
    """Start worker, TensorBoard and the web server; block until SIGINT/SIGTERM; stop everything."""
    if args.workspace:
        os.environ[WORKSPACE_ENV] = str(Path(args.workspace).expanduser().resolve())
    settings = load_settings(args.config)
    settings.workspace.mkdir(parents=True, exist_ok=True)
    host = args.host or settings.get("ui.host", "127.0.0.1") or "127.0.0.1"
    port = int(args.port or settings.get("ui.port", 7860) or 7860)
    auth = parse_auth(args.auth or os.environ.get(AUTH_ENV) or settings.get("ui.auth"))
    _check_port_free(host, port)

    runner = JobRunner(settings, cli_catalogue())
    tensorboard = TensorBoardProcess(
        settings.workspace / "runs", TENSORBOARD_PREFIX, log_file=settings.workspace / "logs" / "tensorboard.log"
    )
    try:
        if not args.no_worker:
            runner.start_worker()
        tensorboard.start()
        ctx = UIContext(settings=settings, runner=runner, tensorboard_path=TENSORBOARD_PREFIX + "/")
        app = build_server(build_ui(ctx), tensorboard, auth, settings.allowed_roots)
        server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
        shown = f"[{host}]" if ":" in host else host
        threading.Thread(
            target=_announce_when_started, args=(server, f"http://{shown}:{port}"), daemon=True
        ).start()
        server.run()
    finally:
        tensorboard.stop()
        runner.stop_worker()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and run the dashboard; return the exit code (2 for bad input)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    args = build_parser().parse_args(argv)
    try:
        return serve(args)
    except LinguaForgeError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
