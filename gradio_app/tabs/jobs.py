"""Jobs tab: every job with status, progress and duration; its log; cancel and resume."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import gradio as gr

from core.errors import InputError
from core.runs import format_seconds, progress_view
from gradio_app.common import (LiveTimer, UIContext, follow_request, job_duration, kind_words, plain_text,
                               request_message, ui_action)
from gradio_app.runner import job_states, job_subject

HEADERS = ["id", "run · stage", "what", "status", "progress", "duration", "created", "error"]
COLUMN_WIDTHS = ["9%", "16%", "11%", "8%", "18%", "7%", "7%", "24%"]  # wide enough that no header breaks a word
REFRESH_S = 3.0
ANNOUNCED = 3  # finished jobs announced at once at the top of every page
ANNOUNCE_FOR_S = 120.0  # how long a finished job stays announced


def age_text(job: dict[str, Any], now: float | None = None) -> str:
    """Return how long ago a job was created, as `3m05s ago`."""
    created = job.get("created_at")
    if not created:
        return "—"
    return f"{format_seconds((now or time.time()) - created)} ago"


def job_names(jobs: list[dict[str, Any]]) -> dict[str, str]:
    """Return job id → what it is to a person: `run · stage` for a journey's stage jobs (from the journey's
    progress), the journey's run for a journey, else `job_subject`."""
    names: dict[str, str] = {}
    for job in jobs:
        metrics = (job.get("progress") or {}).get("metrics") or {}
        journey = metrics.get("journey") or (job.get("artifacts") or {}).get("name")
        if journey:
            names[job["id"]] = str(journey)
        for stage_id, title in (metrics.get("stage_jobs") or {}).items():
            names[stage_id] = f"{journey} · {title}" if journey else str(title)
    for job in jobs:
        if job["id"] not in names:
            names[job["id"]] = job_subject(job)
    return names


