"""The jobs table: one row per job in the workspace's `jobs.sqlite`.

Every access opens a short-lived connection in WAL mode with a busy timeout, and every
statement is retried with backoff while SQLite reports "database is locked" or "busy", so
that error never escapes to a caller even with many submitters and workers at once.
A job's state changes only through the transition methods of `JobStore` (the table of
states and transitions is `jobs.states`). A damaged database file (not SQLite, or a
malformed page) is an InputError naming the file and how to recover, never a traceback.
"""

from __future__ import annotations

import json
import random
import shlex
import sqlite3
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

from core.errors import InputError, InternalError
from jobs.states import CANCELLED, FAILED, FINAL, INITIAL, INTERRUPTED, QUEUED, RUNNING, transition

JSON_FIELDS = ("params", "argv", "progress", "artifacts")
BUSY_TIMEOUT_S = 30.0
RETRY_DEADLINE_S = 120.0

SCHEMA = """
create table if not exists jobs (
    id text primary key,
    kind text not null,
    params text not null,
    argv text not null,
    status text not null,
    resume text not null default 'never',
    gpu integer not null default 0,
    nproc integer not null default 1,
    run_dir text,
    progress text not null default '{}',
    artifacts text not null default '{}',
    error text,
    log_path text not null,
    progress_path text not null,
    settings_path text,
    created_at real not null,
    started_at real,
    finished_at real,
    worker text,
    pid integer,
    pid_start text,
    exit_code integer,
    attempts integer not null default 0,
    interruptions integer not null default 0,
    cancel_requested integer not null default 0,
    waiting text
);
"""
INDEXES = """
create index if not exists jobs_status on jobs (status);
create index if not exists jobs_created on jobs (created_at);
"""

T = TypeVar("T")
REQUEUED_FIELDS = {"cancel_requested": 0, "finished_at": None, "pid": None, "waiting": None}  # what `resume` clears
DAMAGE_CODES = (11, 26)  # SQLITE_CORRUPT ("database disk image is malformed"), SQLITE_NOTADB ("file is not a database")


def table_columns() -> dict[str, str]:
    """Return the jobs table's columns as {name: definition}, parsed from SCHEMA.

    Used to add columns that a workspace created by an older LinguaForge lacks.
    """
    body = SCHEMA.split("create table if not exists jobs (", 1)[1].split(");", 1)[0]
    columns = {}
    for line in body.strip().splitlines():
        name, definition = line.strip().rstrip(",").split(" ", 1)
        columns[name] = definition.replace(" primary key", "")
    return columns


def with_busy_retry(action: Callable[[], T], what: str, deadline_s: float = RETRY_DEADLINE_S) -> T:
    """Run `action`, retrying with backoff while SQLite reports a locked or busy database.

    Returns what `action` returns. Raises InternalError naming `what` when the database stays
    locked past `deadline_s`; other errors propagate unchanged.
    """
    deadline = time.monotonic() + deadline_s
    delay = 0.05
    while True:
        try:
            return action()
        except sqlite3.OperationalError as exc:
            text = str(exc).lower()
            if "locked" not in text and "busy" not in text:
                raise
            if time.monotonic() > deadline:
                raise InternalError(
                    f"{what}: the jobs database stayed locked for {deadline_s:.0f}s. "
                    "Check for a stuck process holding it open."
                ) from exc
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 1.0)


