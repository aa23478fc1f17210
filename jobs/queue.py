"""The Huey instance built from settings: SQLite in the workspace, or Redis for a shared queue."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from huey import Huey, RedisHuey, SqliteHuey

from core.config import Settings
from core.errors import InputError
from jobs.records import damaged_database_error, is_damaged_database

QUEUE_NAME = "linguaforge"
SQLITE_TIMEOUT_S = 30.0


def jobs_db_path(settings: Settings) -> Path:
    """Return the workspace's `jobs.sqlite`, holding job records (and the SQLite queue)."""
    return settings.workspace / "jobs.sqlite"


def queue_url(settings: Settings) -> str | None:
    """Return the configured `queue.url`, or None for the SQLite queue.

    Raises InputError when the URL is set but is not a redis:// (or rediss://, unix://) URL.
    """
    url = settings.get("queue.url")
    if url in (None, "", "sqlite"):
        return None
    if not isinstance(url, str) or not url.startswith(("redis://", "rediss://", "unix://")):
        raise InputError(
            f"queue.url: {url!r} is not supported. Use null for SQLite in the workspace "
            "or redis://HOST:PORT/DB for a shared Redis queue."
        )
    return url


def build_huey(settings: Settings) -> Huey:
    """Return a Huey instance (results off, no locks) for the queue the settings name.

    Raises InputError for an unsupported queue.url, a workspace where the SQLite queue cannot be
    opened, or a damaged `jobs.sqlite` (naming the file and how to recover).
    """
    url = queue_url(settings)
    if url is None:
        path = jobs_db_path(settings)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            return SqliteHuey(QUEUE_NAME, filename=str(path), results=False, timeout=SQLITE_TIMEOUT_S)
        except sqlite3.DatabaseError as exc:
            if is_damaged_database(exc):
                raise damaged_database_error(path, exc) from exc
            if not isinstance(exc, sqlite3.OperationalError):
                raise
            raise InputError(
                f"{path.parent}: not writable, so the job queue {path.name} cannot be opened ({exc}). "
                "Make the workspace writable or point LINGUAFORGE_WORKSPACE at a writable folder."
            ) from exc
    return RedisHuey(QUEUE_NAME, url=url, results=False)


def describe(settings: Settings) -> dict[str, Any]:
    """Return a short description of the queue: backend and location."""
    url = queue_url(settings)
    if url is None:
        return {"backend": "sqlite", "location": str(jobs_db_path(settings))}
    return {"backend": "redis", "location": url}