def job_choices(jobs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Return the Job dropdown's (label, id) pairs: `id · run · stage · kind · status · age`."""
    now = time.time()
    names = job_names(jobs)
    return [(f"{job['id']} · {names[job['id']]} · {kind_words(job.get('kind'))} · {job.get('status')} · {age_text(job, now)}",
             job["id"]) for job in jobs]


def finished_lines(jobs: list[dict[str, Any]], since: float, now: float | None = None) -> str:
    """Return the announcement of the jobs that ended after `since` (epoch seconds), newest first, as Markdown
    lines: `✓ Training job j1 (my-run) succeeded 12s ago.` A journey's stage jobs are not announced (the
    journey is); "" when none ended."""
    now = now or time.time()
    names = job_names(jobs)
    staged = {stage_id for job in jobs for stage_id in
              (((job.get("progress") or {}).get("metrics") or {}).get("stage_jobs") or {})}
    ended = [job for job in jobs if job.get("finished_at") and job["finished_at"] > since
             and job.get("status") in job_states.FINAL and job["id"] not in staged]
    lines = []
    for job in sorted(ended, key=lambda j: j["finished_at"], reverse=True)[:ANNOUNCED]:
        mark = "✓" if job["status"] == job_states.SUCCEEDED else "✗"
        lines.append(f"{mark} {kind_words(job.get('kind'), start=True)} job `{job['id']}` ({names[job['id']]}) "
                     f"{job['status']} {format_seconds(now - job['finished_at'])} ago — details in the Jobs tab.")
    return "\n\n".join(lines)


def job_rows(jobs: list[dict[str, Any]]) -> list[list[Any]]:
    """Return the table rows of the Jobs tab for `jobs` (a queued job's progress column says what it waits for)."""
    rows = []
    names = job_names(jobs)
    for job in jobs:
        created = job.get("created_at")
        rows.append([
            job.get("id"),
            names[job["id"]],
            kind_words(job.get("kind")),
            "damaged" if job.get("damaged") else job.get("status"),
            job.get("waits_for") or progress_view(job.get("progress"), job_status=job.get("status")).text(),
            format_seconds(job_duration(job)),
            dt.datetime.fromtimestamp(created).strftime("%H:%M:%S") if created else "—",
            plain_text(job.get("damaged") or job.get("error") or "")[:160],
        ])
    return rows


def build(ctx: UIContext, demo: gr.Blocks) -> LiveTimer:
    """Lay out the Jobs tab; return its live timer."""
    runner = ctx.runner

    def refresh(selected: str | None) -> tuple[Any, Any, Any]:
        jobs = runner.list()
        by_id = {j["id"]: j for j in jobs}
        value = selected if selected in by_id else (jobs[0]["id"] if jobs else None)
        cancellable = value in by_id and by_id[value]["status"] in job_states.CANCELLABLE
        return (gr.update(value=job_rows(jobs)), gr.update(choices=job_choices(jobs), value=value),
                gr.update(interactive=cancellable))

    def selected(job_id: str | None) -> str:
        if not job_id:
            raise InputError("select a job in the list first.")
        return job_id

    @ui_action(outputs=2)
    def show_log(job_id: str | None) -> tuple[str, str]:
        return "", runner.log_tail(selected(job_id), 300) or "(the log is empty so far)"

    @ui_action(outputs=2)
    def cancel(job_id: str | None) -> tuple[str, Any]:
        return request_message("Cancel", runner.cancel(selected(job_id)))

    @ui_action(outputs=2)
    def resume(job_id: str | None) -> tuple[str, Any]:
        return request_message("Resume", runner.resume(selected(job_id)))

    with gr.Tab("Jobs", id="jobs") as tab:
        gr.Markdown("Every job runs on the queue, not in this page: closing the tab stops nothing.")
        table = gr.Dataframe(headers=HEADERS, value=[], interactive=False, wrap=True, elem_id="jobs-table",
                             column_widths=COLUMN_WIDTHS)
        with gr.Row():
            job_id = gr.Dropdown(label="Job (run · stage · what · status · age)", choices=[], allow_custom_value=True,
                                 elem_id="jobs-select", scale=3)
            refresh_btn = gr.Button("Refresh", size="sm")
            log_btn = gr.Button("Open log", size="sm", elem_id="jobs-log-btn")
            cancel_btn = gr.Button("Cancel", size="sm", variant="stop", interactive=False, elem_id="jobs-cancel-btn")
            resume_btn = gr.Button("Resume", size="sm", elem_id="jobs-resume-btn")
        message = gr.Markdown(elem_id="jobs-message")
        followed = gr.State(None)  # the Cancel or Resume request the message shows, kept current by the timer
        log = gr.Textbox(label="Log", lines=16, max_lines=30, interactive=False, elem_id="jobs-log")
        timer = gr.Timer(REFRESH_S, active=False)  # ticking while the tab is in view

    def tick(job_id: str | None, asked: dict[str, Any] | None, shown: str | None) -> tuple[Any, ...]:
        return (*refresh(job_id), *follow_request(runner, asked, shown))

    listing = [table, job_id, cancel_btn]
    timer.tick(tick, inputs=[job_id, followed, message], outputs=[*listing, message, followed], show_progress="hidden",
               queue=False)  # off the queue: about half the page's work of a queued tick (LiveTimer)
    tab.select(refresh, inputs=job_id, outputs=listing, show_progress="hidden")
    refresh_btn.click(refresh, inputs=job_id, outputs=listing)
    job_id.input(refresh, inputs=job_id, outputs=listing, show_progress="hidden")
    log_btn.click(show_log, inputs=job_id, outputs=[message, log])
    cancel_btn.click(cancel, inputs=job_id, outputs=[message, followed])
    resume_btn.click(resume, inputs=job_id, outputs=[message, followed])
    demo.load(refresh, inputs=job_id, outputs=listing)
    return LiveTimer(tab, timer)