def is_damaged_database(exc: BaseException) -> bool:
    """Return True when `exc` is SQLite reporting a damaged file: not a database, or a malformed page."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, sqlite3.DatabaseError) and code is not None and code & 0xFF in DAMAGE_CODES


def damaged_database_error(path: Path, detail: object) -> InputError:
    """Return the InputError for a damaged jobs database `path`: what SQLite said (`detail`) and how to recover."""
    aside = shlex.quote(str(path.parent / "jobs-damaged"))
    return InputError(
        f"{path}: the jobs database is damaged ({detail}). Move it aside with its -wal and -shm files "
        f"(`mkdir {aside} && mv {shlex.quote(str(path))}* {aside}/`) and start again: "
        "the job history is lost; runs, checkpoints, datasets and job logs are not."
    )


def new_job_id() -> str:
    """Return a fresh 12-hex-digit job id."""
    return uuid.uuid4().hex[:12]


class JobStore:
    """The jobs table in one SQLite file; safe to use from many threads and processes."""

    def __init__(self, path: Path) -> None:
        """Open (creating or migrating) the jobs table in `path`.

        Raises InputError when the workspace is not writable or the file is damaged.
        """
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._retry(self._create)

    def _create(self) -> None:
        with self._connect() as conn:
            problems = [row[0] for row in conn.execute("pragma quick_check")]
            if problems != ["ok"]:  # a malformed page anywhere (the queue's tables too), found before any work
                raise damaged_database_error(self.path, "; ".join(problems[:3]))
            conn.executescript(SCHEMA)
            present = {row["name"] for row in conn.execute("pragma table_info(jobs)")}
            for name, definition in table_columns().items():
                if name not in present:
                    if "default" not in definition:
                        definition = definition.replace(" not null", "")
                    conn.execute(f"alter table jobs add column {name} {definition}")
            conn.executescript(INDEXES)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:
            conn.execute(f"pragma busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
            conn.execute("pragma journal_mode=wal")
            conn.row_factory = sqlite3.Row
            yield conn
        finally:
            conn.close()

    def _retry(self, action: Callable[[], T]) -> T:
        try:
            return with_busy_retry(action, str(self.path))
        except sqlite3.DatabaseError as exc:
            if is_damaged_database(exc):
                raise damaged_database_error(self.path, exc) from exc
            if not isinstance(exc, sqlite3.OperationalError):
                raise
            text = str(exc).lower()
            if "readonly" in text or "read-only" in text or "unable to open" in text or "disk i/o" in text:
                raise InputError(
                    f"{self.path.parent}: not writable, so the jobs database {self.path.name} cannot be used ({exc}). "
                    "Make the workspace writable or point LINGUAFORGE_WORKSPACE at a writable folder."
                ) from exc
            raise

    def _write(self, sql: str, args: tuple[Any, ...]) -> int:
        def run() -> int:
            with self._connect() as conn:
                conn.execute("begin immediate")
                try:
                    count = conn.execute(sql, args).rowcount
                    conn.execute("commit")
                except BaseException:
                    conn.execute("rollback")
                    raise
                return count

        return self._retry(run)

    def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        def run() -> list[dict[str, Any]]:
            with self._connect() as conn:
                return [_decode(row) for row in conn.execute(sql, args).fetchall()]

        return self._retry(run)

    def insert(self, job: dict[str, Any]) -> dict[str, Any]:
        """Insert a new job (fields of the jobs table) in the initial state, `queued`; return the stored row."""
        row = dict(job)
        row.setdefault("id", new_job_id())
        row["status"] = INITIAL
        row.setdefault("created_at", time.time())
        for key in JSON_FIELDS:
            if key in row:
                row[key] = json.dumps(row[key], default=str)
        columns = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        self._write(f"insert into jobs ({columns}) values ({marks})", tuple(row.values()))
        return self.get(row["id"])

    def get(self, job_id: str) -> dict[str, Any]:
        """Return the job `job_id` as a mapping.

        Raises InputError when no such job exists.
        """
        rows = self._read("select * from jobs where id = ?", (job_id,))
        if not rows:
            raise InputError(f"no job with id {job_id!r}. Run `python -m core jobs list` to see the ids.")
        return rows[0]

    def list(self, status: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        """Return jobs newest first, optionally only those with `status`, at most `limit`."""
        sql = "select * from jobs"
        args: tuple[Any, ...] = ()
        if status is not None:
            sql += " where status = ?"
            args = (status,)
        sql += " order by created_at desc, rowid desc"
        if limit is not None:
            sql += f" limit {int(limit)}"
        return self._read(sql, args)

    def update(self, job_id: str, **fields: Any) -> bool:
        """Set `fields` (its PID, its progress, …) on job `job_id` in whatever state it is; return True when it exists.

        The status itself changes only through a transition method (claim, reject, finish,
        interrupt, cancel, resume, auto_resume): raises ValueError when `fields` holds `status`.
        """
        if "status" in fields:
            raise ValueError("a job's status changes only through a JobStore transition method (see jobs.states)")
        return self._set(job_id, None, fields)

    def _set(self, job_id: str, when_status: tuple[str, ...] | None, fields: dict[str, Any],
             increment: tuple[str, ...] = ()) -> bool:
        for key in JSON_FIELDS:
            if key in fields:
                fields[key] = json.dumps(fields[key], default=str)
        assignments = ", ".join([*(f"{key} = ?" for key in fields), *(f"{key} = {key} + 1" for key in increment)])
        sql = f"update jobs set {assignments} where id = ?"
        args: tuple[Any, ...] = (*fields.values(), job_id)
        if when_status:
            sql += f" and status in ({', '.join('?' for _ in when_status)})"
            args = (*args, *when_status)
        return self._write(sql, args) > 0

    def _move(self, job_id: str, name: str, target: str, fields: dict[str, Any], increment: tuple[str, ...] = ()) -> bool:
        """The one place a job's state changes: to `target` by transition `name`, with `fields`.

        Returns True when the job was in one of the transition's source states (and so moved).
        """
        return self._set(job_id, transition(name, target).sources, {**fields, "status": target}, increment)

    def claim(self, job_id: str, worker: str, settings_path: str | None) -> bool:
        """queued → running for `worker`: a fresh attempt (counted), no error or exit code yet, run with the
        settings file `settings_path` (recorded). Returns True when claimed."""
        return self._move(job_id, "claim", RUNNING, {
            "started_at": time.time(), "finished_at": None, "worker": worker, "error": None, "exit_code": None,
            "settings_path": settings_path, "waiting": None}, increment=("attempts",))

    def wait_for(self, job_id: str, resource: str) -> bool:
        """Record on a queued job what its worker found busy (a lane of `jobs.lanes`, or its `device` slot); the
        record keeps it until the job is claimed. Returns True when the job is still queued."""
        return self._set(job_id, (QUEUED,), {"waiting": resource})

    def reject(self, job_id: str, error: str) -> bool:
        """queued → failed without running (a damaged record, or more GPU slots than the worker has), with `error`.
        Returns True when it moved."""
        return self._move(job_id, "reject", FAILED, {"finished_at": time.time(), "error": error})

    def finish(self, job_id: str, outcome: str, **fields: Any) -> bool:
        """running → `outcome` (succeeded, failed or cancelled) with `fields` (exit_code, error, artifacts).

        Returns True when the job was still running. Raises ValueError for an outcome that is not final.
        """
        if outcome not in FINAL:
            raise ValueError(f"{outcome!r} is not a final job state ({', '.join(FINAL)})")
        return self._move(job_id, "finish", outcome, {**fields, "finished_at": time.time()})

    def interrupt(self, job_id: str, error: str) -> bool:
        """running → interrupted (its worker stopped or is gone), counted, with `error`. Returns True when it moved."""
        return self._move(job_id, "interrupt", INTERRUPTED, {"finished_at": time.time(), "error": error},
                          increment=("interruptions",))

    def cancel(self, job_id: str, error: str = "cancelled by request") -> bool:
        """queued or interrupted → cancelled: the job never runs (again). Returns True when it moved."""
        return self._move(job_id, "cancel", CANCELLED, {"finished_at": time.time(), "error": error})

    def request_cancel(self, job_id: str) -> bool:
        """Ask the worker of a running job to stop it (its state stays running). Returns True when it runs."""
        return self._set(job_id, (RUNNING,), {"cancel_requested": 1})

    def resume(self, job_id: str) -> bool:
        """interrupted, failed or cancelled → queued again. Returns True when it moved (enqueue it then)."""
        return self._move(job_id, "resume", QUEUED, dict(REQUEUED_FIELDS))

    def auto_resume(self, job_id: str) -> bool:
        """interrupted → queued again (a `resume: auto` job after a crash). Returns True when it moved."""
        return self._move(job_id, "auto_resume", QUEUED, dict(REQUEUED_FIELDS))


NUMBER_FIELDS = ("created_at", "started_at", "finished_at")
INTEGER_FIELDS = ("pid", "exit_code", "attempts", "interruptions", "nproc")


def _decode(row: sqlite3.Row) -> dict[str, Any]:
    """Return a row as a job mapping. A damaged row (bad JSON, text where a number belongs) is
    returned with `damaged` naming the fields and those fields emptied, never raising."""
    data = dict(row)
    problems: list[str] = []
    for key in JSON_FIELDS:
        if data.get(key) is not None:
            try:
                data[key] = json.loads(data[key])
            except (TypeError, ValueError) as exc:
                problems.append(f"{key}: invalid JSON ({exc})")
                data[key] = None
    for key, kind in [*((k, float) for k in NUMBER_FIELDS), *((k, int) for k in INTEGER_FIELDS)]:
        value = data.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            problems.append(f"{key}: {str(value)[:40]!r} is not a number")
            data[key] = None
        elif value is not None:
            data[key] = kind(value)
    for key, expected in (("params", dict), ("argv", list), ("progress", dict), ("artifacts", dict)):
        if data.get(key) is not None and not isinstance(data[key], expected):
            problems.append(f"{key}: expected a JSON {expected.__name__}")
            data[key] = None
    data["damaged"] = "; ".join(problems) or None
    data["cancel_requested"] = bool(data.get("cancel_requested"))
    data["gpu"] = bool(data.get("gpu"))
    return data
