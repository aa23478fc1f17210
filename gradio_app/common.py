"""Helpers every tab uses: the shared context, error-to-message wrapping, workspace path checks."""

from __future__ import annotations

import functools
import inspect
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, TypeVar

import gradio as gr

from core.config import Settings
from core.errors import InputError, LinguaForgeError
from core.runs import progress_view
from gradio_app.runner import JobRunner
from gradio_app.runner import FINAL_STATUSES, JobRunner

LOG = logging.getLogger("linguaforge.ui")
F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class UIContext:
    """What every tab needs: the settings (workspace, roots), the job runner, the TensorBoard path."""

    settings: Settings
    runner: JobRunner
    tensorboard_path: str = "/tensorboard/"


def ui_action(fn: F) -> F:
    """Wrap a Gradio handler so errors reach the user as a message, never as a stack trace.

    LinguaForgeError messages are shown as they are; anything else is logged with its traceback
    on the server and shown as a one-line internal error.
    """

    def to_message(exc: Exception) -> gr.Error:
        if isinstance(exc, gr.Error):
            return exc
        if isinstance(exc, LinguaForgeError):
            return gr.Error(str(exc), print_exception=False)
        LOG.error("dashboard handler %s failed", fn.__name__, exc_info=exc)
        return gr.Error(f"internal error: {exc} (details in the server log)", print_exception=False)

    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def generator(*args: Any, **kwargs: Any) -> Iterator[Any]:
            try:
                yield from fn(*args, **kwargs)
            except Exception as exc:  # the UI edge: a message, never a stack trace
                raise to_message(exc) from None

        return generator  # type: ignore[return-value]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # the UI edge: a message, never a stack trace
            raise to_message(exc) from None

    return wrapper  # type: ignore[return-value]


def job_line(job: dict[str, Any]) -> str:
    """Return a one-line Markdown status of a job: id, kind, status, progress (while running), error."""
    parts = [f"Job `{job['id']}` ({job['kind']}): **{job['status']}**"]
    view = progress_view(job.get("progress"), job_status=job["status"])
    if job.get("status") == "running" and view.fraction is not None:
        parts.append(view.text())
    if job.get("error"):
        parts.append(f"— {job['error']}")
    return " ".join(parts)


def follow_job(runner: JobRunner, job_id: str, poll: float = 1.0) -> Iterator[dict[str, Any]]:
    """Yield the job's record every `poll` seconds until it reaches a final status (the last one yielded)."""
    while True:
        job = runner.get(job_id)
        yield job
        if job["status"] in FINAL_STATUSES:
            return
        time.sleep(poll)


def require_success(job: dict[str, Any]) -> dict[str, Any]:
    """Return the job's artifacts (its command's JSON output) when it succeeded; raise InputError otherwise."""
    if job["status"] != "succeeded":
        raise InputError(f"job {job['id']} ({job['kind']}) {job['status']}: {job.get('error') or 'no message'}. "
                         "Its log is in the Jobs tab.")
    return job.get("artifacts") or {}


def paths_param(settings: Settings, value: str | None, what: str) -> list[str]:
    """Return the comma-separated paths of a form field, each checked inside the workspace and existing."""
    items = [item.strip() for item in (value or "").split(",") if item.strip()]
    if not items:
        raise InputError(f"{what}: empty. Give one or more paths inside the workspace, separated by commas.")
    return [str(inside_workspace(settings, item, what)) for item in items]


def output_param(settings: Settings, value: str | None, what: str) -> str:
    """Return an output path typed in a form, resolved inside the workspace (it need not exist)."""
    return str(inside_workspace(settings, value, what, must_exist=False))


def inside_workspace(settings: Settings, value: str | None, what: str, must_exist: bool = True) -> Path:
    """Return the form value `value` resolved inside the workspace or a configured data root.

    Raises InputError when it is empty, lies outside the allowed folders, or (with
    `must_exist`) does not exist.
    """
    text = (value or "").strip()
    if not text:
        raise InputError(f"{what}: empty. Type a path inside the workspace ({settings.workspace}).")
    path = settings.check_inside_roots(text)
    if must_exist and not path.exists():
        raise InputError(f"{what}: {path} does not exist. Check the path (relative paths start at the workspace).")
    return path


def relative(settings: Settings, path: Path | str) -> str:
    """Return `path` relative to the workspace when it lies inside it, else as an absolute string."""
    resolved = Path(path).resolve()
    try:
        return str(resolved.relative_to(settings.workspace))
    except ValueError:
        return str(resolved)


def workspace_files(settings: Settings, patterns: Iterable[str]) -> list[str]:
    """Return workspace-relative paths matching any of the glob `patterns`, sorted, for dropdowns."""
    found: set[str] = set()
    for pattern in patterns:
        for path in settings.workspace.glob(pattern):
            if path.is_file() and not path.name.endswith(".tmp"):
                found.add(relative(settings, path))
    return sorted(found)


def job_duration(job: dict[str, Any]) -> float | None:
    """Return how long a job has run (until now while running), or None before it started."""
    started = job.get("started_at")
    if not started:
        return None
    return (job.get("finished_at") or time.time()) - started
