"""The dashboard's door checks, applied to every request before Gradio sees it.

Two ASGI middlewares, each with one job:

- `LoginGate`: with auth configured, a visitor without a session gets the login page and the
  files that page needs, nothing else (no API description, no dropdown choices, no heartbeat,
  no cancel); every other request answers 401.
- `FileParamGuard`: every file parameter of every Gradio endpoint (a `{"path": …}` object anywhere
  in a JSON request body under `/gradio_api/`) must name a file uploaded to this server's private
  upload folder, or a path inside the workspace or a configured data root. Anything else — another
  server path, a symlink leading out, a URL — is refused with 400 before a handler runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterator

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.confine import is_inside, real_path
from core.errors import InputError

API_PREFIX = "/gradio_api/"
UPLOAD_ROUTE = "/gradio_api/upload"
MAX_JSON_BODY = 16 * 1024 * 1024
LOGIN_PAGES = {"/", ""}
ANONYMOUS_PATHS = {
    "/login", "/login/", "/logout", "/favicon.ico", "/theme.css", "/manifest.json",
    "/gradio_api/login_check", "/gradio_api/login_check/",
}
ANONYMOUS_PREFIXES = ("/assets/", "/static/", "/svelte/", "/gradio_api/static/")


def check_file_param(value: Any, upload_dir: Path, allowed_roots: list[Path]) -> Path:
    """Return the resolved path of a file parameter when it lies in `upload_dir` or an allowed root.

    Relative paths resolve against the server's working directory, as Gradio would open them;
    symlinks are followed before the check. Raises InputError naming the value otherwise
    (URLs and non-strings included).
    """
    if not isinstance(value, str) or not value or "://" in value:
        raise InputError(f"file parameter {value!r}: not a file of this server. Upload the file instead.")
    if is_inside(value, [upload_dir, *allowed_roots]):
        return real_path(value)
    raise InputError(
        f"file parameter {value!r}: neither uploaded to this dashboard nor inside the workspace or a data root. "
        "Upload the file, or move it into the workspace."
    )


def iter_file_paths(node: Any) -> Iterator[Any]:
    """Yield the `path` value of every object in a decoded JSON body that carries one."""
    if isinstance(node, dict):
        if "path" in node:
            yield node["path"]
        for value in node.values():
            yield from iter_file_paths(value)
    elif isinstance(node, list):
        for value in node:
            yield from iter_file_paths(value)


async def _read_body(receive: Receive) -> tuple[bytes, bool]:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), False
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_JSON_BODY:
            return b"", True
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), False


def _replay(body: bytes) -> Receive:
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return {"type": "http.disconnect"}

    return receive


class FileParamGuard:
    """ASGI middleware: refuse Gradio API calls whose file parameters point outside the allowed folders."""

    def __init__(self, app: ASGIApp, upload_dir: Path, allowed_roots: list[Path]) -> None:
        self.app = app
        self.upload_dir = upload_dir
        self.allowed_roots = [root.resolve() for root in allowed_roots]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if (scope["type"] != "http" or scope.get("method") != "POST" or not path.startswith(API_PREFIX)
                or path.rstrip("/") == UPLOAD_ROUTE):
            await self.app(scope, receive, send)
            return
        body, too_large = await _read_body(receive)
        if too_large:
            await PlainTextResponse("Request body too large.", status_code=413)(scope, receive, send)
            return
        try:
            decoded = json.loads(body) if body else None
        except (ValueError, UnicodeDecodeError):
            decoded = None
        try:
            for value in iter_file_paths(decoded):
                check_file_param(value, self.upload_dir, self.allowed_roots)
        except InputError as exc:
            await JSONResponse({"error": str(exc), "detail": str(exc)}, status_code=400)(scope, receive, send)
            return
        await self.app(scope, _replay(body), send)


class LoginGate:
    """ASGI middleware: without a session, only the login page and its static files are served.

    `authorized(request)` decides; `login_page(request)` renders the page shown instead of `/`.
    """

    def __init__(
        self,
        app: ASGIApp,
        authorized: Callable[[Request], bool],
        login_page: Callable[[Request], Awaitable[HTMLResponse] | HTMLResponse],
    ) -> None:
        self.app = app
        self.authorized = authorized
        self.login_page = login_page

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        request = Request(scope)
        if (path in ANONYMOUS_PATHS or path.startswith(ANONYMOUS_PREFIXES)) or self.authorized(request):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope.get("method") == "GET" and path in LOGIN_PAGES:
            page = self.login_page(request)
            if not isinstance(page, HTMLResponse):
                page = await page
            await page(scope, receive, send)
            return
        await PlainTextResponse("Not authenticated: log in to the dashboard first.", status_code=401)(
            scope, receive, send
        )
