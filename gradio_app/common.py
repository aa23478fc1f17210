"""Helpers every tab uses: the shared context, error-to-message wrapping, workspace path checks."""

from __future__ import annotations

import functools
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, TypeVar

import gradio as gr

from core.config import Settings
from core.errors import InputError, LinguaForgeError
from gradio_app.runner import JobRunner

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

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except gr.Error:
            raise
        except LinguaForgeError as exc:
            raise gr.Error(str(exc), print_exception=False) from None
        except Exception as exc:  # the UI edge: log the traceback, show one line
            LOG.exception("dashboard handler %s failed", fn.__name__)
            raise gr.Error(f"internal error: {exc} (details in the server log)", print_exception=False) from None

    return wrapper  # type: ignore[return-value]


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


def read_jsonl(path: Path, limit: int | None = None) -> list[dict[str, Any]]:
    """Return the JSON objects of a JSON-lines file (the last `limit` when given), skipping bad lines."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    if limit is not None:
        lines = lines[-limit:]
    rows = []
    for line in lines:
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict):
            rows.append(item)
    return rows


def format_seconds(seconds: float | None) -> str:
    """Return a duration as `1h02m`, `3m05s` or `12s`; an em dash when unknown."""
    if seconds is None:
        return "—"
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def job_duration(job: dict[str, Any]) -> float | None:
    """Return how long a job has run (until now while running), or None before it started."""
    started = job.get("started_at")
    if not started:
        return None
    return (job.get("finished_at") or time.time()) - started
