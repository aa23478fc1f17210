"""`python -m core jobs submit|list|show|logs|cancel|resume` and the top-level `worker` command.

The `jobs` package (and Huey) is imported inside the handlers only, so `python -m core` starts
without the queue; only its table of states (`jobs.states`, no imports) is read at load. The handlers
hand the runner the CLI's job catalogue (the worker runs recorded argv). A job records the `--settings`
file it was submitted with; the worker's `--settings` file serves jobs submitted without one.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from core.cli.catalogue import cli_catalogue
from core.cli.common import Result, add_command, add_group, int_in
from core.numbers import MAX_WORKERS
from core.config import Settings, load_settings
from core.errors import InputError
from core.runs import progress_view
from core.tables import render_mapping, render_table
from jobs.states import CANCELLED, STATES


def parse_params(items: list[str]) -> dict[str, Any]:
    """Return `k=v` items as a mapping; a key given several times collects a list.

    Dashes in keys become underscores (`vocab-size=8000` is `vocab_size`).
    Raises InputError for an item without `=`.
    """
    params: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip().lstrip("-").replace("-", "_")
        if not sep or not key:
            raise InputError(f"--param {item!r}: expected KEY=VALUE, e.g. --param vocab_size=8000.")
        if key in params:
            previous = params[key]
            params[key] = [*previous, value] if isinstance(previous, list) else [previous, value]
        else:
            params[key] = value
    return params


def _settings(args: argparse.Namespace) -> Settings:
    return load_settings(args.settings)


def _runner(args: argparse.Namespace) -> Any:
    from jobs.runner import JobRunner

    return JobRunner(_settings(args), catalogue=cli_catalogue())


def _when(stamp: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp)) if stamp else "-"


def _show_text(job: dict[str, Any]) -> str:
    fields = {
        "id": job["id"],
        "kind": job["kind"],
        "status": f"{job['status']} (damaged record: {job['damaged']})" if job.get("damaged") else job["status"],
        **({"waiting": job["waits_for"]} if job.get("waits_for") else {}),
        "progress": progress_view(job["progress"], job_status=job["status"]).text(),
        "metrics": (job["progress"] or {}).get("metrics") or "-",
        "params": job["params"],
        "created": _when(job["created_at"]),
        "started": _when(job["started_at"]),
        "finished": _when(job["finished_at"]),
        "attempts": job["attempts"],
        "log": job["log_path"],
        "settings": job["settings_path"] or "config/default.yaml alone",
        "artifacts": job["artifacts"] or "-",
        "error": job["error"] or "-",
    }
    return render_mapping(fields)


def cmd_submit(args: argparse.Namespace) -> Result:
    """Validate and enqueue one job; print its id."""
    params = parse_params(args.param or [])
    if args.config is not None:
        params["config"] = args.config
    runner = _runner(args)
    job_id = runner.submit(args.kind, params, nproc=args.nproc)
    return Result({"ok": True, "id": job_id, "job": runner.get_job(job_id)}, f"submitted {args.kind} as job {job_id}")


def cmd_list(args: argparse.Namespace) -> Result:
    """List jobs newest first."""
    jobs = _runner(args).list_jobs(status=args.status, limit=args.limit)
    rows = [
        (j["id"], j["kind"], "damaged" if j.get("damaged") else j["status"],
         progress_view(j["progress"], job_status=j["status"]).text(), _when(j["created_at"]),
         (j["damaged"] or j["error"] or "")[:60])
        for j in jobs
    ]
    text = render_table(["id", "kind", "status", "progress", "created", "error"], rows) if rows else "no jobs"
    return Result({"ok": True, "jobs": jobs}, text)


def cmd_show(args: argparse.Namespace) -> Result:
    """Show one job's record."""
    job = _runner(args).get_job(args.id)
    return Result({"ok": True, "job": job}, _show_text(job))


