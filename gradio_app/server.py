"""The web server: a FastAPI app with the TensorBoard proxy route, Gradio mounted beside it.

Every route shares one login: Gradio's own login form sets a session cookie, and the
TensorBoard proxy accepts that cookie (or HTTP Basic credentials for scripts). Without auth
configured, everything is open — which is why the server binds to 127.0.0.1 by default.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from pathlib import Path

import fastapi
import gradio as gr
import httpx
from fastapi import Request
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from gradio import route_utils
from gradio.routes import App as GradioApp
from gradio.routes import templates as gradio_templates
from gradio.utils import get_upload_folder
from starlette.routing import Mount

from core.errors import InputError
from core.tensorboard_proc import TensorBoardProcess
from gradio_app.guard import FileParamGuard, LoginGate
from gradio_app.style import CSS, STATIC_DIR, STATIC_ROUTE

TENSORBOARD_PREFIX = "/tensorboard"
AUTH_MESSAGE = "LinguaForge dashboard: log in with the user name and password this dashboard was started with."
_HOP_HEADERS = {
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
    "transfer-encoding", "upgrade", "content-length", "content-encoding", "host",
}


def parse_auth(value: str | None) -> tuple[str, str] | None:
    """Return (user, password) from `user:password`, or None for an empty value.

    Raises InputError when the value has no colon or an empty user or password.
    """
    if not value:
        return None
    user, sep, password = value.partition(":")
    if not sep or not user or not password:
        raise InputError(f"auth {value!r}: expected `user:password` with both parts non-empty.")
    return user, password


def _gradio_app(app: fastapi.FastAPI) -> GradioApp | None:
    for route in app.routes:
        if isinstance(route, Mount) and isinstance(route.app, GradioApp):
            return route.app
    return None


def _basic_auth_ok(request: Request, auth: tuple[str, str]) -> bool:
    header = request.headers.get("authorization", "")
    if not header.lower().startswith("basic "):
        return False
    try:
        user, _, password = base64.b64decode(header[6:]).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return False
    return secrets.compare_digest(user, auth[0]) and secrets.compare_digest(password, auth[1])


def is_authorized(app: fastapi.FastAPI, request: Request, auth: tuple[str, str] | None) -> bool:
    """Return True when no auth is configured, or the request carries Gradio's login cookie or Basic auth."""
    if auth is None:
        return True
    if _basic_auth_ok(request, auth):
        return True
    gradio_app = _gradio_app(app)
    if gradio_app is None:
        return False
    for name in (f"access-token-{gradio_app.cookie_id}", f"access-token-unsecure-{gradio_app.cookie_id}"):
        token = request.cookies.get(name)
        if token and token in gradio_app.tokens:
            return True
    return False


def login_page(request: Request) -> HTMLResponse:
    """Return Gradio's login page for a visitor without a session: its form only, no app config or API."""
    config = {
        "auth_required": True,
        "auth_message": AUTH_MESSAGE,
        "space_id": None,
        "root": route_utils.get_root_url(request=request, route_path="/", root_path=None),
        "page": {"": {"layout": {}}},
        "pages": [""],
        "components": [],
        "dependencies": [],
        "current_page": "",
    }
    return gradio_templates.TemplateResponse(
        request=request,
        name="frontend/index.html",
        context={"base_url": "./", "config": config, "gradio_api_info": {}},
    )


def build_server(
    blocks: gr.Blocks,
    tensorboard: TensorBoardProcess,
    auth: tuple[str, str] | None,
    allowed_paths: list[Path],
    max_file_size: int,
) -> fastapi.FastAPI:
    """Return the FastAPI app: `/tensorboard/…` proxied to `tensorboard`, the dashboard's static files (its
    webfont) at `/lf-static/`, Gradio at `/`, one shared login. Gradio refuses a file over `max_file_size` bytes
    (the settings' upload limit, `core.uploads.upload_limit_bytes`) when it is uploaded.

    Every request passes `guard.LoginGate` (with auth) and `guard.FileParamGuard` first: file
    parameters must be uploads to Gradio's upload folder or lie inside `allowed_paths`.
    """
    app = fastapi.FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    app.mount(STATIC_ROUTE, StaticFiles(directory=STATIC_DIR), name="lf-static")
    client = httpx.AsyncClient(timeout=60.0)

    @app.api_route(TENSORBOARD_PREFIX, methods=["GET"])
    async def tensorboard_root() -> Response:
        return RedirectResponse(TENSORBOARD_PREFIX + "/")

    @app.api_route(TENSORBOARD_PREFIX + "/{path:path}", methods=["GET", "POST", "HEAD"])
    async def tensorboard_proxy(path: str, request: Request) -> Response:
        if not is_authorized(app, request, auth):
            return PlainTextResponse("Not authenticated: log in to the dashboard first.", status_code=401)
        if not tensorboard.is_alive():
            tensorboard.ensure_running()
            return PlainTextResponse("TensorBoard is restarting; reload in a few seconds.", status_code=503)
        dropped = _HOP_HEADERS | {"cookie", "authorization"} | {name.lower() for name in tensorboard.headers}
        headers = {k: v for k, v in request.headers.items() if k.lower() not in dropped}
        headers.update(tensorboard.headers)  # TensorBoard answers only requests with this app's token
        url = f"{tensorboard.base_url}/{path}"
        try:
            upstream = await client.request(
                request.method, url, params=request.query_params, headers=headers, content=await request.body()
            )
        except httpx.HTTPError as exc:
            return PlainTextResponse(f"TensorBoard is not reachable ({exc}); reload in a few seconds.", status_code=503)
        out_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_HEADERS}
        return Response(upstream.content, status_code=upstream.status_code, headers=out_headers)

    @app.on_event("shutdown")
    async def close_client() -> None:
        await client.aclose()

    gr.mount_gradio_app(
        app,
        blocks,
        path="/",
        auth=auth,
        auth_message=AUTH_MESSAGE,
        allowed_paths=[str(p) for p in allowed_paths],
        max_file_size=max_file_size,
        show_error=True,
        footer_links=[],
        run_history=False,
        ssr_mode=False,
        css=CSS,
    )
    app.add_middleware(FileParamGuard, upload_dir=Path(get_upload_folder()), allowed_roots=allowed_paths)
    if auth is not None:
        app.add_middleware(LoginGate, authorized=lambda request: is_authorized(app, request, auth), login_page=login_page)
    return app
