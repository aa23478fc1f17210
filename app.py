"""LinguaForge dashboard: the embedded job worker, TensorBoard and the Gradio app on one server.

    python app.py [--host 127.0.0.1] [--port 7860] [--auth user:password] [--workspace DIR] [--config FILE]

Binds to 127.0.0.1 unless --host says otherwise. Auth comes from --auth, else the
LINGUAFORGE_UI_AUTH environment variable, else `ui.auth` in the config; with it, every route
(the TensorBoard proxy included) needs the login. Prints the address once the server is up.
A damaged workspace file never stops the start: a dataset whose manifest has unreadable lines is
named on stderr (and in the Dataset tab) and listed with its readable rows.
SIGTERM and SIGINT stop it cleanly at any point (worker, TensorBoard and uploads folder included);
a TensorBoard left by an app that was killed is stopped at the next start (`logs/tensorboard/`).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import uvicorn

from core.cli.catalogue import cli_catalogue
from core.cli.common import int_in
from core.config import WORKSPACE_ENV, load_settings
from core.errors import InputError, LinguaForgeError
from core.tensorboard_proc import TensorBoardProcess
from core.uploads import upload_limit_bytes
from core.workspace_files import damaged_datasets
from gradio_app.common import UIContext
from gradio_app.runner import JobRunner
from gradio_app.server import TENSORBOARD_PREFIX, build_server, parse_auth
from gradio_app.ui import build_ui

AUTH_ENV = "LINGUAFORGE_UI_AUTH"
UPLOAD_DIR_ENV = "GRADIO_TEMP_DIR"
SHUTDOWN_TIMEOUT_S = 3


def build_parser() -> argparse.ArgumentParser:
    """Return the command-line parser of app.py."""
    parser = argparse.ArgumentParser(prog="app.py", description="Start the LinguaForge dashboard.")
    parser.add_argument("--host", default=None, help="address to bind (default: ui.host, 127.0.0.1)")
    parser.add_argument("--port", type=int_in(1, 65535), default=None, help="port to bind (default: ui.port, 7860)")
    parser.add_argument("--auth", default=None, help=f"require login `user:password` (or set {AUTH_ENV})")
    parser.add_argument("--workspace", default=None, help=f"workspace folder (default: config or {WORKSPACE_ENV})")
    parser.add_argument("--config", default=None,
                        help="a YAML file merged over config/default.yaml; the dashboard's jobs load it too")
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
    upload_limit = upload_limit_bytes(settings)
    _check_port_free(host, port)
    for name, damage in damaged_datasets(settings).items():  # listed all the same: their readable rows are shown
        sys.stderr.write(f"warning: dataset {name}: {damage}; those lines are skipped. Re-import the dataset to mend it.\n")

    runner = JobRunner(settings, cli_catalogue())  # first: a damaged jobs.sqlite stops the start here
    private_uploads = _use_private_upload_folder()
    tensorboard = TensorBoardProcess(
        settings.workspace / "runs", TENSORBOARD_PREFIX, log_file=settings.workspace / "logs" / "tensorboard.log",
        records=settings.workspace / "logs" / "tensorboard",
    )
    server: list[uvicorn.Server] = []
    stopping = threading.Event()

    def request_stop(signum: int, frame: object) -> None:  # noqa: ARG001
        # uvicorn handles SIGTERM while it serves and raises it again once it has stopped: this handler
        # takes it then (and during start-up), so the cleanup below always runs.
        stopping.set()
        for running in server:
            running.should_exit = True

    try:
        if not args.no_worker:
            runner.start_worker()  # its consumer sets handlers for SIGTERM too: ours replaces them from here
        signal.signal(signal.SIGTERM, request_stop)
        tensorboard.start()
        ctx = UIContext(settings=settings, runner=runner, tensorboard_path=TENSORBOARD_PREFIX + "/")
        app = build_server(build_ui(ctx), tensorboard, auth, settings.allowed_roots, upload_limit)
        server.append(uvicorn.Server(uvicorn.Config(
            app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=SHUTDOWN_TIMEOUT_S
        )))
        shown = f"[{host}]" if ":" in host else host
        threading.Thread(
            target=_announce_when_started, args=(server[0], f"http://{shown}:{port}"), daemon=True
        ).start()
        if not stopping.is_set():
            server[0].run()
    finally:
        tensorboard.stop()
        runner.stop_worker()
        if private_uploads is not None:
            shutil.rmtree(private_uploads, ignore_errors=True)
    return 0


def _use_private_upload_folder() -> Path | None:
    """Point Gradio's upload folder at a fresh folder only this server writes; return it (None when preset).

    The file-parameter guard accepts uploads from this folder alone, so files uploaded to another
    Gradio app on the machine, or an earlier run, are not accepted as uploads.
    """
    if os.environ.get(UPLOAD_DIR_ENV):
        return None
    folder = Path(tempfile.mkdtemp(prefix="linguaforge-uploads-"))
    os.environ[UPLOAD_DIR_ENV] = str(folder)
    return folder


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


def exit_now(code: int) -> None:
    """Flush output and end the process with `code`, skipping interpreter teardown.

    By then the worker, its jobs and TensorBoard are stopped; tearing down torch and Gradio's
    modules only adds seconds (over 10 on a loaded machine) to a shutdown that must end promptly.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