def cmd_logs(args: argparse.Namespace) -> Result:
    """Print a job's log, or follow it until the job finishes."""
    runner = _runner(args)
    if args.follow and not args.json:
        for chunk in runner.follow_log(args.id):
            sys.stdout.write(chunk)
            sys.stdout.flush()
        job = runner.get_job(args.id)
        return Result({"ok": True, "status": job["status"]}, f"[job {args.id} {job['status']}]")
    if args.follow:
        runner.wait(args.id, timeout_s=float("inf"))
    log = runner.read_log(args.id, tail=args.tail)
    return Result({"ok": True, "id": args.id, "log": log}, log or f"(job {args.id} has no output yet)")


def cmd_cancel(args: argparse.Namespace) -> Result:
    """Cancel a queued or running job."""
    job = _runner(args).cancel(args.id)
    note = "cancelled" if job["status"] == CANCELLED else "cancel requested; the worker is stopping it"
    return Result({"ok": True, "job": job}, f"job {args.id}: {note}")


def cmd_resume(args: argparse.Namespace) -> Result:
    """Queue an interrupted, failed or cancelled job again."""
    job = _runner(args).resume(args.id)
    return Result({"ok": True, "job": job}, f"job {args.id} queued again")


def cmd_worker(args: argparse.Namespace) -> Result:
    """Run a job consumer in the foreground until SIGINT or SIGTERM."""
    import logging

    from jobs.worker import Worker

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    worker = Worker(_settings(args), workers=args.workers)
    sys.stderr.write(f"worker: {worker.describe()}\n")
    sys.stderr.flush()
    report = worker.run()
    return Result({"ok": True, "recovery": report}, "worker stopped")


def _add_settings(parser: argparse.ArgumentParser, jobs_load: str = "") -> None:
    parser.add_argument("--settings", metavar="FILE",
                        help=f"YAML applied over config/default.yaml (default: $LINGUAFORGE_SETTINGS){jobs_load}")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Register the `jobs` group and the `worker` command."""
    group = add_group(subparsers, "jobs", "submit and watch background jobs")

    p = add_command(group, "submit", cmd_submit, "validate and enqueue a job (KIND is a dotted command)")
    p.add_argument("kind", help="the command to run, dotted: tokenizer.train, train, dataset.import …")
    p.add_argument("--config", metavar="FILE", help="passed to the command as --config FILE")
    p.add_argument("--param", action="append", metavar="KEY=VALUE", help="a command option; repeat for lists")
    p.add_argument("--nproc", type=int_in(1, 64), default=1, metavar="N", help="train on N GPUs under torchrun, one GPU slot each (train only)")
    _add_settings(p, "; recorded with the job, whose process loads it")

    p = add_command(group, "list", cmd_list, "list jobs, newest first")
    p.add_argument("--status", choices=STATES)
    p.add_argument("--limit", type=int_in(1, 100_000), default=None)
    _add_settings(p)

    p = add_command(group, "show", cmd_show, "show one job: status, progress, artifacts, error")
    p.add_argument("id")
    _add_settings(p)

    p = add_command(group, "logs", cmd_logs, "print a job's log")
    p.add_argument("id")
    p.add_argument("--tail", type=int_in(0, 1_000_000), default=None, metavar="N", help="only the last N lines")
    p.add_argument("--follow", action="store_true", help="keep printing until the job finishes")
    _add_settings(p)

    for name, handler, help_text in (
        ("cancel", cmd_cancel, "cancel a queued or running job"),
        ("resume", cmd_resume, "queue an interrupted, failed or cancelled job again"),
    ):
        p = add_command(group, name, handler, help_text)
        p.add_argument("id")
        _add_settings(p)

    p = add_command(subparsers, "worker", cmd_worker, "run a job consumer (thread workers) until stopped")
    p.add_argument("--workers", type=int_in(1, MAX_WORKERS), default=None, help="worker threads (default queue.workers)")
    _add_settings(p, "; also loaded by the jobs submitted without one")
