"""The TensorBoard child process the dashboard runs: TensorBoard's own server, behind a secret.

TensorBoard has no login, and a loopback port is open to every local user. So the child answers
only requests that carry the secret its parent gave it (`TOKEN_ENV` in its environment, never on
its command line, where `ps` would show it) in the `TOKEN_HEADER` header; everything else gets
403. The dashboard's proxy adds the header after its own login check, so TensorBoard is reachable
only through the app. TensorBoard's separate data server (a second open port) is not used:
`TensorBoardProcess` starts this module with `--load_fast=false`.

    LINGUAFORGE_TENSORBOARD_TOKEN=… python -m core.tensorboard_server --logdir DIR --host 127.0.0.1 …
"""

from __future__ import annotations

import os
import secrets
import sys
from typing import Any, Callable, Iterable

TOKEN_ENV = "LINGUAFORGE_TENSORBOARD_TOKEN"
TOKEN_HEADER = "X-LinguaForge-TensorBoard"
_WSGI_KEY = "HTTP_" + TOKEN_HEADER.upper().replace("-", "_")
FORBIDDEN = b"TensorBoard is served only through the LinguaForge dashboard: open /tensorboard/ there and log in.\n"

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def require_token(app: WsgiApp, token: str) -> WsgiApp:
    """Return a WSGI app that passes a request to `app` only when its `TOKEN_HEADER` equals `token`
    (compared in constant time), and answers 403 otherwise."""

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if secrets.compare_digest(environ.get(_WSGI_KEY, "").encode(), token.encode()):
            return app(environ, start_response)
        start_response("403 Forbidden", [("Content-Type", "text/plain; charset=utf-8"),
                                          ("Content-Length", str(len(FORBIDDEN)))])
        return [FORBIDDEN]

    return guarded


def main(argv: list[str]) -> int:
    """Serve TensorBoard with TensorBoard's flags `argv`, every request checked against the token in
    `TOKEN_ENV`; return its exit code (2, with a message, when the token is missing)."""
    token = os.environ.pop(TOKEN_ENV, "")  # not inherited by anything TensorBoard starts
    if not token:
        print(f"error: {TOKEN_ENV} is unset; this process is started by the dashboard (app.py).", file=sys.stderr)
        return 2
    from absl import app as absl_app
    from tensorboard import default, main_lib, program

    class GuardedServer(program.WerkzeugServer):
        """TensorBoard's Werkzeug server with every request passing `require_token` first."""

        def __init__(self, wsgi_app: WsgiApp, flags: Any) -> None:
            super().__init__(require_token(wsgi_app, token), flags)

    main_lib.global_init()
    board = program.TensorBoard(plugins=default.get_plugins(), server_class=GuardedServer)
    absl_app.run(board.main, argv=[sys.argv[0], *argv], flags_parser=board.configure)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
